"""Semi-parametric model: config, memory masks, exact fallbacks, decoding and a retrieval task.

The toy task puts the answer only in the neighbours (a random target per example, given by the
neighbour whose source equals the query, next to a distractor), so a model that learns it
must read the right neighbour through the memory path, and without neighbours it must fail.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models.bundle import load_bundle, save_bundle
from models.decoding import beam_search, greedy
from models.registry import ARCHITECTURES, build_model
from models.semiparametric import (
    MEMORY_MODES,
    GatedDecoderLayer,
    Neighbours,
    SemiParametricConfig,
    SemiParametricModel,
    SemiParametricState,
    from_transformer,
)
from models.transformer import Transformer, TransformerConfig
from tests.models.per_row import PerRowDecoding

pytestmark = pytest.mark.unit

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

V, PAD, BOS, EOS = 24, 0, 1, 2
D = 32
SIZES = dict(vocab_size=V, d_model=D, n_heads=4, enc_layers=2, dec_layers=2, d_ff=64)


def tiny(seed: int = 0, **overrides: object) -> SemiParametricModel:
    kw = dict(SIZES, max_len=32, max_neighbour_len=8, max_neighbours=4)
    kw.update(overrides)
    torch.manual_seed(seed)
    model = SemiParametricModel(SemiParametricConfig(**kw)).eval()
    # Random gate weights: at initialisation they are zero and every gate is sigmoid(2);
    # random ones make the gate differ per position, so the tests below can see it move.
    with torch.no_grad():
        for layer in model.decoder_layers:
            layer.gate_source.weight.normal_(0.0, 1.0)
            layer.gate_memory.weight.normal_(0.0, 1.0)
    return model


def tokens(lengths: list[int], width: int, g: torch.Generator) -> torch.Tensor:
    """Right-padded rows of random real tokens (ids 3..V-1)."""
    out = torch.full((len(lengths), width), PAD)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(3, V, (n,), generator=g)
    return out


def neighbours(lengths: list[list[int]], width: int = 6, seed: int = 0) -> Neighbours:
    """Neighbours with the given target length per sentence and slot (0 = absent slot).

    Present slots get a source of 2..width tokens; absent slots are all padding.
    """
    g = torch.Generator().manual_seed(seed)
    b, n = len(lengths), max((len(row) for row in lengths), default=0)
    src = torch.full((b, n, width), PAD)
    tgt = torch.full((b, n, width), PAD)
    for i, row in enumerate(lengths):
        for j, lt in enumerate(row):
            if lt:
                ls = int(torch.randint(2, width + 1, (1,), generator=g))
                src[i, j, :ls] = torch.randint(3, V, (ls,), generator=g)
                tgt[i, j, :lt] = torch.randint(3, V, (lt,), generator=g)
    return Neighbours(src=src, tgt=tgt)


@pytest.fixture()
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = tokens([5, 3, 6], width=6, g=g)
    tgt_in = tokens([5, 5, 5], width=5, g=g)
    tgt_in[:, 0] = BOS
    return src, tgt_in


# Row 0: two neighbours of different lengths and a padded slot; row 1: only absent slots;
# row 2: one full-width neighbour.
MIXED = [[4, 0, 2], [0, 0, 0], [6, 0, 0]]


# --------------------------------------------------------------------------- config


def test_config_rejects_unknown_key_by_name() -> None:
    with pytest.raises(ValueError, match="memory_layer"):
        SemiParametricConfig.from_dict({"vocab_size": V, "memory_layer": 2})


def test_config_round_trips_and_keeps_transformer_checks() -> None:
    cfg = SemiParametricConfig(vocab_size=V, memory_mode="ctm", memory_layers=2)
    assert SemiParametricConfig.from_dict(cfg.to_dict()) == cfg
    assert isinstance(cfg, TransformerConfig)
    with pytest.raises(ValueError, match="divisible"):
        SemiParametricConfig(vocab_size=V, d_model=30, n_heads=4)


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"memory_mode": "knn"}, "memory_mode"),
        ({"memory_layers": 0}, "memory_layers"),
        ({"max_neighbours": 0}, "max_neighbours"),
        ({"max_neighbour_len": 40, "max_len": 32}, "max_neighbour_len"),
        ({"memory_layers": True}, "memory_layers"),
        ({"memory_init": "copy"}, "memory_init"),
    ],
)
def test_config_rejects_bad_memory_values(bad: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        SemiParametricConfig(**{"vocab_size": V, **bad})


def test_registry_names_the_architecture() -> None:
    spec = ARCHITECTURES["semiparametric"]
    assert (spec.config, spec.model) == (SemiParametricConfig, SemiParametricModel)
    assert spec.reads == ("sentence-pairs",) and spec.decoding == "autoregressive"
    model = build_model("semiparametric", {**SIZES, "memory_mode": "tm"})
    assert isinstance(model, SemiParametricModel)
    assert model.config.memory_mode == "tm"


# --------------------------------------------------------------------------- inputs


def test_neighbours_from_lists_pads_and_checks_shapes() -> None:
    nb = Neighbours.from_lists([[([5, 6], [7]), ([8], [9, 10, 11])], []], pad_id=PAD)
    assert nb.src.tolist() == [[[5, 6], [8, 0]], [[0, 0], [0, 0]]]
    assert nb.tgt.tolist() == [[[7, 0, 0], [9, 10, 11]], [[0, 0, 0], [0, 0, 0]]]
    assert nb.count == 2
    assert Neighbours.from_lists([[], []], pad_id=PAD).tgt.shape == (2, 0, 0)
    with pytest.raises(ValueError, match="differ"):
        Neighbours(src=torch.zeros(2, 3, 4, dtype=torch.long), tgt=torch.zeros(2, 2, 4))
    with pytest.raises(ValueError, match=r"\(B, N, L\)"):
        Neighbours(src=torch.zeros(2, 3, dtype=torch.long), tgt=torch.zeros(2, 3, 4))


def test_encode_refuses_too_many_or_too_long_neighbours(batch) -> None:
    src, _ = batch
    model = tiny()
    with pytest.raises(ValueError, match="max_neighbours"):
        model.encode(src, neighbours([[1] * 5] * 3))
    with pytest.raises(ValueError, match="max_neighbour_len"):
        model.encode(src, neighbours([[1]] * 3, width=9))
    with pytest.raises(ValueError, match="2 sentences"):
        model.encode(src, neighbours([[1]] * 2))
    nb = neighbours([[2], [2], [2]])
    nb.src[1] = PAD  # a retrieved target without its source: CSTM cannot condition on it
    with pytest.raises(ValueError, match="empty source"):
        model.encode(src, nb)


# --------------------------------------------------------------------------- shapes and masks


def test_state_shapes_and_masks_with_padded_and_absent_neighbours(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    nb = neighbours(MIXED)
    with torch.no_grad():
        state = model.encode(src, nb)
        logits = model(src, tgt_in, nb)
    assert isinstance(state, SemiParametricState)
    assert state.memory.shape == (3, 6, D)
    # The neighbours' tokens concatenated in time, packed: the fullest row has 4 + 2 = 6.
    assert state.retrieved.shape == (3, 6, D)
    expected_pad = [[j >= sum(row) for j in range(6)] for row in MIXED]
    assert state.retrieved_pad.tolist() == expected_pad
    assert state.has_memory.tolist() == [True, False, True]
    assert logits.shape == (3, 5, V) and bool(logits.isfinite().all())
    picked = state.index_select(torch.tensor([2, 2, 0, 1]))
    assert picked.retrieved.shape == (4, 6, D)
    assert picked.has_memory.tolist() == [True, True, True, False]
    assert torch.equal(picked.retrieved[2], state.retrieved[0])


def test_empty_neighbour_sets_translate_like_no_neighbours(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    with torch.no_grad():
        none = model(src, tgt_in)
        zero = model(src, tgt_in, Neighbours.empty(3))  # N = 0
        all_absent = model(src, tgt_in, neighbours([[0, 0], [0, 0], [0, 0]]))
        mixed = model(src, tgt_in, neighbours(MIXED))
    assert bool(none.isfinite().all())
    assert torch.equal(zero, none)
    assert torch.equal(all_absent, none)
    assert torch.equal(mixed[1], none[1])  # the row whose slots are all padding
    assert not torch.allclose(mixed[0], none[0])  # rows with neighbours do read them


def test_gradients_are_finite_with_rows_without_memory(batch) -> None:
    """A fully masked softmax gives NaN, and NaN leaks into gradients through torch.where."""
    src, tgt_in = batch
    model = tiny().train()
    model(src, tgt_in, neighbours(MIXED)).sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert all(bool(g.isfinite().all()) for g in grads.values())
    assert grads["decoder_layers.0.memory_attn.k_proj.weight"].abs().sum() > 0


def test_memory_padding_does_not_change_logits(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    nb = neighbours(MIXED)
    # Wider padding and an extra absent slot must change nothing.
    wider = Neighbours(
        src=F.pad(nb.src, (0, 2, 0, 1), value=PAD), tgt=F.pad(nb.tgt, (0, 2, 0, 1), value=PAD)
    )
    with torch.no_grad():
        a, b = model(src, tgt_in, nb), model(src, tgt_in, wider)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_pack_moves_each_rows_tokens_to_the_front_in_order() -> None:
    from models.semiparametric import _pack

    memory = torch.arange(2 * 6, dtype=torch.float).view(2, 6, 1)  # 2 rows, 2 slots of 3
    pad = torch.tensor([[False, True, True, False, False, True], [True] * 6])
    packed, packed_pad = _pack(memory, pad)
    assert packed[0, :, 0].tolist() == [0.0, 3.0, 4.0]  # slot 0's token, then slot 1's two
    assert packed_pad.tolist() == [[False, False, False], [True, True, True]]
    empty, empty_pad = _pack(memory, torch.ones(2, 6, dtype=torch.bool))
    assert empty.shape == (2, 0, 1) and empty_pad.shape == (2, 0)


def test_packed_memory_gives_the_unpacked_logits(batch, monkeypatch) -> None:
    """Packing drops padding from the memory; attention over it must not change."""
    import models.semiparametric as sp

    src, tgt_in = batch
    model = tiny()
    nb = neighbours(MIXED)
    with torch.no_grad():
        packed = model(src, tgt_in, nb)
        width = model.encode(src, nb).retrieved.size(1)
        monkeypatch.setattr(sp, "_pack", lambda memory, pad: (memory, pad))
        unpacked = model(src, tgt_in, nb)
        assert model.encode(src, nb).retrieved.size(1) == 18 > width
    torch.testing.assert_close(packed, unpacked, atol=1e-5, rtol=0)


def test_length_groups_encode_like_one_padded_call(monkeypatch) -> None:
    """Slots encoded in length groups, each cut to its widest, give the one-call logits."""
    import models.semiparametric as sp

    g = torch.Generator().manual_seed(3)
    src = tokens([int(x) for x in torch.randint(2, 7, (12,), generator=g)], width=6, g=g)
    tgt_in = tokens([4] * 12, width=4, g=g)
    tgt_in[:, 0] = BOS
    lengths = torch.randint(0, 9, (12, 4), generator=g).tolist()
    nb = neighbours(lengths, width=8, seed=4)
    model = tiny()
    widths: list[int] = []
    model.memory_encoder.register_forward_hook(lambda m, args, out: widths.append(out.size(1)))
    with torch.no_grad():
        monkeypatch.setattr(sp, "MEMORY_GROUPS", 1)
        whole = model(src, tgt_in, nb)
        monkeypatch.setattr(sp, "MEMORY_GROUPS", 4)
        monkeypatch.setattr(sp, "MEMORY_GROUP_MIN", 8)
        grouped = model(src, tgt_in, nb)
    assert widths[0] == 8 and len(widths) == 5  # one call, then four
    assert sorted(widths[1:]) == widths[1:] and widths[1] < 8  # shortest group cut short
    torch.testing.assert_close(grouped, whole, atol=1e-5, rtol=0)


def test_no_neighbours_equals_the_gate_forced_open(batch) -> None:
    """With an empty memory the output is what a gate fixed at 1 gives, bit for bit."""
    src, tgt_in = batch
    model = tiny()
    nb = neighbours([[4, 3], [5, 0], [2, 6]])
    with torch.no_grad():
        without = model(src, tgt_in)
        for layer in model.decoder_layers:
            layer.gate_source.bias.fill_(1e4)  # sigmoid(1e4) == 1.0 exactly in float32
        forced = model(src, tgt_in, nb)
        gates = [layer.last_gate for layer in model.decoder_layers]
    assert all(bool(g.eq(1.0).all()) for g in gates)
    assert torch.equal(forced, without)


def test_gate_is_strictly_between_0_and_1_where_there_is_memory(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    with torch.no_grad():
        model(src, tgt_in, neighbours(MIXED))
    for layer in model.decoder_layers:
        assert isinstance(layer, GatedDecoderLayer)
        gate = layer.last_gate  # (B, T)
        assert gate.shape == (3, 5)
        with_memory = gate[[0, 2]]
        assert bool((with_memory > 0).all() and (with_memory < 1).all())
        assert with_memory.std() > 0.01  # a function of the contexts, not a constant
        assert bool(gate[1].eq(1.0).all())  # no memory: the source alone
    expected = torch.cat([layer.last_gate[[0, 2]].flatten() for layer in model.decoder_layers])
    assert model.last_gate_mean() == pytest.approx(float(expected.mean()), abs=1e-6)
    with torch.no_grad():
        model(src, tgt_in)
    assert math.isnan(model.last_gate_mean())


@pytest.mark.parametrize("mode", ["ctm", "tm"])
def test_ablations_run_and_ignore_retrieved_sources(batch, mode: str) -> None:
    src, tgt_in = batch
    model = tiny(memory_mode=mode)
    nb = neighbours(MIXED)
    other_sources = Neighbours(src=neighbours(MIXED, seed=5).src, tgt=nb.tgt)
    with torch.no_grad():
        state = model.encode(src, nb)
        a, b = model(src, tgt_in, nb), model(src, tgt_in, other_sources)
        none = model(src, tgt_in)
    assert state.retrieved.shape == (3, 6, D)  # packed: the fullest row holds 6 tokens
    assert a.shape == (3, 5, V) and bool(a.isfinite().all())
    assert torch.equal(a, b)
    assert torch.equal(a[1], none[1])
    names = " ".join(n for n, _ in model.named_parameters())
    assert "memory_encoder.source_layers" not in names
    assert ("memory_encoder.target_layers.0.cross_attn" in names) == (mode == "ctm")


def test_cstm_reads_the_retrieved_sources(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    nb = neighbours(MIXED)
    other_sources = Neighbours(src=neighbours(MIXED, seed=5).src, tgt=nb.tgt)
    with torch.no_grad():
        a, b = model(src, tgt_in, nb), model(src, tgt_in, other_sources)
    assert not torch.allclose(a[0], b[0])


# --------------------------------------------------------------------------- decoding


def test_decode_step_matches_teacher_forcing_with_neighbours(batch) -> None:
    src, tgt_in = batch
    model = tiny()
    nb = neighbours(MIXED)
    with torch.no_grad():
        state = model.encode(src, nb)
        full = torch.log_softmax(model.decode(tgt_in, state), dim=-1)  # (B, T, V)
        cache = model.init_cache(state)
        steps = [model.decode_step(tgt_in[:, t], state, cache) for t in range(tgt_in.size(1))]
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-5, rtol=0)


# Every row has a memory: decoding steps take the fused gated sublayer.
FULL = [[4, 3, 2], [2, 0, 5], [6, 1, 0]]


def steps_and_teacher_forcing(model: SemiParametricModel, src, tgt_in, nb) -> tuple:
    """Log-probs and gates `(B, T, ...)` step by step (cached) and in one pass (uncached)."""
    with torch.no_grad():
        state = model.encode(src, nb)
        full = torch.log_softmax(model.decode(tgt_in, state), dim=-1)
        full_gates = model.last_gates()
        cache = model.init_cache(state)
        steps, gates = [], []
        for t in range(tgt_in.size(1)):
            steps.append(model.decode_step(tgt_in[:, t], state, cache))
            gates.append(model.last_gates()[:, -1])
    return torch.stack(steps, dim=1), full, torch.stack(gates, dim=1), full_gates


def test_fused_decoding_step_equals_the_gated_sublayer_and_follows_weight_changes(batch) -> None:
    """A step where every row has a memory projects both queries in one matmul and c_s, c_m
    and the gate's logit in another; it must give the unfused sublayer's log-probs and gates,
    and rebuild its fused weights when a weight they come from changes."""
    src, tgt_in = batch
    model = tiny()
    skipped: list[int] = []  # calls of the projections the fused step replaces
    hooks = [
        m.register_forward_hook(lambda *_: skipped.append(1))
        for layer in model.decoder_layers
        for m in (layer.memory_attn.q_proj, layer.cross_attn.out_proj, layer.gate_memory)
    ]
    try:
        with torch.no_grad():
            state = model.encode(src, neighbours(FULL))
            model.decode_step(tgt_in[:, 0], state, model.init_cache(state))
            assert skipped == []  # the fused step ran
            for layer in model.decoder_layers:
                layer.fuse_steps = False
            unfused = model.decode_step(tgt_in[:, 0], state, model.init_cache(state))
            assert len(skipped) == 3 * len(model.decoder_layers)  # the six-matmul sublayer ran
            for layer in model.decoder_layers:
                layer.fuse_steps = True
            fused = model.decode_step(tgt_in[:, 0], state, model.init_cache(state))
        torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=0)
    finally:
        for h in hooks:
            h.remove()
    for change in range(2):
        if change:  # as an optimizer step does, in place
            with torch.no_grad():
                for layer in model.decoder_layers:
                    layer.gate_memory.weight.add_(0.5)
                    layer.memory_attn.out_proj.weight.mul_(1.5)
                    layer.cross_attn.q_proj.bias.add_(0.3)
        steps, full, step_gates, full_gates = steps_and_teacher_forcing(
            model, src, tgt_in, neighbours(FULL)
        )
        torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)
        torch.testing.assert_close(step_gates, full_gates, atol=1e-6, rtol=0)
        assert float(step_gates.std()) > 0.01  # gates that move, so the check can fail
        if not change:
            before = step_gates
    assert not torch.allclose(step_gates, before)  # the changed weights were read


def count_memory_encodings(model: SemiParametricModel) -> tuple[list[int], object]:
    """Rows given to the memory encoder, one entry per call; returns (list, hook handle)."""
    calls: list[int] = []
    handle = model.memory_encoder.register_forward_hook(
        lambda _m, args, _out: calls.append(args[0].size(0))
    )
    return calls, handle


def test_beam_search_encodes_the_memory_once_per_sentence(batch) -> None:
    src, _ = batch
    model = tiny()
    nb = neighbours(MIXED)
    calls, handle = count_memory_encodings(model)
    try:
        beam_search(model, src, beam_size=4, neighbours=nb)
        assert calls == [3]  # one call for the batch, one row per present neighbour, not per beam
        greedy(model, src, neighbours=nb)
        assert calls == [3, 3]
    finally:
        handle.remove()


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("lengths", [MIXED, FULL], ids=["mixed", "all-memory"])
def test_beam_search_gates_equal_a_teacher_forced_pass_over_the_output(
    batch, beam, lengths
) -> None:
    src, _ = batch
    model = tiny()
    nb = neighbours(lengths)
    gates: list[float | None] = []
    hyps = beam_search(model, src, beam_size=beam, neighbours=nb, gates=gates)
    assert hyps == beam_search(model, src, beam_size=beam, neighbours=nb)
    if lengths is MIXED:
        assert gates[1] is None  # row 1 has no memory
    assert len({len(h) for h in hyps}) > 1  # outputs of different lengths, ended at other steps
    for i in (0, 2) if lengths is MIXED else (0, 1, 2):
        tgt_in = torch.tensor([[BOS, *hyps[i]]])
        with torch.no_grad():
            model(src[i : i + 1], tgt_in, Neighbours(src=nb.src[i : i + 1], tgt=nb.tgt[i : i + 1]))
        expected = float(model.last_gates()[0].mean())
        assert gates[i] == pytest.approx(expected, abs=1e-5)
        assert 0.0 < gates[i] < 1.0


def count_source_encodings(model: Transformer) -> tuple[list[int], object]:
    """Rows given to the source encoder's first layer, one entry per call."""
    calls: list[int] = []
    handle = model.encoder_layers[0].register_forward_hook(
        lambda _m, args, _out: calls.append(args[0].size(0))
    )
    return calls, handle


