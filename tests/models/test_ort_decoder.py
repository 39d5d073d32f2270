"""ONNX Runtime decoding (models.ort_decoder): "ort" computes what PyTorch's float model computes,
step by step and sentence by sentence; "ort-int8" still translates a trained toy task."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, numpy_helper
from torch import nn

from models.bundle import load_bundle
from models.decoding import beam_search
from models.ort_decoder import (
    PARALLEL_POSITIONS,
    OrtDecoder,
    _export,
    _quantize,
    int8_weights,
    supports,
    thread_budget,
)
from models.quantize import resolve
from models.semiparametric import MEMORY_MODES, Neighbours, SemiParametricModel
from models.translator import DecodeOptions, Translator
from tests.models.step_case import BEAMS, both_started, both_steps, step_case, uneven_neighbours
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

TEXTS = ["red house", "two blue tree", "green", "one two three four five"]


def test_ort_float_translates_exactly_as_pytorch(bundle: Path) -> None:
    loaded = load_bundle(bundle)
    torch_float = Translator.from_loaded(loaded, "none")
    ort = Translator.from_loaded(loaded, "ort")
    texts = [s for s, _ in toy_pairs(120, seed=7)]
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam)
        assert ort.translate(texts, options) == torch_float.translate(texts, options)
    # alone and batched
    assert ort.translate(texts[:5], DecodeOptions(batch_size=1)) == torch_float.translate(
        texts[:5], DecodeOptions(batch_size=1)
    )


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_each_step_gives_pytorchs_best_tokens(memory_bundle: Path, mode: str) -> None:
    """Step by step, beams sharing their sentence's keys/values, some sentences without a
    memory, each memory variant: the graph's best tokens and their log-probs are those of the
    float model's log-probs constrained as `models.decoding` does (pad and BOS never, the
    banned tokens never, EOS alone on a forced row), up to rounding; its gates too."""
    model, ort, src, neighbours = step_case(memory_bundle, mode, "ort")
    k, n = BEAMS, 6
    with torch.inference_mode():
        states, caches, tokens = both_started(model, ort, src, neighbours)
        assert torch.allclose(states[0].memory, states[1].memory, atol=1e-5)
        assert torch.equal(states[0].retrieved_pad, states[1].retrieved_pad)
        real = ~states[0].retrieved_pad  # padding is masked, and zero from the packed encoder
        assert torch.allclose(states[0].retrieved[real], states[1].retrieved[real], atol=1e-5)
        for step in range(4):
            # the float model's log-probs constrained here; the graph is told the same
            want, got_lp, got_ids, _ = both_steps(model, ort, states, caches, tokens, step, n)
            want_lp, want_ids = want.topk(n, dim=-1)
            live = np.isfinite(got_lp)
            assert np.array_equal(live, np.isfinite(want_lp.numpy()))
            assert np.array_equal(got_ids[live], want_ids.numpy()[live])
            assert np.allclose(got_lp[live], want_lp.numpy()[live], atol=1e-4)
            assert not np.isin(got_ids[live], [model.config.pad_id, model.config.bos_id]).any()
            assert got_ids[step, 0] == model.config.eos_id and not live[step, 1:].any()
            assert torch.allclose(ort.last_gates()[:, -1], model.last_gates()[:, -1], atol=1e-5)
            tokens = torch.randint(4, model.config.vocab_size, tokens.shape)
        # the sentence without a memory reads the source alone: gate exactly 1
        assert torch.equal(ort.last_gates()[k : 2 * k, -1], torch.ones(k))


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_the_memory_encoder_computes_real_tokens_only(memory_bundle: Path, mode: str) -> None:
    """Neighbours of very different lengths, more slots than one length group holds: the
    graph is called once per length group, is fed exactly the retrieved pairs' real tokens and
    each group's query sentences once, and its memory equals the float model's padded
    encoding in every variant."""
    from models import ort_decoder, semiparametric

    config = dataclasses.replace(load_bundle(memory_bundle).model.config, memory_mode=mode)
    torch.manual_seed(1)
    model = SemiParametricModel(config).eval()
    ort = OrtDecoder(model, "ort")
    # 18 sentences x 4 neighbours, one sentence without: 68 slots, several groups
    src, neighbours, pairs = uneven_neighbours(config, 18)
    fed: list[dict[str, np.ndarray]] = []
    graph = ort._encoder.memory_encoder.graph
    run = graph.run

    def spy(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        fed.append(feed)
        return run(feed)

    graph.run = spy  # type: ignore[method-assign]
    with torch.inference_mode():
        want, got = model.encode(src, neighbours), ort.encode(src, neighbours)
    assert len(fed) == min(semiparametric.PACKED_GROUPS, -(-68 // semiparametric.PACKED_GROUP_MIN))
    assert len(fed) > 1
    real_targets = sum(len(t) for p in pairs for _, t in p)
    assert sum(len(f["tgt"]) for f in fed) == real_targets
    if mode == "cstm":
        assert sum(len(f["src"]) for f in fed) == sum(len(s) for p in pairs for s, _ in p)
    for f in fed:
        # each of the group's query sentences once, not per neighbour nor the whole batch's
        assert np.array_equal(np.unique(f["rows"]), np.arange(len(f["context"])))
        # the call's width for its thread count: the tokens it computes, not their padded layout
        padded = sum(f[k].size for k in ("t_pad", "s_pad") if k in f)
        real = sum(len(f[k]) for k in ("tgt", "src") if k in f)
        assert ort_decoder._positions(f) == real <= padded
    assert sum(len(f["context"]) for f in fed) < len(fed) * len(src)
    assert torch.equal(got.retrieved_pad, want.retrieved_pad)
    real = ~want.retrieved_pad
    torch.testing.assert_close(got.retrieved[real], want.retrieved[real], atol=1e-5, rtol=0)


def test_a_memory_model_decodes_with_and_without_neighbours(memory_bundle: Path) -> None:
    loaded = load_bundle(memory_bundle)
    torch_float = Translator.from_loaded(loaded, "none")
    ort = Translator.from_loaded(loaded, "ort")
    pairs = [toy_pairs(3, seed=i) for i in range(len(TEXTS))]
    pairs[2] = []  # one sentence with nothing retrieved
    options = DecodeOptions(beam_size=4)
    want = torch_float.translate_detailed(TEXTS, options, neighbours=pairs, gates=True)
    got = ort.translate_detailed(TEXTS, options, neighbours=pairs, gates=True)
    assert [t.text for t in got] == [t.text for t in want]
    for a, b in zip(got, want, strict=True):
        assert (a.gate is None) == (b.gate is None)
        if a.gate is not None:
            assert a.gate == pytest.approx(b.gate, abs=1e-4)
    # no neighbour anywhere in the batch: the graph without a memory
    empty = [[] for _ in TEXTS]
    assert ort.translate(TEXTS, options, neighbours=empty) == torch_float.translate(
        TEXTS, options, neighbours=empty
    )


def test_dropping_finished_sentences_compacts_the_cache_in_place(memory_bundle: Path) -> None:
    """The kept sentences' keys and values are those `index_select` gives, in the storage they
    were in (only the sentences whose place changed are copied); the hypotheses' own rows are
    reordered by the next step."""
    model = OrtDecoder(load_bundle(memory_bundle).model, "ort")
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0], [10, 2, 0, 0], [11, 12, 13, 2]])
    pairs = [[([3 + i, 4, 5], [6, 7 + i]), ([8, 9], [10 + i])] for i in range(4)]
    nb = Neighbours.from_lists(pairs, model.config.pad_id)
    with torch.inference_mode():
        cache = model.init_cache(model.encode(src, nb))
        before = {k: v.clone() for k, v in cache.layers[0].items()}
        storage = {k: v.data_ptr() for k, v in cache.layers[0].items()}
        sentences = torch.tensor([0, 3, 2])  # 1 dropped: 3 moves into its place
        kept = cache.select_sentences(sentences, torch.arange(6))
    for key, was in before.items():
        assert torch.equal(kept.layers[0][key], was.index_select(0, sentences)), key
        assert kept.layers[0][key].data_ptr() == storage[key], key


def test_int8_still_translates_the_toy_task(bundle: Path) -> None:
    """On 200 toy sentences ort-int8 says what float says nearly always (as PyTorch's int8
    decoder does, tests/models/test_quantize.py) and is right as often, give or take two."""
    fp32 = Translator.from_bundle(bundle)
    int8 = Translator.from_bundle(bundle, quantize="ort-int8")
    texts = [s for s, _ in toy_pairs(200, seed=99)]
    options = DecodeOptions(beam_size=4)
    want, got = fp32.translate(texts, options), int8.translate(texts, options)
    assert sum(a == b for a, b in zip(got, want, strict=True)) >= 194
    right = [sum(o == gloss(t) for o, t in zip(out, texts, strict=True)) for out in (want, got)]
    assert right[1] >= right[0] - 2, right
    assert int8.translate(TEXTS[:3], options) == [gloss(t) for t in TEXTS[:3]]


def test_the_bundle_model_is_shared_and_unchanged(bundle: Path) -> None:
    """Retrieval may encode with the bundle's model: the ONNX decoder names it `float_model`
    and leaves it float and untouched."""
    loaded = load_bundle(bundle)
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    ort = Translator.from_loaded(loaded, "ort-int8").model
    assert ort.float_model is loaded.model
    assert all(torch.equal(v, loaded.model.state_dict()[k]) for k, v in before.items())
    assert loaded.model.encoder_layers[0].ffn.fc1.weight.dtype == torch.float32


def test_narrow_calls_run_on_one_thread_wide_ones_on_the_budget(bundle: Path) -> None:
    """A call narrower than PARALLEL_POSITIONS runs on one thread whatever torch's count; a
    wide one on torch's count, or on the thread's `thread_budget` inside one."""
    model = load_bundle(bundle).model
    ort = OrtDecoder(model, "ort")
    narrow = torch.tensor([[5, 6, 7, 2]])
    wide = narrow.repeat(PARALLEL_POSITIONS, 1)  # beam 2: twice as many rows as needed
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        beam_search(ort, narrow, beam_size=2)
        assert set(ort._steps[False]._sessions) == {1}
        with thread_budget(1):
            beam_search(ort, wide, beam_size=2)
        assert set(ort._steps[False]._sessions) == {1}
        beam_search(ort, wide, beam_size=2)
        assert set(ort._steps[False]._sessions) == {1, 2}
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(ValueError, match="at least 1"):
        with thread_budget(0):
            pass


def test_batches_decoded_at_once_give_the_same_translations(memory_bundle: Path) -> None:
    """With two threads an ONNX Runtime model decodes two batches at once, each on one
    thread: the texts, their order and their gates are those of one batch after another."""
    loaded = load_bundle(memory_bundle)
    ort = Translator.from_loaded(loaded, "ort")
    texts = [s for s, _ in toy_pairs(40, seed=3)]
    pairs = [toy_pairs(2, seed=i) for i in range(len(texts))]
    options = DecodeOptions(beam_size=2, batch_size=4)
    threads = torch.get_num_threads()
    done: list[int] = []
    try:
        torch.set_num_threads(1)
        assert ort._workers(10) == 1
        want = ort.translate_detailed(texts, options, neighbours=pairs, gates=True)
        torch.set_num_threads(2)
        assert ort._workers(10) == 2 and ort._workers(1) == 1
        got = ort.translate_detailed(
            texts, options, neighbours=pairs, gates=True, progress=done.append
        )
    finally:
        torch.set_num_threads(threads)
    assert got == want
    assert sorted(done) == [4] * 10
    # PyTorch models keep state between a step and its gates: one batch at a time
    assert Translator.from_loaded(loaded, "none")._workers(10) == 1


@pytest.mark.unit
def test_modes_and_architectures_are_checked() -> None:
    from models.byte_fusion import ByteFusionConfig, ByteFusionTransformer

    byte = ByteFusionTransformer(
        ByteFusionConfig(d_model=32, n_heads=2, enc_layers=2, dec_layers=1, d_ff=64)
    )
    assert not supports(byte)
    with pytest.raises(ValueError, match="no ONNX Runtime path for ByteFusionTransformer"):
        OrtDecoder(byte, "ort")
    with pytest.raises(ValueError, match="mode must be one of"):
        OrtDecoder(byte, "int8")
    # auto: what a model that ONNX Runtime cannot run falls back to on the CPU
    assert resolve("auto", "cpu", byte) == "int8"
    assert resolve("auto", "cuda", byte) == "none"


def test_a_dense_store_of_the_float_model_encodes_once_for_the_ort_one(
    bundle: Path, tmp_path: Path
) -> None:
    """Retrieval encodes a query with the bundle's float encoder, and the ONNX decoder reads
    that very encoding: a request is still encoded once."""
    from index_builder.corpus import Pair
    from index_builder.store import build_store, load_retriever, open_store

    loaded = load_bundle(bundle)
    pairs = [Pair(s, t) for s, t in toy_pairs(20, seed=3)]
    path = build_store(pairs, "toy", "dense-ngram", tmp_path, {"widths": [2]}, model=bundle)
    retriever = load_retriever(open_store(path), loaded)
    assert retriever.encodes_with(Translator.from_loaded(loaded, "ort-int8").model)


@pytest.mark.unit
def test_int8_weights_fit_what_the_cpu_sums_exactly(monkeypatch) -> None:
    monkeypatch.delenv("RAGMT_INT8_WEIGHTS", raising=False)
    assert int8_weights(frozenset({"avx2", "fma"})) == "s7"  # AVX2: int16 sums, 7 bits fit
    assert int8_weights(frozenset({"sse4_2"})) == "u8"  # no AVX2
    assert int8_weights(frozenset()) == "u8"  # unknown CPU
    for exact in ("avx512_vnni", "avx_vnni", "amx_int8"):
        assert int8_weights(frozenset({"avx2", exact})) == "s8"
    monkeypatch.setenv("RAGMT_INT8_WEIGHTS", "u8")
    assert int8_weights(frozenset({"avx512_vnni"})) == "u8"
    monkeypatch.setenv("RAGMT_INT8_WEIGHTS", "s7")
    assert int8_weights(frozenset({"avx512_vnni"})) == "s7"
    monkeypatch.setenv("RAGMT_INT8_WEIGHTS", "auto")
    assert int8_weights(frozenset({"avx512_vnni"})) == "s8"
    monkeypatch.setenv("RAGMT_INT8_WEIGHTS", "int4")
    with pytest.raises(ValueError, match="RAGMT_INT8_WEIGHTS must be auto or one of"):
        int8_weights()


@pytest.mark.unit
def test_s7_weights_keep_two_products_within_an_int16_sum() -> None:
    """AVX2's u8 x s8 kernels add products in pairs into int16: with s7 weights every pair
    of a uint8 activation (at most 255) and a weight stays within 32,767; s8's do not."""
    torch.manual_seed(0)
    graph = _export(nn.Linear(64, 32), {"x": torch.zeros(2, 64)}, ["y"], {"x": {0: "rows"}})
    widest = {}
    for kind in ("s7", "s8"):
        model = onnx.load_from_string(_quantize(graph, kind))
        int8 = [t for t in model.graph.initializer if t.data_type == TensorProto.INT8]
        weights = [numpy_helper.to_array(t).astype(np.int32) for t in int8]
        widest[kind] = max(int(np.abs(w).max()) for w in weights if w.ndim == 2)
    assert 2 * 255 * widest["s7"] <= 32_767 < 2 * 255 * widest["s8"]


def test_int8_translates_the_toy_task_with_this_cpus_weights_and_u8(
    bundle: Path, monkeypatch
) -> None:
    """This CPU's default weight type (s8 where its sums are exact), s7 and the u8 fallback
    each agree with float on nearly every toy sentence."""
    loaded = load_bundle(bundle)
    texts = [s for s, _ in toy_pairs(200, seed=11)]
    options = DecodeOptions(beam_size=4)
    want = Translator.from_loaded(loaded, "ort").translate(texts, options)
    monkeypatch.delenv("RAGMT_INT8_WEIGHTS", raising=False)
    for weights in sorted({int8_weights(), "s7", "u8"}):
        monkeypatch.setenv("RAGMT_INT8_WEIGHTS", weights)
        got = Translator.from_loaded(loaded, "ort-int8").translate(texts, options)
        assert sum(a == b for a, b in zip(got, want, strict=True)) >= 194, weights
