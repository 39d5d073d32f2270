"""Model bundles: exact round trip, reduced precision, tied weights, and refusal of bad bundles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from models.artifacts import ArtifactError
from models.bundle import (
    WEIGHTS_FILE,
    BundleError,
    load_bundle,
    save_bundle,
    update_eval,
)
from models.transformer import Transformer, TransformerConfig

pytestmark = pytest.mark.unit

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

V = 20
LANGS = {"source": "de", "target": "en"}


def tiny(**overrides: object) -> Transformer:
    kw = dict(vocab_size=V, d_model=32, n_heads=4, enc_layers=2, dec_layers=2, d_ff=64)
    kw.update(overrides)
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**kw)).eval()


SRC = torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]])
TGT = torch.tensor([[1, 4, 5], [1, 11, 12]])


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(SRC, TGT)


@pytest.fixture()
def spm(tmp_path: Path) -> Path:
    p = tmp_path / "source-spm.model"
    p.write_bytes(b"not really a sentencepiece model\x00\x01")
    return p


@pytest.fixture()
def bundle(tmp_path: Path, spm: Path) -> Path:
    path = tmp_path / "bundle"
    save_bundle(
        path,
        tiny(),
        "transformer",
        languages=LANGS,
        extra_files={"spm.model": spm},
        training_data="sha256:abc",
        eval_scores={"bleu": 12.5},
        extra_manifest={"notes": "unit test"},
    )
    return path


def stored_dtypes(path: Path) -> dict[str, torch.dtype]:
    with safe_open(str(path / WEIGHTS_FILE), framework="pt") as f:
        return {k: f.get_tensor(k).dtype for k in f.keys()}


def test_round_trip_is_bit_exact_and_manifest_complete(bundle: Path, spm: Path) -> None:
    loaded = load_bundle(bundle)
    assert torch.equal(logits(loaded.model), logits(tiny()))
    assert not loaded.model.training
    m = loaded.manifest
    assert m["kind"] == "model-bundle" and m["format_version"] == 1
    assert m["architecture"] == "transformer"
    assert m["config"] == tiny().config.to_dict()
    assert m["languages"] == LANGS
    assert m["training_data"] == "sha256:abc"
    assert m["eval"] == {"bleu": 12.5}
    assert m["notes"] == "unit test"
    assert m["created"]
    assert set(m["files"]) == {WEIGHTS_FILE, "spm.model"}
    assert loaded.file("spm.model").read_bytes() == spm.read_bytes()
    with pytest.raises(BundleError):
        loaded.file("nope.txt")


def test_tied_weight_is_stored_once_and_tied_after_load(bundle: Path) -> None:
    assert "output.weight" not in stored_dtypes(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["weights"]["tied"] == {"output.weight": "embed.weight"}
    model = load_bundle(bundle).model
    assert model.output.weight is model.embed.weight


def test_untied_model_round_trips(tmp_path: Path) -> None:
    model = tiny(tie_embeddings=False, positions="learned")
    save_bundle(tmp_path / "b", model, "transformer", languages=LANGS, tokenizer="bytes")
    loaded = load_bundle(tmp_path / "b").model
    assert "output.weight" in stored_dtypes(tmp_path / "b")
    assert loaded.output.weight is not loaded.embed.weight
    assert torch.equal(logits(loaded), logits(model))


@pytest.mark.parametrize(("dtype", "atol"), [("float16", 2e-2), ("bfloat16", 1.5e-1)])
def test_reduced_precision_storage(tmp_path: Path, dtype: str, atol: float) -> None:
    save_bundle(
        tmp_path / "b", tiny(), "transformer", languages=LANGS, dtype=dtype, tokenizer="bytes"
    )
    assert set(stored_dtypes(tmp_path / "b").values()) == {getattr(torch, dtype)}
    loaded = load_bundle(tmp_path / "b").model
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    torch.testing.assert_close(logits(loaded), logits(tiny()), atol=atol, rtol=0)


def test_tampered_weights_are_refused(bundle: Path) -> None:
    data = bytearray((bundle / WEIGHTS_FILE).read_bytes())
    data[len(data) // 2] ^= 0x01
    (bundle / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="checksum"):
        load_bundle(bundle)


def test_unknown_format_version_is_refused(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["format_version"] = 2
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format_version"):
        load_bundle(bundle)


def test_missing_file_is_refused(bundle: Path) -> None:
    (bundle / "spm.model").unlink()
    with pytest.raises(ArtifactError, match="missing"):
        load_bundle(bundle)


def test_unknown_architecture_is_refused(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["architecture"] = "lstm"
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="lstm"):
        load_bundle(bundle)


def test_save_refuses_bad_arguments(tmp_path: Path, spm: Path) -> None:
    model = tiny()
    with pytest.raises(ValueError, match="architecture"):
        save_bundle(tmp_path / "b", model, "lstm", languages=LANGS)
    with pytest.raises(ValueError, match="dtype"):
        save_bundle(tmp_path / "b", model, "transformer", languages=LANGS, dtype="int8")
    with pytest.raises(ValueError, match="reserved"):
        save_bundle(
            tmp_path / "b", model, "transformer", languages=LANGS, extra_manifest={"eval": 1}
        )
    with pytest.raises(ValueError, match="relative"):
        save_bundle(
            tmp_path / "b", model, "transformer", languages=LANGS, extra_files={"../x": spm}
        )
    with pytest.raises(ValueError, match="languages"):
        save_bundle(tmp_path / "b", model, "transformer", languages={"source": "de"})
    assert list(tmp_path.iterdir()) == [spm]  # nothing half-written left behind


def test_resave_replaces_and_update_eval_merges(bundle: Path) -> None:
    other = tiny(d_model=16, d_ff=32)
    save_bundle(
        bundle, other, "transformer", languages=LANGS, eval_scores={"bleu": 1.0}, tokenizer="bytes"
    )
    assert torch.equal(logits(load_bundle(bundle).model), logits(other))
    updated = update_eval(bundle, {"chrf": 40.0})
    assert updated["eval"] == {"bleu": 1.0, "chrf": 40.0}
    assert load_bundle(bundle).manifest["eval"] == {"bleu": 1.0, "chrf": 40.0}
    assert sorted(p.name for p in bundle.parent.iterdir() if p.name.startswith(".")) == []