@pytest.mark.parametrize("beam", [1, 3])
def test_a_source_encoded_earlier_is_not_encoded_again(batch, beam) -> None:
    """Dense retrieval with the served model's store encodes the source already; decoding
    takes that state and gives the same outputs and gates as encoding it itself."""
    src, _ = batch
    model = tiny()
    nb = neighbours(MIXED)
    with torch.no_grad():
        source = model.encode(src)  # as `Translator.source_states` makes it
    alone: list[float | None] = []
    expected = beam_search(model, src, beam_size=beam, neighbours=nb, gates=alone)
    calls, handle = count_source_encodings(model)
    try:
        shared: list[float | None] = []
        hyps = beam_search(model, src, beam_size=beam, neighbours=nb, gates=shared, source=source)
        assert calls == []  # the memory was encoded (conditioned on `source`), the source not
        assert greedy(model, src, neighbours=nb, source=source) == greedy(model, src, neighbours=nb)
        assert calls == [3]  # the second greedy call encoded its source: the hook counts
    finally:
        handle.remove()
    assert hyps == expected and shared == alone


def test_a_source_state_of_another_batch_is_refused(batch) -> None:
    src, _ = batch
    model = tiny()
    with torch.no_grad():
        other = model.encode(src[:2])
        shorter = model.encode(src[:, :-1])
    for state in (other, shorter):
        with pytest.raises(ValueError, match="does not belong to the source batch"):
            beam_search(model, src, beam_size=2, neighbours=neighbours(MIXED), source=state)


