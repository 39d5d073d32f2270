"""ONNX Runtime CTC decoding (models.ort_ctc): "ort" gives every frame the label PyTorch's float
model gives it, both directions, padded and alone; the service's "auto" picks it on the CPU."""

from __future__ import annotations

import pytest
import torch

from models.ctc_mtl import CtcMtl, CtcMtlConfig
from models.decoding import ctc_greedy
from models.ort_ctc import OrtCtc, directions, supports
from models.quantize import ort_model, resolve
from models.reder import Reder, RederConfig
from models.transformer import Transformer, TransformerConfig

pytestmark = pytest.mark.integration

V = 40
TINY = {"vocab_size": V, "d_model": 32, "n_heads": 4, "d_ff": 64, "layers_per_end": 2,
        "max_rel": 3, "max_len": 16, "dropout": 0.0}  # fmt: skip


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _batch(lengths: list[int], width: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        out[i, :n] = torch.randint(4, V, (n,), generator=g)
    return out


def _models() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    reder = Reder(RederConfig(**TINY)).eval()
    reder(_batch([5, 3], 6, seed=9))  # ActNorm's data-dependent init, as training does
    torch.manual_seed(0)
    mtl = CtcMtl(CtcMtlConfig(**TINY)).eval()
    return [reder, mtl]


@pytest.mark.parametrize("index", [0, 1], ids=["reder", "reder-mtl"])
def test_ort_float_gives_each_frame_pytorchs_best_label(index: int) -> None:
    model = _models()[index]
    ort = OrtCtc(model, "ort")
    assert directions(model) == [("en", "de"), ("de", "en")]
    batch = _batch([7, 2, 12, 5], 12, seed=1)  # padding of several widths
    with torch.inference_mode():
        for pair in directions(model):
            log_probs, lengths = model.ctc_log_probs(batch, *pair)
            labels, ort_lengths = ort.ctc_best_labels(batch, *pair)
            assert torch.equal(lengths, ort_lengths)
            for row, n in enumerate(lengths.tolist()):
                assert torch.equal(labels[row, :n], log_probs[row, :n].argmax(-1)), (pair, row)
            # a sentence alone labels its frames as it does in the batch
            alone, _ = ort.ctc_best_labels(batch[2:3], *pair)
            assert torch.equal(alone[0], labels[2, : alone.size(1)])
            assert ctc_greedy(ort, batch, pair) == ctc_greedy(model, batch, pair)
    # the directions differ (else the test would not tell them apart)
    assert not torch.equal(ort.ctc_best_labels(batch, "en", "de")[0],
                           ort.ctc_best_labels(batch, "de", "en")[0])  # fmt: skip


def test_int8_labels_mostly_agree_and_log_probs_stay_float() -> None:
    model = _models()[0]
    ort = ort_model(model, "ort-int8")
    assert isinstance(ort, OrtCtc)
    batch = _batch([9, 4, 12], 12, seed=2)
    with torch.inference_mode():
        log_probs, lengths = model.ctc_log_probs(batch, "de", "en")
        labels, _ = ort.ctc_best_labels(batch, "de", "en")
        same = sum(
            int(torch.eq(labels[r, :n], log_probs[r, :n].argmax(-1)).sum())
            for r, n in enumerate(lengths.tolist())
        )
        assert same / int(lengths.sum()) > 0.8
        assert torch.equal(ort.ctc_log_probs(batch, "de", "en")[0], log_probs)


def test_auto_picks_ort_for_ctc_models_and_refuses_what_it_cannot_run() -> None:
    reder = _models()[0]
    assert supports(reder) and resolve("auto", "cpu", reder) == "ort-int8"
    fresh = Reder(RederConfig(**TINY)).eval()  # ActNorm never saw a batch
    with pytest.raises(ValueError, match="ActNorm is not initialised"):
        OrtCtc(fresh, "ort")
    transformer = Transformer(TransformerConfig(vocab_size=V, d_model=16, n_heads=2, d_ff=32,
                                                enc_layers=1, dec_layers=1))  # fmt: skip
    with pytest.raises(ValueError, match="no ONNX Runtime CTC path for Transformer"):
        OrtCtc(transformer, "ort")
    with pytest.raises(ValueError, match="mode must be one of"):
        OrtCtc(reder, "int8")
