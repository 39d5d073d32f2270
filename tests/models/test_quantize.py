"""Int8 decoder weights (models.quantize): which layers turn int8, that the bundle's own model
stays float, and that a trained toy model still translates its task with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from models.bundle import load_bundle
from models.quantize import int8_modules, quantize_int8
from models.translator import DecodeOptions, Translator
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

TEXTS = ["red house", "two blue tree", "green", "one two three four five"]


def test_only_the_decoders_and_memory_encoders_linears_turn_int8(
    bundle: Path, memory_bundle: Path
) -> None:
    base = load_bundle(bundle).model
    names = int8_modules(base)
    assert "output" in names and names
    assert all(n.startswith("decoder_layers.") or n == "output" for n in names)
    linears = [n for n, m in base.named_modules() if isinstance(m, nn.Linear)]
    assert any(n.startswith("encoder_layers.") for n in linears)  # left float
    memory = load_bundle(memory_bundle).model
    kept = set(n for n, m in memory.named_modules() if isinstance(m, nn.Linear)) - set(
        int8_modules(memory)
    )
    # Read by their weights when the gated layers fuse them: float, whatever else is int8.
    assert "decoder_layers.0.cross_attn.q_proj" in kept
    assert "decoder_layers.0.memory_attn.out_proj" in kept
    assert "decoder_layers.0.gate_source" in kept
    assert "decoder_layers.0.memory_attn.k_proj" in int8_modules(memory)
    # The memory encoder (retrieved pairs) turns int8, the source encoder stays float.
    assert any(n.startswith("memory_encoder.") for n in int8_modules(memory))
    assert not any(n.startswith("encoder_layers.") for n in int8_modules(memory))


def test_the_bundle_model_stays_float(bundle: Path) -> None:
    loaded = load_bundle(bundle)
    translator = Translator.from_loaded(loaded, "int8")
    assert isinstance(loaded.model.output, nn.Linear)
    assert type(translator.model.output) is not nn.Linear
    assert translator.model.encoder_layers[0].ffn.fc1.weight.dtype == torch.float32
    assert loaded.model.output.weight is loaded.model.embed.weight  # still tied
    with pytest.raises(ValueError, match="quantize must be one of"):
        Translator.from_loaded(loaded, "int4")


def test_a_trained_toy_model_translates_as_with_float_weights(bundle: Path) -> None:
    """On 200 toy sentences the int8 decoder says what the float one says (197-198 measured)
    and is right as often, give or take a sentence; and on the short ones, right."""
    fp32 = Translator.from_bundle(bundle)
    int8 = Translator.from_bundle(bundle, quantize="int8")
    texts = [s for s, _ in toy_pairs(200, seed=99)]
    for beam in (1, 4):
        options = DecodeOptions(beam_size=beam)
        want, got = fp32.translate(texts, options), int8.translate(texts, options)
        assert sum(a == b for a, b in zip(got, want, strict=True)) >= 194
        right = [sum(o == gloss(t) for o, t in zip(out, texts, strict=True)) for out in (want, got)]
        assert right[1] >= right[0] - 2, right
    assert int8.translate(TEXTS[:3], DecodeOptions(beam_size=4)) == [gloss(t) for t in TEXTS[:3]]


def test_a_memory_model_decodes_with_int8_weights(memory_bundle: Path) -> None:
    fp32 = Translator.from_bundle(memory_bundle)
    int8 = Translator.from_bundle(memory_bundle, quantize="int8")
    pairs = [toy_pairs(3, seed=i) for i in range(len(TEXTS))]
    options = DecodeOptions(beam_size=4)
    got = int8.translate_detailed(TEXTS, options, neighbours=pairs, gates=True)
    want = fp32.translate_detailed(TEXTS, options, neighbours=pairs, gates=True)
    assert [t.text for t in got] == [t.text for t in want]
    for a, b in zip(got, want, strict=True):
        assert a.gate == pytest.approx(b.gate, abs=0.05)
    assert quantize_int8(int8.model) is not int8.model


def test_the_int8_model_shares_the_float_encoder(bundle: Path) -> None:
    loaded = load_bundle(bundle)
    int8 = Translator.from_loaded(loaded, "int8").model
    assert int8.float_model is loaded.model
    assert int8.encoder_layers is loaded.model.encoder_layers
    assert int8.embed is loaded.model.embed
    assert int8.decoder_layers is not loaded.model.decoder_layers
    assert "float_model" not in dict(int8.named_children())
    assert all(
        type(m) is nn.Linear
        for m in loaded.model.decoder_layers.modules()
        if "Linear" in type(m).__name__
    )


def test_a_dense_store_of_the_float_model_encodes_once_for_the_int8_one(
    bundle: Path, tmp_path: Path
) -> None:
    """Retrieval encodes a query with the float encoder; the int8 decoder reads that very
    encoding (the encoder is shared), so a request is still encoded once."""
    from index_builder.corpus import Pair
    from index_builder.store import build_store, load_retriever, open_store

    loaded = load_bundle(bundle)
    pairs = [Pair(s, t) for s, t in toy_pairs(20, seed=3)]
    path = build_store(pairs, "toy", "dense-ngram", tmp_path, {"widths": [2]}, model=bundle)
    retriever = load_retriever(open_store(path), loaded)
    assert retriever.encodes_with(Translator.from_loaded(loaded, "int8").model)
    assert not retriever.encodes_with(load_bundle(bundle).model)  # another copy: encoded again


@pytest.mark.unit
def test_auto_is_int8_on_the_cpu_and_float_elsewhere() -> None:
    from models.quantize import resolve

    assert resolve("auto", "cpu") == "ort-int8"
    assert resolve("auto", torch.device("cuda", 0)) == "none"
    assert resolve("none", "cpu") == "none" and resolve("int8", "cpu") == "int8"
    with pytest.raises(ValueError, match="quantize must be one of"):
        resolve("fp8", "cpu")


@pytest.mark.unit
def test_a_row_quantized_linear_gives_each_row_what_it_gives_it_alone() -> None:
    from models.quantize import RowInt8Linear

    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    row8 = RowInt8Linear.from_float(linear)
    x = torch.randn(2, 9, 64) * torch.linspace(0.1, 30.0, 9)[None, :, None]  # scales differ
    together = row8(x)
    alone = torch.stack([torch.stack([row8(x[b, t : t + 1])[0] for t in range(9)]) for b in (0, 1)])
    assert torch.equal(together, alone)
    # and close to the float layer, row by row
    assert torch.allclose(together, linear(x), rtol=0.05, atol=0.05 * x.abs().amax().item())


def test_row_quantized_decoders_translate_the_toy_task_alone_as_in_a_batch(bundle: Path) -> None:
    rows = Translator.from_bundle(bundle, quantize="int8-rows")
    fp32 = Translator.from_bundle(bundle)
    texts = [s for s, _ in toy_pairs(40, seed=21)]
    options = DecodeOptions(beam_size=2)
    batched = rows.translate(texts, options)
    assert batched == [rows.translate([t], options)[0] for t in texts]
    right = [
        sum(o == gloss(t) for o, t in zip(out, texts, strict=True))
        for out in (fp32.translate(texts, options), batched)
    ]
    assert right[1] >= right[0] - 2, right
