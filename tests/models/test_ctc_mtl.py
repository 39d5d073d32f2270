"""REDER's multitask baseline (models/ctc_mtl.py): REDER's sublayers and size in one
non-reversible CTC encoder, told the target language; it trains both directions with CTC."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from models.bundle import load_bundle
from models.ctc_mtl import CtcMtl, CtcMtlConfig
from models.reder import Reder, RederConfig
from models.registry import build_model
from models.translator import DecodeOptions, Translator
from service.cli import app
from tests.models.test_train_reder import TINY, _config, _exact, _prepared, _word_tokenizer
from tests.toy import toy_pairs

runner = CliRunner()


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.unit
def test_same_parameters_as_reder_but_for_the_tags_and_actnorm() -> None:
    cfg = {"vocab_size": 100, **TINY, "dropout": 0.0}
    reder, mtl = Reder(RederConfig(**cfg)), CtcMtl(CtcMtlConfig(**cfg))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    extra = mtl.tags.weight.numel() - sum(p.numel() for p in reder.actnorm.parameters())
    assert count(mtl) == count(reder) + extra
    assert len(mtl.layers) == 2 * TINY["layers_per_end"]  # REDER's executed depth
    again = build_model("reder-mtl", mtl.config.to_dict())
    assert type(again) is CtcMtl and again.config == mtl.config


@pytest.mark.unit
def test_the_target_tag_decides_the_direction_and_shapes_follow_ctc() -> None:
    torch.manual_seed(0)
    mtl = CtcMtl(CtcMtlConfig(vocab_size=100, **TINY, dropout=0.0)).eval()
    src = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    to_de, lengths = mtl.ctc_log_probs(src, "en", "de")
    to_en, _ = mtl.ctc_log_probs(src, "de", "en")
    assert to_de.shape == (2, 8, mtl.config.n_labels) and lengths.tolist() == [6, 4]
    assert not torch.allclose(to_de, to_en)  # only the tag differs between the two passes
    torch.testing.assert_close(to_de.exp().sum(-1), torch.ones(2, 8))
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        mtl.ctc_log_probs(src, "en", "fr")
    with pytest.raises(TypeError, match="no reverse form"):
        mtl.layers[0].reverse(torch.zeros(1, 2, 32), torch.zeros(1, 2, dtype=torch.bool))


@pytest.mark.integration
def test_train_command_learns_both_directions_in_one_encoder(tmp_path: Path) -> None:
    data = _prepared(tmp_path, toy_pairs(600, seed=1))
    config = _config(tmp_path, arch="reder-mtl", fba_weight=0.0, cc_weight=0.0, aux_after=0)
    run, out = tmp_path / "run", tmp_path / "bundle"
    _word_tokenizer(data, run / "spm.model")
    args = ["train", "--data", str(data), "--run", str(run), "--out", str(out)]
    res = runner.invoke(app, [*args, "--config", str(config)])
    assert res.exit_code == 0, res.output
    bundle = load_bundle(out)
    assert bundle.manifest["architecture"] == "reder-mtl"
    assert bundle.manifest["pairs"] == [["en", "de"], ["de", "en"]]
    translator = Translator.from_bundle(out)
    held_out = toy_pairs(100, seed=3)
    en, de = [e for e, _ in held_out], [d for _, d in held_out]
    opts = DecodeOptions(beam_size=1, block_repeats=0)
    assert _exact(translator.translate(en, opts), de) >= 0.8
    assert _exact(translator.for_pair("de", "en").translate(de, opts), en) >= 0.8
    # the agreement and cycle losses need a reversible model
    bad = _config(tmp_path, arch="reder-mtl")
    res = runner.invoke(app, ["train", "--data", str(data), "--run", str(tmp_path / "r2"),
                              "--out", str(tmp_path / "b2"), "--config", str(bad)])  # fmt: skip
    assert res.exit_code == 2 and "not reversible" in res.output
