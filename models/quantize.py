"""Int8 weights for CPU decoding: the decoder's linear layers quantized dynamically (and a
memory model's memory encoder).

Decoding time goes to the decoder (output projection, self- and cross-attention, feed-forward:
over 90% at batch 1 on the CPU); its matrix products with int8 weights (per output channel)
and activations quantized on the fly run 1.5-3x faster. torch's dynamic quantization ("int8")
gives the activations of a whole batch one scale, so a sentence's translation can depend on the
sentences batched with it (12 of 40 general test sentences differed translated alone and
together); "int8-rows" (`RowInt8Linear`) gives each row its own scale, so a row's output is
its own (0 of 40 medical, 2 of 40 general differed, where float rounding still varies with
the batch's shape) at 25-30% more decoding time (docs/trustworthy-translations.md). The
encoder stays float: its states
are what dense retrieval stores were built from and what a request's retrieval shares with its
decoding, and it costs little. Modules a model reads by their weights rather than by calling
them (the memory model's fused cross-attention) name themselves in `float_modules` and stay
float too. CPU only: CUDA decodes in half precision instead (`models.devices`).
"""

from __future__ import annotations

import copy
import re
import warnings

import torch
from torch import Tensor, nn

from models import native_step, ort_ctc, ort_decoder

# auto: see `resolve`; int8-rows: int8, each row quantized on its own; ort / ort-int8: the
# model encoded and decoded by ONNX Runtime, float or int8 (models.ort_decoder); native-int8:
# ort-int8 with each decoding step one C++ call (models.native_step)
QUANTIZATIONS = ("auto", "none", "int8", "int8-rows", "ort", "ort-int8", "native-int8")
CPU_ONLY = ("int8", "int8-rows", "ort", "ort-int8", "native-int8")
# what auto means on the CPU for a model that ONNX Runtime can run, and for one whose step the
# native library runs where it can be built (docs/decoding-speed.md)
AUTO_CPU = "ort-int8"
AUTO_NATIVE = "native-int8"


def resolve(quantize: str, device: torch.device | str, model: nn.Module | None = None) -> str:
    """`quantize` for `model` on `device`: "auto" becomes native-int8 on the CPU for a model
    whose decoding step the native library runs (`native_step.supports`: a C++ compiler at
    hand), else ort-int8 for a model that ONNX Runtime runs (`ort_supports`), int8 for
    another, and none elsewhere; every CPU choice was measured within 0.3 BLEU of float on
    every test set (docs/decoding-speed.md)."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {QUANTIZATIONS}, got {quantize!r}")
    if quantize != "auto":
        return quantize
    if torch.device(device).type != "cpu":
        return "none"
    if model is None:
        return AUTO_CPU
    if native_step.supports(model)[0]:
        return AUTO_NATIVE
    return AUTO_CPU if ort_supports(model) else "int8"


def ort_supports(model: nn.Module) -> bool:
    """Whether ONNX Runtime can run `model`: an autoregressive one (`models.ort_decoder`) or a
    CTC one (`models.ort_ctc`)."""
    return ort_decoder.supports(model) or ort_ctc.supports(model)


def ort_model(model: nn.Module, mode: str) -> nn.Module:
    """`model` decoded by ONNX Runtime in `mode` ("ort" or "ort-int8")."""
    if ort_ctc.supports(model):  # no decoding steps: native-int8 is ort-int8 for it
        return ort_ctc.OrtCtc(model, "ort-int8" if mode == "native-int8" else mode)
    return ort_decoder.OrtDecoder(model, mode)


class RowInt8Linear(nn.Module):
    """A linear layer with int8 weights (one scale per output channel) whose input is
    quantized with one scale per row: each row's output depends on that row alone, so a
    batch computes exactly what its rows would alone. int8 x int8 -> int32 by `torch._int_mm`.
    """

    def __init__(self, weight_t: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight_t", weight_t)  # (in, out) int8
        self.register_buffer("scale", scale)  # (out,) float32
        self.register_buffer("bias", bias)  # (out,) float32 or None
        self.in_features, self.out_features = weight_t.shape

    @classmethod
    def from_float(cls, linear: nn.Linear) -> RowInt8Linear:
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=1e-12)  # symmetric, per output channel
        q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
        bias = linear.bias.detach().float().clone() if linear.bias is not None else None
        return cls(q.t().contiguous(), scale, bias)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        rows = x.reshape(-1, self.in_features)
        # one step per row: its largest magnitude maps to 127, so no clamp is needed
        step = torch.linalg.vector_norm(rows, ord=float("inf"), dim=1, keepdim=True)
        step = step.div_(127).clamp_(min=1e-12)
        q = torch.round(rows / step).to(torch.int8)
        out = torch._int_mm(q, self.weight_t).to(rows.dtype).mul_(step)
        out = (
            torch.addcmul(self.bias, out, self.scale)
            if self.bias is not None
            else out.mul_(self.scale)
        )
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


# The decoder and output projection; the memory encoder too (it encodes a request's retrieved
# pairs, and nothing else reads its output).
INT8_PARTS = re.compile(r"^(decoder_layers\.|output$|memory_encoder\.)")


def int8_modules(model: nn.Module) -> list[str]:
    """The names of the linear layers `quantize_int8` turns into int8 ones."""
    keep = [re.compile(p) for p in getattr(model, "float_modules", ())]
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear)
        and INT8_PARTS.search(name)
        and not any(p.search(name) for p in keep)
    ]


def quantize_int8(model: nn.Module, per_row: bool = False) -> nn.Module:
    """`model` (in eval mode, on the CPU) with int8 decoder linears: a new module that shares
    every other submodule with `model` (the encoder, embeddings, the memory encoder) and
    names it as `float_model`, so retrieval that encodes with `model` serves its decoding too.
    `per_row`: activations quantized row by row (`RowInt8Linear`), not per batch. `model`
    itself is unchanged."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 weights are for CPU decoding; the model is on another device")
    model.eval()
    names = int8_modules(model)
    tops = {name.split(".")[0] for name in names}  # decoder_layers, output, memory_encoder
    quantized = copy.copy(model)  # its own attributes; its child table is copied next
    quantized._modules = dict(model._modules)
    for top in tops:
        quantized._modules[top] = copy.deepcopy(model._modules[top])
    if per_row:
        for name in names:
            parent_name, _, child = name.rpartition(".")
            parent = quantized.get_submodule(parent_name) if parent_name else quantized
            parent._modules[child] = RowInt8Linear.from_float(parent._modules[child])
    else:
        qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
        with warnings.catch_warnings():  # torch marks its eager quantization API as deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            torch.ao.quantization.quantize_dynamic(
                quantized,
                qconfig_spec=dict.fromkeys(names, qconfig),
                dtype=torch.qint8,
                inplace=True,
            )
    object.__setattr__(quantized, "float_model", model)  # a reference, not a child module
    return quantized
