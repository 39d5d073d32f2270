"""Non-autoregressive (CTC) models run by ONNX Runtime: REDER's one pass, far less time on the CPU.

Greedy CTC decoding is one pass over the upsampled source and an argmax per frame, so its time
is the pass's matrix products and the dispatch of a few hundred PyTorch operators. When a CTC
model is loaded with "ort" or "ort-int8", each direction it translates is exported as an ONNX
graph from source ids to each frame's best label (`_BestLabels`; the argmax of the logits is
that of the log-probs, so no softmax over the vocabulary is run) and run by ONNX Runtime;
"ort-int8" quantizes the graph's matrix products with constant weights as the autoregressive
models' graphs are (`models.ort_decoder`). Nothing but the labels leaves the graph: a
`(B, T, V)` array of log-probs is never copied out.

`OrtCtc` keeps the model's decoding interface: `ctc_best_labels` for greedy decoding
(`models.decoding.ctc_greedy` prefers it) and `ctc_log_probs`, which the float model answers
(a prefix beam search needs every label's log-prob).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import Tensor, nn

from models.ort_decoder import _digest, _export, _Graph, _quantize, check_runnable, int8_weights

__all__ = ["OrtCtc", "supports"]

# CTC architectures with an ONNX path: their `ctc_log_probs` is traceable for a fixed direction
# (REDER and its multitask baseline; the direction picks the executed layers in Python).
SUPPORTED = ("Reder", "CtcMtl")


def supports(model: nn.Module) -> bool:
    """Whether `OrtCtc` can run `model`."""
    return type(model).__name__ in SUPPORTED


def directions(model: nn.Module) -> list[tuple[str, str]]:
    """Every (source, target) a two-way model translates: each ordered pair of its languages."""
    langs = list(model.config.languages)
    return [(s, t) for s in langs for t in langs if s != t]


class _BestLabels(nn.Module):
    """One direction's CTC pass for export: ids `(B, S)` -> each frame's best label `(B, T)`."""

    def __init__(self, model: nn.Module, source: str, target: str) -> None:
        super().__init__()
        self.model, self.source, self.target = model, source, target

    def forward(self, src: Tensor) -> Tensor:
        states = self.model.forward_states(src, self.source, self.target)
        return self.model.logits(states[-1]).argmax(dim=-1)


def _graph(model: nn.Module, source: str, target: str) -> bytes:
    c = model.config
    src = torch.tensor([[5, 6, 7, c.eos_id], [5, 6, c.eos_id, c.pad_id]])
    src = src.clamp(max=c.vocab_size - 1)
    axes = {"src": {0: "rows", 1: "len"}, "labels": {0: "rows", 1: "frames"}}
    return _export(_BestLabels(model, source, target), {"src": src}, ["labels"], axes)


def _graphs(model: nn.Module, mode: str, weights: str | None) -> dict[tuple[str, str], bytes]:
    """Every direction's graph, int8 with "ort-int8"; kept for the last few models by their
    weights' digest (exporting takes seconds; a process loading a bundle again pays it once)."""
    key = (type(model).__name__, mode, str(weights), _digest(model))
    if key in _EXPORTED:
        _EXPORTED.move_to_end(key)
        return _EXPORTED[key]
    graphs = {}
    for pair in directions(model):
        graph = _graph(model, *pair)
        graphs[pair] = graph if weights is None else _quantize(graph, weights)
    _EXPORTED[key] = graphs
    while len(_EXPORTED) > 4:
        _EXPORTED.popitem(last=False)
    return graphs


_EXPORTED: OrderedDict[tuple[str, str, str, str], dict[tuple[str, str], bytes]] = OrderedDict()


class OrtCtc(nn.Module):
    """A two-way CTC model whose greedy pass runs in ONNX Runtime (`mode` "ort" or "ort-int8").

    `float_model` is the PyTorch model, unchanged; it answers `ctc_log_probs`.
    """

    directional = True  # decoding passes the pair, as to the model itself

    def __init__(self, model: nn.Module, mode: str = "ort-int8", threads: int | None = None):
        super().__init__()
        check_runnable(model, mode, supports(model), "ONNX Runtime CTC path")
        norm = getattr(model, "actnorm", None)
        if norm is not None and not bool(norm.initialized):
            # its first batch would initialise it inside the trace, baking that batch in
            raise ValueError("the model's ActNorm is not initialised: train or load it first")
        model.eval()
        self.float_model = model
        self.mode = mode
        self.config = model.config
        self.int8_weights = int8_weights() if mode == "ort-int8" else None  # as OrtDecoder's
        built = _graphs(model, mode, self.int8_weights)
        self._graphs = {pair: _Graph(data, threads) for pair, data in built.items()}

    def direction(self, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
        return self.float_model.direction(source_lang, target_lang)

    def ctc_best_labels(
        self, src: Tensor, source_lang: str | None = None, target_lang: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """src `(B, S)` right-padded ids -> (best label per frame `(B, T)`, valid frames `(B,)`)."""
        pair = self.direction(source_lang, target_lang)
        labels = self._graphs[pair].run({"src": src.long().contiguous().numpy()})[0]
        lengths = src.ne(self.config.pad_id).sum(dim=1) * self.config.upsample
        return torch.from_numpy(labels), lengths

    def ctc_log_probs(
        self, src: Tensor, source_lang: str | None = None, target_lang: str | None = None
    ) -> tuple[Tensor, Tensor]:
        """The float model's log-probs (for searches that need every label's)."""
        return self.float_model.ctc_log_probs(src, source_lang, target_lang)