def test_beam_search_gates_refuse_a_model_without_a_gate(batch) -> None:
    torch.manual_seed(0)
    baseline = Transformer(TransformerConfig(**SIZES, max_len=32)).eval()
    with pytest.raises(ValueError, match="no memory gate"):
        beam_search(baseline, batch[0], beam_size=2, gates=[])


def test_transformer_decoding_is_unchanged_without_neighbours(batch) -> None:
    src, _ = batch
    torch.manual_seed(0)
    baseline = Transformer(TransformerConfig(**SIZES, max_len=32)).eval()
    assert beam_search(baseline, src, beam_size=2) == beam_search(
        baseline, src, beam_size=2, neighbours=None
    )


# --------------------------------------------------------------------------- warm start


def test_from_transformer_copies_weights_and_reproduces_the_baseline(batch) -> None:
    src, tgt_in = batch
    torch.manual_seed(0)
    baseline = Transformer(TransformerConfig(**SIZES, max_len=32)).eval()
    config = SemiParametricConfig(**SIZES, max_len=32, dropout=0.2, max_neighbour_len=8)
    model = from_transformer(baseline, config).eval()
    for name, tensor in baseline.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    assert model.output.weight is model.embed.weight
    assert all(
        float(layer.gate_source.bias.detach()) == 2.0
        and torch.count_nonzero(layer.gate_memory.weight) == 0
        for layer in model.decoder_layers
    )
    with torch.no_grad():
        expected = baseline(src, tgt_in)
        assert torch.equal(model(src, tgt_in), expected)
        assert torch.equal(model(src, tgt_in, Neighbours.empty(3)), expected)
        mixed = model(src, tgt_in, neighbours(MIXED))
    assert torch.equal(mixed[1], expected[1])
    assert not torch.equal(mixed[0], expected[0])
    assert greedy(model, src) == greedy(baseline, src)


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_baseline_memory_init_starts_the_memory_path_from_trained_layers(batch, mode) -> None:
    src, tgt_in = batch
    torch.manual_seed(0)
    baseline = Transformer(TransformerConfig(**SIZES, max_len=32)).eval()
    config = SemiParametricConfig(
        **SIZES, max_len=32, max_neighbour_len=8, memory_mode=mode, memory_layers=2,
        memory_init="baseline", gate_init_bias=0.0,
    )  # fmt: skip
    model = from_transformer(baseline, config).eval()
    fresh = from_transformer(baseline, dataclasses.replace(config, memory_init="random"))

    def same(a: nn.Module, b: nn.Module) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))

    for layer, base_layer in zip(model.decoder_layers, baseline.decoder_layers, strict=True):
        assert same(layer.memory_attn, base_layer.cross_attn)
        assert float(layer.gate_source.bias.detach()) == 0.0  # an even mix at the start
    mem, dec, enc = model.memory_encoder, baseline.decoder_layers, baseline.encoder_layers
    for j, layer in enumerate(mem.target_layers):  # depth j from decoder layer j
        assert same(layer.self_attn, dec[j].self_attn) and same(layer.ffn, dec[j].ffn)
        if mode != "tm":
            assert same(layer.cross_attn, dec[j].cross_attn)
    if mode == "cstm":
        for j, layer in enumerate(mem.source_layers):
            assert same(layer.self_attn, enc[j].self_attn) and same(layer.ffn, enc[j].ffn)
            assert same(layer.cross_attn, dec[j].cross_attn)
    assert same(mem.norm, baseline.encoder_norm)
    assert not same(fresh.decoder_layers[0].memory_attn, model.decoder_layers[0].memory_attn)
    with torch.no_grad():  # no memory: still exactly the baseline
        assert torch.equal(model(src, tgt_in), baseline(src, tgt_in))
        assert torch.isfinite(model(src, tgt_in, neighbours(MIXED))).all()


