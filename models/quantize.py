"""Int8 weights for CPU decoding: the decoder's linear layers quantized dynamically (and a
memory model's memory encoder).

Decoding time goes to the decoder (output projection, self- and cross-attention, feed-forward:
over 90% at batch 1 on the CPU); its matrix products with int8 weights (per output channel)
and activations quantized on the fly run 1.5-3x faster. The encoder stays float: its states
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
from torch import nn

QUANTIZATIONS = ("auto", "none", "int8")  # auto: int8 on the CPU, none elsewhere


def resolve(quantize: str, device: torch.device | str) -> str:
    """`quantize` for a model on `device`: "auto" becomes int8 on the CPU (measured within
    0.16 BLEU of float on every test set, docs/decoding-speed.md) and none elsewhere."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize must be one of {QUANTIZATIONS}, got {quantize!r}")
    if quantize != "auto":
        return quantize
    return "int8" if torch.device(device).type == "cpu" else "none"


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


def quantize_int8(model: nn.Module) -> nn.Module:
    """`model` (in eval mode, on the CPU) with int8 decoder linears: a new module that shares
    every other submodule with `model` (the encoder, embeddings, the memory encoder) and
    names it as `float_model`, so retrieval that encodes with `model` serves its decoding too.
    `model` itself is unchanged."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 weights are for CPU decoding; the model is on another device")
    model.eval()
    names = int8_modules(model)
    tops = {name.split(".")[0] for name in names}  # decoder_layers, output, memory_encoder
    quantized = copy.copy(model)  # its own attributes; its child table is copied next
    quantized._modules = dict(model._modules)
    for top in tops:
        quantized._modules[top] = copy.deepcopy(model._modules[top])
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    with warnings.catch_warnings():  # torch marks its eager quantization API as deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        torch.ao.quantization.quantize_dynamic(
            quantized, qconfig_spec=dict.fromkeys(names, qconfig), dtype=torch.qint8, inplace=True
        )
    object.__setattr__(quantized, "float_model", model)  # a reference, not a child module
    return quantized
