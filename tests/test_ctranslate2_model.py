"""The CTranslate2 conversion (benchmarks/ctranslate2_model.py): the converted toy model decodes
exactly as ragmt does, greedy and beam, within ragmt's length limits, for sinusoidal and tied
as for learned and untied models; the converted directory is a verified artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2")

from benchmarks.ctranslate2_model import (  # noqa: E402
    KIND,
    CT2Translator,
    convert,
    length_limit,
    translate,
)
from models.artifacts import ArtifactError  # noqa: E402
from models.bundle import load_bundle, save_bundle  # noqa: E402
from models.registry import build_model  # noqa: E402
from models.translator import DecodeOptions, Translator  # noqa: E402
from tests.toy import gloss, toy_pairs  # noqa: E402
from tests.toy_bundle import HELD_OUT  # noqa: E402

pytestmark = pytest.mark.integration

# Seen and unseen word orders, one word to five, and text the tokenizer must normalise.
TEXTS = [HELD_OUT, "one", "blue  house", "Green tree!", *[s for s, _ in toy_pairs(12, seed=7)]]


@pytest.fixture(scope="module")
def converted(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(bundle, tmp_path_factory.mktemp("ct2") / "toy-ct2")


@pytest.fixture(scope="module")
def ragmt(bundle: Path) -> Translator:
    return Translator.from_bundle(bundle)


def test_greedy_outputs_are_ragmts(converted: Path, ragmt: Translator) -> None:
    want = ragmt.translate(TEXTS, DecodeOptions(beam_size=1))
    assert want[0] == gloss(HELD_OUT)  # the toy model translates: outputs are not all ""
    assert translate(converted, TEXTS, beam_size=1) == want


def test_beam_outputs_are_ragmts_under_gnmt(converted: Path, ragmt: Translator) -> None:
    ct2 = CT2Translator(converted)
    for penalty in (0.0, 1.0, 2.0):
        opts = DecodeOptions(beam_size=4, length_penalty=penalty)
        assert ct2.translate(TEXTS, 4, length_penalty=penalty) == ragmt.translate(TEXTS, opts)


@pytest.mark.parametrize("beam", [1, 3])
def test_outputs_cut_at_ragmts_length_limit(converted: Path, ragmt: Translator, beam: int) -> None:
    """a=0.5, b=1: one to three pieces for these texts, so most outputs end at the limit."""
    opts = DecodeOptions(beam_size=beam, max_len_a=0.5, max_len_b=1)
    want = ragmt.translate(TEXTS, opts)
    got = CT2Translator(converted).translate(TEXTS, beam, max_len_a=0.5, max_len_b=1)
    assert got == want
    assert any(w != gloss(t.lower().strip("!")) for w, t in zip(want, TEXTS, strict=True))


def test_learned_positions_and_untied_output(
    bundle: Path, ragmt: Translator, tmp_path: Path
) -> None:
    """The toy model's weights in the other layout: its position table as learned positions,
    a separate output matrix. The same function, so the same outputs, in both engines."""
    base = load_bundle(bundle).model
    config = {**base.config.to_dict(), "positions": "learned", "tie_embeddings": False}
    model = build_model("transformer", config)
    state = dict(base.state_dict())
    state["positions.weight"] = base.positions(base.config.max_len)
    state["output.weight"] = state["embed.weight"].clone()
    model.load_state_dict(state)
    other = tmp_path / "learned"
    save_bundle(
        other,
        model.eval(),
        "transformer",
        languages={"source": "en", "target": "de"},
        extra_files={"spm.model": bundle / "spm.model"},
    )
    want = ragmt.translate(TEXTS, DecodeOptions(beam_size=1))
    assert Translator.from_bundle(other).translate(TEXTS, DecodeOptions(beam_size=1)) == want
    assert translate(convert(other, tmp_path / "ct2"), TEXTS, beam_size=1) == want


def test_converted_directory_is_a_verified_artifact(converted: Path, tmp_path: Path) -> None:
    manifest = json.loads((converted / "manifest.json").read_text())
    assert manifest["kind"] == KIND
    assert manifest["languages"] == {"source": "en", "target": "de"}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "spm.model"} <= set(
        manifest["files"]
    )
    vocab = json.loads((converted / "shared_vocabulary.json").read_text())
    assert vocab[:4] == ["<pad>", "<s>", "</s>", "<unk>"]  # ragmt's ids 0-3 by name

    copy = tmp_path / "copy"
    copy.mkdir()
    for f in converted.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "config.json").write_text("{}")
    with pytest.raises(ArtifactError, match="checksum"):
        CT2Translator(copy)


def test_only_the_plain_transformer_converts(memory_bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="semiparametric"):
        convert(memory_bundle, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_length_limit_is_ragmts_rule() -> None:
    """a*n + b, floored, never past the max_len-1 positions after BOS (models.decoding)."""
    from models.decoding import _length_limits

    class _Model:
        config = type("C", (), {"pad_id": 0, "max_len": 130})

    src = torch.tensor([[5] * n + [0] * (200 - n) for n in (1, 5, 7, 80, 200)])
    for a, b in ((1.5, 10), (1.2, 10), (0.5, 1)):
        want = _length_limits(_Model(), src, a, b)
        assert [length_limit(n, a, b, 130) for n in (1, 5, 7, 80, 200)] == want
    assert length_limit(45, 1.4, 0, 256) == 63  # 1.4 * 45 is 62.99999999999999 in floats