def test_from_transformer_refuses_a_different_shape() -> None:
    baseline = Transformer(TransformerConfig(**SIZES))
    with pytest.raises(ValueError, match="d_ff"):
        from_transformer(baseline, SemiParametricConfig(**{**SIZES, "d_ff": 128}))


# --------------------------------------------------------------------------- bundles


def test_bundle_round_trip_is_bit_exact(tmp_path: Path, batch) -> None:
    src, tgt_in = batch
    model = tiny(memory_mode="cstm", memory_layers=2)
    nb = neighbours(MIXED)
    manifest = save_bundle(
        tmp_path / "b",
        model,
        "semiparametric",
        languages={"source": "en", "target": "de"},
        tokenizer="bytes",
    )
    assert manifest["architecture"] == "semiparametric"
    assert manifest["config"]["memory_layers"] == 2
    loaded = load_bundle(tmp_path / "b").model
    assert type(loaded) is SemiParametricModel and loaded.config == model.config
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt_in, nb), model(src, tgt_in, nb))
    assert beam_search(loaded, src, neighbours=nb) == beam_search(model, src, neighbours=nb)


# --------------------------------------------------------------------------- retrieval toy task


def lookup_batch(n: int, g: torch.Generator, width: int = 5) -> tuple:
    """Queries with a random target per example, found only in the neighbour whose source
    equals the query; the other neighbour is a random distractor pair.

    Returns (src, tgt_in, tgt_out, neighbours, refs).
    """
    src = torch.full((n, width), PAD)
    tgt_in = torch.full((n, width + 1), PAD)
    tgt_out = torch.full((n, width + 1), PAD)
    nb_src = torch.full((n, 2, width), PAD)
    nb_tgt = torch.full((n, 2, width), PAD)
    refs = []

    def rand(length_from: int = 3) -> torch.Tensor:
        length = int(torch.randint(length_from, width + 1, (1,), generator=g))
        return torch.randint(3, V, (length,), generator=g)

    for i in range(n):
        x, y = rand(), rand()
        src[i, : len(x)] = x
        tgt_in[i, 0] = BOS
        tgt_in[i, 1 : len(y) + 1] = y
        tgt_out[i, : len(y)] = y
        tgt_out[i, len(y)] = EOS
        hit = int(torch.randint(0, 2, (1,), generator=g))
        for j, (s, t) in enumerate(
            [(x, y), (rand(), rand())] if hit == 0 else [(rand(), rand()), (x, y)]
        ):
            nb_src[i, j, : len(s)] = s
            nb_tgt[i, j, : len(t)] = t
        refs.append(y.tolist())
    return src, tgt_in, tgt_out, Neighbours(src=nb_src, tgt=nb_tgt), refs


