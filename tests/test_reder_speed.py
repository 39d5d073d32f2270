"""The arithmetic count of `benchmarks.reder_speed`: a REDER pass's products with weights,
counted by the profiler, equal those its shapes say."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmarks.reder_speed import matmul_mflop
from models.reder import Reder, RederConfig
from models.tokenizer import train_tokenizer
from models.translator import Translator
from tests.toy import toy_pairs

pytestmark = pytest.mark.unit


def test_a_reder_pass_counts_the_products_its_shapes_say(tmp_path: Path) -> None:
    pairs = toy_pairs(200, seed=1)
    for lang, side in (("en", 0), ("de", 1)):
        (tmp_path / f"train.{lang}").write_text("\n".join(p[side] for p in pairs) + "\n")
    corpora = [(tmp_path / "train.en", "en"), (tmp_path / "train.de", "de")]
    tok = train_tokenizer(corpora, tmp_path / "spm.model", vocab_size=300)
    torch.manual_seed(0)
    cfg = RederConfig(vocab_size=tok.vocab_size, d_model=32, n_heads=4, d_ff=48,
                      layers_per_end=2, max_rel=3, max_len=64, dropout=0.0)  # fmt: skip
    model = Reder(cfg).eval()
    model(torch.randint(4, cfg.vocab_size, (2, 5)))  # ActNorm's data-dependent init
    reder = Translator(model, tok, "en", "de", decoding="ctc")
    sentences = [p[0] for p in pairs[:3]]

    frames = sum(cfg.upsample * len(tok.encode(s, "en")) for s in sentences)
    d, layers = cfg.d_model, 2 * cfg.layers_per_end
    per_frame = layers * (4 * d * d + 2 * d * cfg.d_ff + d * (2 * cfg.max_rel + 1))
    per_frame += d * cfg.n_labels  # the tied output layer (the vocabulary and the blank)
    expected = 2 * frames * per_frame / len(sentences) / 1e6

    assert matmul_mflop(reder, 1, sentences) == pytest.approx(expected, rel=1e-9)