@pytest.fixture(scope="module")
def retriever() -> SemiParametricModel:
    """A CSTM model trained ~15 s on one CPU thread on the lookup task."""
    cfg = SemiParametricConfig(
        vocab_size=V, d_model=64, n_heads=4, enc_layers=1, dec_layers=2, d_ff=128,
        dropout=0.0, max_len=16, max_neighbour_len=8, max_neighbours=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = SemiParametricModel(cfg)
    steps = 600
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30, max(0.05, (steps - s) / (0.5 * steps)))
    )
    g = torch.Generator().manual_seed(1)
    model.train()
    for _ in range(steps):
        src, tgt_in, tgt_out, nb, _ = lookup_batch(32, g)
        logits = model(src, tgt_in, nb)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model.eval()


def exact(hyps: list[list[int]], refs: list[list[int]]) -> int:
    return sum(h == r for h, r in zip(hyps, refs, strict=True))


@pytest.mark.integration
def test_answer_only_in_the_neighbours_is_learned_and_needs_them(retriever) -> None:
    src, _, _, nb, refs = lookup_batch(100, torch.Generator().manual_seed(99))
    assert exact(greedy(retriever, src, neighbours=nb), refs) >= 90
    assert retriever.last_gate_mean() < 0.5  # opened towards the memory from sigmoid(2)
    assert exact(greedy(retriever, src), refs) <= 20
    # Neighbours of other sentences do not help either: the right pair must be read.
    shifted = Neighbours(src=nb.src.roll(1, dims=0), tgt=nb.tgt.roll(1, dims=0))
    assert exact(greedy(retriever, src, neighbours=shifted), refs) <= 20


@pytest.mark.integration
def test_a_given_source_state_is_what_the_model_reads(retriever) -> None:
    """The shared source state is really used: the lookup task needs the source to pick the
    matching neighbour, and a state of zeros (right shape and padding) loses it."""
    src, _, _, nb, refs = lookup_batch(100, torch.Generator().manual_seed(98))
    with torch.no_grad():
        state = retriever.encode(src)
    assert exact(greedy(retriever, src, neighbours=nb, source=state), refs) >= 90
    blank = dataclasses.replace(state, memory=torch.zeros_like(state.memory))
    assert exact(greedy(retriever, src, neighbours=nb, source=blank), refs) <= 70


@pytest.mark.integration
def test_beam_1_equals_greedy_with_neighbours(retriever) -> None:
    src, _, _, nb, _ = lookup_batch(30, torch.Generator().manual_seed(7))
    hyps = greedy(retriever, src, neighbours=nb)
    assert beam_search(retriever, src, beam_size=1, neighbours=nb) == hyps
    assert sum(map(len, hyps)) > 0


def test_beam_reorder_keeps_per_sentence_keys_and_moves_the_rest(batch) -> None:
    src, _ = batch
    model = tiny().eval()
    state = model.encode(src, neighbours(MIXED)).index_select(torch.tensor([0, 0, 1, 1, 2, 2]))
    cache = model.init_cache(state)
    assert cache.per_sentence == {"cross_k", "cross_v", "memory_k", "memory_v"}
    model.decode_step(torch.arange(3, 9), state, cache)  # per-hypothesis self_k/self_v, all unlike
    swap = torch.tensor([1, 0, 2, 3, 5, 4])  # moves within each sentence's two beams
    moved = cache.reorder_beams(swap)
    for before, after in zip(cache.layers, moved.layers, strict=True):
        assert after["memory_k"] is before["memory_k"] and after["cross_v"] is before["cross_v"]
        assert torch.equal(after["self_k"], before["self_k"][swap])
        assert not torch.equal(after["self_k"], before["self_k"])
        # What was kept equals what a full reorder would give: beams of a sentence share it.
        assert torch.equal(after["memory_v"], before["memory_v"][swap])
    assert moved.index_select(torch.tensor([4, 5])).per_sentence == cache.per_sentence


def test_beam_search_sharing_the_memory_equals_holding_it_per_hypothesis() -> None:
    """The memory's keys/values and the state are kept once per sentence and read by all its
    beams (never copied per beam or on beam moves); outputs and gates must be those of holding
    every cached tensor per hypothesis, with rows without a memory among them."""
    src = tokens([7, 3, 8, 5, 6, 2], width=8, g=torch.Generator().manual_seed(2))
    nb = neighbours([[4, 0, 2], [0, 0, 0], [6, 0, 0], [3, 5, 1], [2, 2, 0], [6, 6, 6]])
    for seed in range(4):  # untrained models reorder their beams often
        model = tiny(seed)
        reference = PerRowDecoding(model)
        shared_gates: list[float | None] = []
        row_gates: list[float | None] = []
        shared = beam_search(model, src, beam_size=4, neighbours=nb, gates=shared_gates)
        assert beam_search(reference, src, beam_size=4, neighbours=nb, gates=row_gates) == shared
        assert shared_gates[1] is None and row_gates[1] is None
        torch.testing.assert_close(
            [g for g in shared_gates if g is not None],
            [g for g in row_gates if g is not None],
            atol=1e-6,
            rtol=0,
        )
        assert all(rows == 4 * groups for groups, rows in reference.group_sizes)


def test_dropping_finished_sentences_keeps_their_shared_and_beam_rows(batch) -> None:
    src, _ = batch
    model = tiny().eval()
    state = model.encode(src, neighbours(MIXED))
    cache = model.init_cache(state)  # one row per sentence
    model.decode_step(torch.arange(3, 9), state, cache)  # 3 sentences x 2 beams
    kept = cache.select_sentences(torch.tensor([0, 2]), torch.tensor([0, 1, 4, 5]))
    for before, after in zip(cache.layers, kept.layers, strict=True):
        assert torch.equal(after["memory_k"], before["memory_k"][[0, 2]])
        assert torch.equal(after["self_v"], before["self_v"][[0, 1, 4, 5]])
    assert kept.per_sentence == cache.per_sentence and kept.step == cache.step


@pytest.mark.integration
def test_neighbour_pieces_are_kept_and_change_nothing(memory_bundle: Path) -> None:
    """A retrieved pair met again is not tokenised again, and decodes as it did the first
    time (and as with a translator that never met it)."""
    from models.translator import DecodeOptions, Translator
    from tests.toy import toy_pairs

    texts = ["red house", "two blue tree"]
    pairs = [toy_pairs(3, seed=1), toy_pairs(3, seed=1)]  # the same neighbours twice
    translator = Translator.from_bundle(memory_bundle, quantize="none")
    first = translator.translate(texts, DecodeOptions(beam_size=2), pairs)
    info = translator._pieces.cache_info()
    assert info.misses == 6 and info.hits == 6  # 3 pairs, 2 sides; met again once
    again = translator.translate(texts, DecodeOptions(beam_size=2), pairs)
    fresh = Translator.from_bundle(memory_bundle, quantize="none")
    assert first == again == fresh.translate(texts, DecodeOptions(beam_size=2), pairs)
