"""Models encoded and decoded by ONNX Runtime: the same weights, far less time on the CPU.

A decoding step of the served models is a few rows through three small layers, so on the CPU
its time goes to dispatching some hundred PyTorch operators (tens of microseconds each on the
2-core hosts), not to arithmetic. When a model is loaded, its encoder, memory encoder,
cross-attention keys/values and decoding step are exported as ONNX graphs (the step written
out as explicit operators, `_StepGraph`) and run by ONNX Runtime, whose per-operator cost is a
fraction of eager PyTorch's and which fuses the quantized matrix products. `OrtDecoder` keeps
the PyTorch model's decoding interface (`encode`, `init_cache`, `last_gates`), and its step
returns each row's best tokens with greedy and beam search's constraints and repeat ban
applied in the graph (`decode_candidates`, which `models.decoding` calls instead of
`decode_step`), so both searches run unchanged on it.

"ort" runs every graph in float32 (equal to PyTorch's up to rounding); "ort-int8" quantizes
their matrix products with constant weights dynamically (int8 weights per output channel of the
type `int8_weights` picks, activations per call). Measured within 0.3 BLEU of float on every
test set, with the source encoder int8 too (docs/decoding-speed.md). "native-int8" is
"ort-int8" with each decoding step one C++ call instead of the step graph (models/native_step.py).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import logging
import math
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from models.layers import DecoderCache, EncoderState, LearnedPositions, SinusoidalPositions

__all__ = ["INT8_WEIGHTS", "ORT_MODES", "OrtDecoder", "int8_weights", "thread_budget"]

ORT_MODES = ("ort", "ort-int8", "native-int8")
# Added to attention logits at padded keys. Finite, so a row whose keys are all padding (a
# sentence without a memory) gets finite garbage that the gate then discards, never NaN.
_MASKED = -1e9


def _position_table(positions: nn.Module) -> Tensor:
    """`(max_len, D)` rows the step reads its position from."""
    if isinstance(positions, SinusoidalPositions):
        return positions.table
    if isinstance(positions, LearnedPositions):
        return positions.weight
    raise ValueError(f"no ONNX step for positions {type(positions).__name__}")


class _StepGraph(nn.Module):
    """One decoding step as explicit operators, for export (not used to decode in PyTorch).

    Inputs: tokens `(B,)`, position `(1,)`, the order `(B,)` of the past rows each row
    continues (beam search's reordering, done here rather than as a copy of its own), the
    tokens each row may not emit `(B, J)` (pad, BOS and the repeat ban, padded with the pad
    id), N best to return (the length of a `(N,)` input), source bias `(G, 1, 1, S)`, and per
    layer the self-attention keys/values so far `(B', H, t, Dh)` and the cross-attention
    keys/values `(G, H, S, Dh)`. With `memory`, also the memory bias `(G, 1, 1, M)`, which
    sentences have a memory `(G, 1, 1)` as 0/1, and per layer the memory keys/values
    `(G, H, M, Dh)`.
    B = G*K rows: each sentence's K beams read one row of per-sentence tensors.
    Outputs: each row's N best log-probs and their tokens `(B, N)`, best first, its EOS
    log-prob `(B,)` (a row at its length limit may emit EOS alone: `decode_candidates`), each
    layer's extended self-attention keys and values, and with `memory` the gate averaged over
    layers `(B, 1)`. The N best rather than the whole vocabulary's log-probs: beam search no
    longer copies, masks and sorts a `(B, V)` array per step (about 3% of the time a sentence
    takes, docs/decoding-speed.md).
    """

    def __init__(self, model: nn.Module, memory: bool) -> None:
        super().__init__()
        self.model = model
        self.memory = memory
        first = model.decoder_layers[0].self_attn
        self.n_heads, self.d_head = first.n_heads, first.d_head
        self.table = _position_table(model.positions)
        self.eos = model.config.eos_id

    # Shapes are spelled with constants and -1 wherever they can be: a size read from a
    # tensor becomes four graph operators (Shape, Gather, Unsqueeze, Concat) at every use,
    # which were a third of the step's operators.

    def _heads(self, x: Tensor) -> Tensor:  # (R, 1, D) -> (R, H, 1, Dh): one position
        return x.reshape(-1, self.n_heads, 1, self.d_head)

    def _grouped(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor, g: int) -> Tensor:
        """q `(B, 1, D)` projected; k, v `(G, H, S, Dh)` shared by each sentence's B/G rows."""
        q = q.reshape(g, -1, self.n_heads, self.d_head).transpose(1, 2)  # (G, H, K, Dh)
        w = torch.softmax(q @ k.transpose(-1, -2) * self.d_head**-0.5 + bias, dim=-1)
        out = (w @ v).transpose(1, 2)  # (G, K, H, Dh)
        return out.reshape(-1, 1, self.n_heads * self.d_head)  # (B, 1, D)

    def forward(
        self,
        tokens: Tensor,
        position: Tensor,
        order: Tensor,
        ban: Tensor,
        n_best: Tensor,
        src_bias: Tensor,
        *rest: Tensor,
    ):
        m = self.model
        per_layer = 6 if self.memory else 4
        if self.memory:
            mem_bias, has_memory = rest[0], rest[1]
            rest = rest[2:]
        x = m.embed(tokens[:, None]) * m.embed_scale + self.table.index_select(0, position)
        g = rest[2].size(0)  # sentences, from the first layer's cross-attention keys
        if self.memory:  # (B, 1, 1): whether each row's sentence has a memory
            has = has_memory.reshape(g, 1, 1).expand(-1, x.size(0) // g, 1).reshape(-1, 1, 1)
        new_kv: list[Tensor] = []
        gates: list[Tensor] = []
        for i, layer in enumerate(m.decoder_layers):
            past_k, past_v, cross_k, cross_v = rest[per_layer * i : per_layer * i + 4]
            # the rows of the last step's keys/values each hypothesis continues
            past_k, past_v = past_k.index_select(0, order), past_v.index_select(0, order)
            a = layer.self_attn
            h = layer.self_attn_norm(x)
            k = torch.cat([past_k, self._heads(a.k_proj(h))], dim=2)  # (B, H, t+1, Dh)
            v = torch.cat([past_v, self._heads(a.v_proj(h))], dim=2)
            new_kv += [k, v]
            w = torch.softmax(
                self._heads(a.q_proj(h)) @ k.transpose(-1, -2) * self.d_head**-0.5, -1
            )
            x = x + a.out_proj((w @ v).reshape(-1, 1, self.n_heads * self.d_head))
            h = layer.cross_attn_norm(x)
            c = layer.cross_attn
            c_s = c.out_proj(self._grouped(c.q_proj(h), cross_k, cross_v, src_bias, g))
            if self.memory:
                mem_k, mem_v = rest[per_layer * i + 4 : per_layer * i + 6]
                r = layer.memory_attn
                c_m = r.out_proj(self._grouped(r.q_proj(h), mem_k, mem_v, mem_bias, g))
                gate = torch.sigmoid(layer.gate_source(c_s) + layer.gate_memory(c_m))  # (B,1,1)
                # Rows of a sentence without a memory: gate 1 and no memory context, exactly.
                gate = gate * has + (1.0 - has)
                c_m = c_m * has
                gates.append(gate[:, 0])
                x = x + c_m + gate * (c_s - c_m)
            else:
                x = x + c_s
            x = x + layer.ffn(layer.ffn_norm(x))
        logits = m.output(m.decoder_norm(x))[:, 0]  # (B, V)
        lp = torch.log_softmax(logits, dim=-1).scatter(1, ban, -math.inf)
        best_lp, best_ids = lp.topk(n_best.size(0), dim=-1)  # N read from the input's length
        out = [best_lp, best_ids, lp[:, self.eos], *new_kv]
        if self.memory:
            out.append(torch.stack(gates).mean(dim=0))
        return tuple(out)


class _EncoderStack(nn.Module):
    """All of a model's encoder layers as one module (exported as one graph)."""

    def __init__(self, layers: nn.ModuleList) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad)
        return x


class _KeysValues(nn.Module):
    """Every decoder layer's keys and values of one attention (`attr`) for states `x`."""

    def __init__(self, layers: nn.ModuleList, attr: str) -> None:
        super().__init__()
        self.layers, self.attr = layers, attr

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        out: list[Tensor] = []
        for layer in self.layers:
            out += getattr(layer, self.attr).project_kv(x)
        return tuple(out)


def _export(
    module: nn.Module,
    inputs: dict[str, Tensor],
    outputs: list[str],
    axes: dict[str, dict[int, str]],
) -> bytes:
    """`module` traced on the example `inputs` (in its argument order) as ONNX bytes."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notices
        torch.onnx.export(
            module.eval(),
            tuple(inputs.values()),
            buffer,
            input_names=list(inputs),
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def _step_graph(model: nn.Module, memory: bool) -> bytes:
    """`_StepGraph` of `model` as ONNX, traced on a small example."""
    c = model.config
    graph = _StepGraph(model, memory)
    h, dh = graph.n_heads, graph.d_head
    b, g, t, s, m = 4, 2, 3, 5, 7
    inputs = {
        "tokens": torch.full((b,), c.bos_id, dtype=torch.long),
        "position": torch.tensor([t], dtype=torch.long),
        "order": torch.tensor([1, 0, 3, 2]),
        "ban": torch.full((b, 2), c.pad_id, dtype=torch.long),
        "n_best": torch.zeros(3),
        "src_bias": torch.zeros(g, 1, 1, s),
    }
    axes: dict[str, dict[int, str]] = {
        "tokens": {0: "rows"},
        "order": {0: "rows"},
        "ban": {0: "rows", 1: "banned"},
        "n_best": {0: "best"},
        "src_bias": {0: "groups", 3: "src"},
    }
    if memory:
        inputs["mem_bias"], inputs["has_memory"] = torch.zeros(g, 1, 1, m), torch.ones(g, 1, 1)
        axes["mem_bias"], axes["has_memory"] = {0: "groups", 3: "mem"}, {0: "groups"}
    outputs = ["best_log_probs", "best_ids", "eos_log_probs"]
    axes["best_log_probs"] = axes["best_ids"] = {0: "rows", 1: "best"}
    axes["eos_log_probs"] = {0: "rows"}
    for i in range(len(model.decoder_layers)):
        per = [("self_k", b, t, "past"), ("self_v", b, t, "past"), ("cross_k", g, s, "src"),
               ("cross_v", g, s, "src")]  # fmt: skip
        if memory:
            per += [("memory_k", g, m, "mem"), ("memory_v", g, m, "mem")]
        for key, rows, width, axis in per:
            inputs[f"{key}{i}"] = torch.zeros(rows, h, width, dh)
            axes[f"{key}{i}"] = {0: "rows" if rows == b else "groups", 2: axis}
        outputs += [f"new_self_k{i}", f"new_self_v{i}"]
        axes[f"new_self_k{i}"] = axes[f"new_self_v{i}"] = {0: "rows", 2: "next"}
    if memory:
        outputs.append("gate")
        axes["gate"] = {0: "rows"}
    return _export(graph, inputs, outputs, axes)


def _kv_graph(model: nn.Module, attr: str) -> bytes:
    layers = len(model.decoder_layers)
    names = [f"{kv}{i}" for i in range(layers) for kv in ("k", "v")]
    axes = {"x": {0: "rows", 1: "len"}, **{n: {0: "rows", 2: "len"} for n in names}}
    x = torch.zeros(2, 5, model.config.d_model)
    return _export(_KeysValues(model.decoder_layers, attr), {"x": x}, names, axes)


def _encoder_graph(model: nn.Module) -> bytes:
    x, pad = torch.zeros(2, 5, model.config.d_model), torch.zeros(2, 5, dtype=torch.bool)
    axes = {"x": {0: "rows", 1: "len"}, "pad": {0: "rows", 1: "len"}, "out": {0: "rows", 1: "len"}}
    return _export(_EncoderStack(model.encoder_layers), {"x": x, "pad": pad}, ["out"], axes)


class _PackedMemoryEncoder(nn.Module):
    """A memory model's `MemoryEncoder` on its neighbours' real tokens only, for export.

    The position-wise work (every projection, layer norm and feed-forward layer: most of the
    encoder's time) runs on the packed tokens `(N, D)`; only attention lays them out per slot
    `(P, L, D)` (a gather through `*_index`, whose value N reads an all-zero row) and packs
    its output again (a gather through `*_pack`). The query sentences' keys/values are
    projected once per sentence and gathered per slot (`rows`), not once per neighbour.
    Padded, neighbours were about 45% padding on the medical test, in groups cut to their
    widest (docs/decoding-speed.md).
    Inputs: tgt `(Nt, D)`, t_index `(P*Lt,)`, t_pack `(Nt,)`, t_pad `(P, Lt)`; the same four
    for the retrieved sources (read by "cstm" only); context `(B, S, D)`, context_pad `(B, S)`
    and rows `(P,)`, each slot's sentence (read by "cstm" and "ctm"). Output: the encoded
    targets `(P, Lt, D)`, zero at padding.
    """

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder
        first = encoder.target_layers[0].self_attn
        self.n_heads, self.d_head = first.n_heads, first.d_head
        self.d_model = first.n_heads * first.d_head

    def _padded(self, x: Tensor, index: Tensor, pad: Tensor) -> Tensor:
        """Packed `(N, D)` -> per slot `(P, L, D)`, zero at padding."""
        full = torch.cat([x, torch.zeros(1, self.d_model)]).index_select(0, index)
        return full.reshape(pad.size(0), -1, self.d_model)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """q `(P, L, D)`, k and v `(P, S, D)`, key bias `(P, 1, 1, S)` -> `(P, L, D)`."""
        h, dh = self.n_heads, self.d_head
        q, k, v = (t.reshape(t.size(0), -1, h, dh).transpose(1, 2) for t in (q, k, v))
        w = torch.softmax(q @ k.transpose(-1, -2) * dh**-0.5 + bias, dim=-1)
        return (w @ v).transpose(1, 2).reshape(q.size(0), -1, self.d_model)

    def _layer(self, layer: nn.Module, x: Tensor, at: tuple[Tensor, ...], context: Any) -> Tensor:
        """One encoder layer on packed `x`; `at` (index, pack, pad, its key bias) lays it out
        per slot; `context(attention)` gives that cross-attention's keys, values and bias."""
        index, pack, pad, bias = at
        a = layer.self_attn
        h = layer.self_attn_norm(x)
        q, k, v = (self._padded(p(h), index, pad) for p in (a.q_proj, a.k_proj, a.v_proj))
        out = self._attend(q, k, v, bias).reshape(-1, self.d_model).index_select(0, pack)
        x = x + a.out_proj(out)
        if context is not None:
            c = layer.cross_attn
            q = self._padded(c.q_proj(layer.cross_attn_norm(x)), index, pad)
            out = self._attend(q, *context(c)).reshape(-1, self.d_model).index_select(0, pack)
            x = x + c.out_proj(out)
        return x + layer.ffn(layer.ffn_norm(x))

    def forward(
        self,
        tgt: Tensor,
        t_index: Tensor,
        t_pack: Tensor,
        t_pad: Tensor,
        src: Tensor,
        s_index: Tensor,
        s_pack: Tensor,
        s_pad: Tensor,
        context: Tensor,
        context_pad: Tensor,
        rows: Tensor,
    ) -> Tensor:
        e = self.encoder
        # Inputs a variant does not read stay out of the graph: each bias is made where used.
        reads_context = e.conditioned or e.source_layers is not None
        context_bias = _bias(context_pad).index_select(0, rows) if reads_context else None

        def query_sentences(c: nn.Module) -> tuple[Tensor, Tensor, Tensor | None]:
            k, v = c.k_proj(context).index_select(0, rows), c.v_proj(context).index_select(0, rows)
            return k, v, context_bias

        target_context: Any = query_sentences if e.conditioned else None
        if e.source_layers is not None:
            src_at = (s_index, s_pack, s_pad, _bias(s_pad))
            for layer in e.source_layers:
                src = self._layer(layer, src, src_at, query_sentences)
            sources = e.source_norm(src)

            def retrieved_sources(c: nn.Module) -> tuple[Tensor, Tensor, Tensor]:
                k = self._padded(c.k_proj(sources), s_index, s_pad)
                return k, self._padded(c.v_proj(sources), s_index, s_pad), src_at[3]

            target_context = retrieved_sources
        x, tgt_at = tgt, (t_index, t_pack, t_pad, _bias(t_pad))
        for layer in e.target_layers:
            x = self._layer(layer, x, tgt_at, target_context)
        return self._padded(e.norm(x), t_index, t_pad)


def _memory_encoder_graph(model: nn.Module) -> bytes:
    """`_PackedMemoryEncoder` of `model` as ONNX, traced on three slots of two sentences."""
    d = model.config.d_model
    inputs: dict[str, Tensor] = {}
    axes: dict[str, dict[int, str]] = {}
    for side, name, width in (("t", "tgt", 4), ("s", "src", 6)):
        real = torch.ones(3, width, dtype=torch.bool)
        real[0, width - 1 :] = real[1, width - 2 :] = False
        pack = real.reshape(-1).nonzero().squeeze(1)
        index = torch.full((real.numel(),), pack.numel(), dtype=torch.long)
        index[pack] = torch.arange(pack.numel())
        inputs[name], axes[name] = torch.zeros(pack.numel(), d), {0: f"{side}_tokens"}
        inputs[f"{side}_index"], axes[f"{side}_index"] = index, {0: f"{side}_positions"}
        inputs[f"{side}_pack"], axes[f"{side}_pack"] = pack, {0: f"{side}_tokens"}
        inputs[f"{side}_pad"], axes[f"{side}_pad"] = ~real, {0: "slots", 1: f"{side}_len"}
    inputs["context"], axes["context"] = torch.zeros(2, 5, d), {0: "sentences", 1: "clen"}
    inputs["context_pad"] = torch.zeros(2, 5, dtype=torch.bool)
    axes["context_pad"] = {0: "sentences", 1: "clen"}
    inputs["rows"], axes["rows"] = torch.tensor([0, 0, 1]), {0: "slots"}
    axes["out"] = {0: "slots", 1: "t_len"}
    return _export(_PackedMemoryEncoder(model.memory_encoder), inputs, ["out"], axes)


class _QuietQuantizer(logging.Filter):
    """Drops the quantizer's advice to pre-process a graph first (logged on the root logger
    at every call; the shape inference it suggests changes nothing for these graphs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")


_QUIET = _QuietQuantizer()


# CPU flags of the instructions that multiply uint8 activations by int8 weights with exact
# int32 sums (VNNI, AMX). Without them, ONNX Runtime's x86 int8 kernels pair the products into
# saturating int16 sums (AVX2's vpmaddubsw): two products of 255 x 127 overflow them, two of
# 255 x 64 do not, so int8 weights kept to 7 bits ("s7", -64..64) are summed exactly there.
_EXACT_U8S8 = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
_AVX2 = "avx2"
# s8: int8 weights; s7: int8 weights in -64..64 (one bit of precision less); u8: uint8 weights
INT8_WEIGHTS = ("s8", "s7", "u8")


def int8_weights(cpu_flags: frozenset[str] | None = None) -> str:
    """The int8 weight type "ort-int8" quantizes to on this CPU: "s8" where its products are
    exact (`_EXACT_U8S8`), "s7" on AVX2 without them, "u8" elsewhere. The u8 x s8 kernels are
    the fast ones: with VNNI or AMX the output projection of 40 rows took 0.36 ms with s8
    weights and 1.29 ms with u8; on AVX2 alone 128 rows took about 0.8x u8's time with s7
    (`benchmarks.int8_products`, docs/decoding-speed.md). Full s8 weights saturate AVX2's
    sums (a toy model agreed with float on 184 of 200 sentences, against 200 with u8); s7's
    do not. `RAGMT_INT8_WEIGHTS` (s8, s7 or u8; auto or unset: this rule) overrides the
    choice; `cpu_flags` stands for this CPU's (Linux /proc/cpuinfo) in tests."""
    forced = os.environ.get("RAGMT_INT8_WEIGHTS", "auto")
    if forced != "auto":
        if forced not in INT8_WEIGHTS:
            raise ValueError(
                f"RAGMT_INT8_WEIGHTS must be auto or one of {INT8_WEIGHTS}, got {forced!r}"
            )
        return forced
    flags = _cpu_flags() if cpu_flags is None else cpu_flags
    if flags & _EXACT_U8S8:
        return "s8"
    return "s7" if _AVX2 in flags else "u8"


def _cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (empty where /proc/cpuinfo is not there to say)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return frozenset()
    return frozenset(line.partition(":")[2].split())


def _quantize(onnx_bytes: bytes, weights: str) -> bytes:
    """The graph with its constant-weight matrix products in int8 (per output channel), with
    `weights` "s8", "s7" or "u8" (`int8_weights`)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if _QUIET not in logging.getLogger().filters:
        logging.getLogger().addFilter(_QUIET)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "graph.onnx", Path(tmp) / "graph-int8.onnx"
        src.write_bytes(onnx_bytes)
        quantize_dynamic(
            src, dst, op_types_to_quantize=["MatMul"], per_channel=True,
            weight_type=QuantType.QUInt8 if weights == "u8" else QuantType.QInt8,
            reduce_range=weights == "s7",
        )  # fmt: skip
        return dst.read_bytes()


# Positions (a step's rows, an encoder call's tokens) from which a call runs on more than one
# thread. ONNX Runtime splits each operator across its threads, which pays for wide calls
# only: on the 2-core hosts two threads took a 4-row step from 0.70 to 0.94 ms and a
# 25-token encoder call from 1.8 to 2.1 ms, but a 128-row step from 19.8 to 16.0 ms and a
# 200-token encoder call from 14.4 to 10.8 ms (about even at 32 rows and 50 tokens).
PARALLEL_POSITIONS = 64

_local = threading.local()  # this thread's `thread_budget`


@contextlib.contextmanager
def thread_budget(threads: int) -> Iterator[None]:
    """Within the block, this thread's graph calls use at most `threads` threads (a worker
    decoding one batch of several at once gets its share of the cores)."""
    if threads < 1:
        raise ValueError(f"a thread budget must be at least 1, got {threads}")
    before = getattr(_local, "budget", None)
    _local.budget = threads
    try:
        yield
    finally:
        _local.budget = before


def _budget(threads: int | None) -> int:
    """The threads a wide call may use: `threads` where set, else this thread's budget
    (`thread_budget`), else torch's."""
    return threads or getattr(_local, "budget", None) or torch.get_num_threads()


def _threads_for(positions: int, threads: int | None) -> int:
    """A call's threads: its budget (`_budget`) from `PARALLEL_POSITIONS` positions on, else 1."""
    return _budget(threads) if positions >= PARALLEL_POSITIONS else 1


def _positions(feed: dict[str, np.ndarray]) -> int:
    """How wide a call is: a step's rows, the packed memory encoder's tokens, else its first
    input's rows times length."""
    if "tokens" in feed:
        return len(feed["tokens"])
    if "t_pack" in feed:
        return sum(len(feed[k]) for k in ("t_pack", "s_pack") if k in feed)
    first = next(iter(feed.values()))
    return int(np.prod(first.shape[:2]))


class _Graph:
    """An exported graph and its ONNX Runtime sessions. A call runs on one thread, or, when it
    is wide enough (`PARALLEL_POSITIONS`), on `threads`, else on this thread's budget
    (`thread_budget`), else on torch's current thread count (which the service and the
    benchmarks set). A session is made per thread count when first needed."""

    def __init__(self, onnx_bytes: bytes, threads: int | None) -> None:
        self.onnx_bytes, self.threads = onnx_bytes, threads
        self._sessions: dict[int, Any] = {}
        self._lock = threading.Lock()  # two decoding workers may start one session at once
        self.inputs: frozenset[str] = frozenset()  # the exporter leaves out unread inputs

    def run(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        threads = _threads_for(_positions(feed), self.threads)
        session = self._sessions.get(threads) or self._start(threads)
        if len(feed) != len(self.inputs):  # e.g. the "tm" memory encoder reads no context
            feed = {k: v for k, v in feed.items() if k in self.inputs}
        return session.run(None, feed)

    def _start(self, threads: int) -> Any:
        import onnxruntime as ort

        with self._lock:
            if threads in self._sessions:
                return self._sessions[threads]
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3  # notes on unused initializers are not errors
            # ORT's worker threads wait without spinning: between two graph calls PyTorch's
            # own threads run, and on two cores both pools spinning made batch 1 3-4x slower
            # with two threads than with one (medical test, memory model with retrieval)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(
                self.onnx_bytes, options, providers=["CPUExecutionProvider"]
            )
            self.inputs = frozenset(i.name for i in session.get_inputs())
            self._sessions[threads] = session
            return session


class _OrtEncoderStack(nn.Module):
    """Stands in for a model's encoder layers (`Transformer.encode` calls it as one layer)."""

    def __init__(self, graph: _Graph) -> None:
        super().__init__()
        self.graph = graph

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        out = self.graph.run({"x": x.float().contiguous().numpy(), "pad": pad.numpy()})
        return torch.from_numpy(out[0])


class _NativeEncoderStack(nn.Module):
    """As `_OrtEncoderStack`, by the native library (`models.native_step.NativeEncoder`)."""

    def __init__(self, encoder: Any, threads: int | None) -> None:
        super().__init__()
        self.encoder, self.threads = encoder, threads

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        if pad.dim() != 2:
            raise ValueError("the native encoder takes padding (B, S), not an attention mask")
        threads = _threads_for(x.size(0) * x.size(1), self.threads)
        return torch.from_numpy(self.encoder(x.float().numpy(), pad.numpy(), threads))


class _OrtMemoryEncoder(nn.Module):
    """Stands in for a memory model's `MemoryEncoder`: packs its neighbours' real tokens and
    runs `_PackedMemoryEncoder`'s graph on them."""

    packs = True  # SemiParametricModel.encode groups its slots by `PACKED_GROUPS`

    def __init__(self, graph: _Graph, uses_sources: bool) -> None:
        super().__init__()
        self.graph, self.uses_sources = graph, uses_sources

    def forward(self, *inputs: Tensor | None) -> Tensor:
        """`MemoryEncoder.forward`'s arguments in its order (tgt, tgt_pad, src, src_pad,
        context, context_pad, rows); `src`, `src_pad` None but for "cstm", `rows` optional."""
        tgt, tgt_pad, src, src_pad, context, context_pad, *rest = inputs
        assert tgt is not None and tgt_pad is not None
        assert context is not None and context_pad is not None
        rows = rest[0] if rest and rest[0] is not None else torch.arange(tgt.size(0))
        feed = _packed("t", "tgt", tgt, tgt_pad)
        if src is not None and src_pad is not None:
            feed |= _packed("s", "src", src, src_pad)
        feed |= {
            "context": context.float().contiguous().numpy(),
            "context_pad": context_pad.numpy(),
            "rows": rows.numpy(),
        }
        return torch.from_numpy(self.graph.run(feed)[0])


class _NativeMemoryEncoder(nn.Module):
    """Stands in for a memory model's `MemoryEncoder` with the native library's
    (`models.native_step.NativeMemoryEncoder`): every neighbour of a batch in one call, the
    memory returned packed (`SemiParametricModel.encode` reads `encodes_all`)."""

    encodes_all = True

    def __init__(self, encoder: Any, threads: int | None) -> None:
        super().__init__()
        self.encoder, self.threads = encoder, threads
        self.uses_sources = encoder.uses_sources

    def encode_all(self, neighbours: Any, base: EncoderState) -> tuple[Tensor, Tensor]:
        """The packed memory `(B, M, D)` and its padding `(B, M)` of `neighbours` for the
        sentences encoded as `base`."""
        tokens = int(neighbours.tgt.ne(self.encoder.pad_id).sum())
        threads = _threads_for(tokens, self.threads)
        out, pad = self.encoder(
            neighbours.src.numpy(),
            neighbours.tgt.numpy(),
            base.memory.float().numpy(),
            base.src_pad.numpy(),
            threads,
        )
        return torch.from_numpy(out), torch.from_numpy(pad)

    def forward(self, *inputs: Any) -> Tensor:
        raise NotImplementedError("the native memory encoder encodes a batch at once: encode_all")


def _packed(side: str, name: str, x: Tensor, pad: Tensor) -> dict[str, np.ndarray]:
    """`_PackedMemoryEncoder`'s four inputs of one side for `x (P, L, D)`, padding `(P, L)`."""
    padding = pad.numpy()
    pack = np.flatnonzero(~padding.reshape(-1))
    index = np.full(padding.size, pack.size, dtype=np.int64)
    index[pack] = np.arange(pack.size)
    tokens = x.detach().float().reshape(-1, x.size(-1)).numpy()[pack]
    return {name: tokens, f"{side}_index": index, f"{side}_pack": pack, f"{side}_pad": padding}


def _graphs(
    model: nn.Module, mode: str, weights: str | None, native: bool = False
) -> dict[str, bytes]:
    """Every graph `OrtDecoder` runs for `model`, by name, int8 with "ort-int8"; with `native`
    none (the native library stands in for the steps, the encoders and the keys/values).

    Kept for the last few models by their weights' digest: exporting and quantizing takes
    seconds, and a process that loads one bundle several times (tests, a reloading service)
    pays it once.
    """
    key = (type(model).__name__, mode, str(weights), native, _digest(model))
    if key in _EXPORTED:
        _EXPORTED.move_to_end(key)
        return _EXPORTED[key]

    def int8(graph: bytes) -> bytes:
        return graph if weights is None else _quantize(graph, weights)

    graphs = {}
    if not native:
        graphs["cross_kv"] = int8(_kv_graph(model, "cross_attn"))
        graphs["encoder"] = int8(_encoder_graph(model))
        graphs["step"] = int8(_step_graph(model, False))
    if getattr(model, "uses_memory", False) and not native:
        graphs["memory_step"] = int8(_step_graph(model, True))
        graphs["memory_kv"] = int8(_kv_graph(model, "memory_attn"))
        graphs["memory_encoder"] = int8(_memory_encoder_graph(model))
    _EXPORTED[key] = graphs
    while len(_EXPORTED) > 4:
        _EXPORTED.popitem(last=False)
    return graphs


_EXPORTED: OrderedDict[tuple[str, str, str, bool, str], dict[str, bytes]] = OrderedDict()


def _digest(model: nn.Module) -> str:
    """sha256 of the model's configuration and every weight and buffer."""
    h = hashlib.sha256(repr(model.config).encode())
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(memoryview(tensor.detach().contiguous().cpu().numpy()).cast("B"))
    return h.hexdigest()


# Architectures with an ONNX Runtime path: their encoder, memory encoder and decoder layers
# are the ones `_StepGraph` and the graphs above spell out.
SUPPORTED = ("Transformer", "SemiParametricModel")


def supports(model: nn.Module) -> bool:
    """Whether `OrtDecoder` can run `model` (others decode with PyTorch)."""
    return type(model).__name__ in SUPPORTED


def check_runnable(model: nn.Module, mode: str, supported: bool, path: str) -> None:
    """ValueError unless ONNX Runtime can run `model` in `mode`: a known mode, an architecture
    with such a `path`, weights on the CPU."""
    if mode not in ORT_MODES:
        raise ValueError(f"mode must be one of {ORT_MODES}, got {mode!r}")
    if not supported:
        raise ValueError(f"no {path} for {type(model).__name__}")
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("ONNX Runtime decoding is for the CPU; the model is on another device")


class OrtDecoder(nn.Module):
    """A model that encodes and decodes with ONNX Runtime (`mode` "ort" or "ort-int8"), or
    encodes with it and decodes each step natively ("native-int8").

    `float_model` is the PyTorch model itself, unchanged: a dense store built with it encodes
    queries with it (float), and decoding then reads those states rather than encoding again.
    `native_search`: with the native step, beam search runs in the native library too (False:
    beam search's Python loop calls the native step, which tests and benchmarks compare).
    """

    native_search = True

    def __init__(self, model: nn.Module, mode: str = "ort-int8", threads: int | None = None):
        super().__init__()
        check_runnable(model, mode, supports(model), "ONNX Runtime path")
        model.eval()
        self.float_model = model
        self.mode = mode
        self.config = model.config
        self.uses_memory = bool(getattr(model, "uses_memory", False))
        self.native = mode == "native-int8"
        self.threads = threads  # None: this thread's budget, else torch's (as `_Graph`)

        # the int8 weight type its graphs were built with (None in float): what /info and the
        # records report, read here once rather than again by each of them
        self.int8_weights = int8_weights() if mode != "ort" else None
        self.native_isa: str | None = None  # native-int8: the instructions of its products
        self.native_version: str | None = None  # native-int8: its library's source digest
        native = self.native
        if native:  # each step one C++ call (models/native_step.py), checked before any export
            from models import native_step

            runnable, why = native_step.supports(model)
            if not runnable:
                raise ValueError(f"native-int8 cannot decode this model: {why}")
        built = _graphs(
            model, "ort" if mode == "ort" else "ort-int8", self.int8_weights, native=native
        )
        graphs = {name: _Graph(data, threads) for name, data in built.items()}
        # the decoder layers' keys/values of the source (and the memory): graphs, or with
        # native-int8 the native library's, straight into the halves its step reads
        self._kv: dict[str, Any] = (
            {
                kind: native_step.NativeKeysValues(model, f"{kind}_attn")
                for kind in (("cross", "memory") if self.uses_memory else ("cross",))
            }
            if native
            else {
                kind: graphs[f"{kind}_kv"] for kind in ("cross", "memory") if f"{kind}_kv" in graphs
            }
        )
        # A shallow copy whose encoder layers (and memory encoder) are graphs: its `encode`
        # is the model's own, embeddings, padding and neighbour handling included.
        encoder = copy.copy(model)
        encoder._modules = dict(model._modules)
        stack = (
            _NativeEncoderStack(native_step.NativeEncoder(model), threads)
            if native
            else _OrtEncoderStack(graphs["encoder"])
        )
        encoder._modules["encoder_layers"] = nn.ModuleList([stack])
        if self.uses_memory:
            uses_sources = model.memory_encoder.uses_sources
            encoder._modules["memory_encoder"] = (
                _NativeMemoryEncoder(native_step.NativeMemoryEncoder(model), threads)
                if native
                else _OrtMemoryEncoder(graphs["memory_encoder"], uses_sources)
            )
        kinds = (False, True) if self.uses_memory else (False,)
        if native:
            self._steps: dict[bool, Any] = {m: native_step.NativeStep(model, m) for m in kinds}
            self.native_isa, self.native_version = native_step.isa(), native_step.version()
        else:
            self._steps = {m: graphs["memory_step" if m else "step"] for m in kinds}
        object.__setattr__(self, "_encoder", encoder)  # not a child: no second copy of weights
        # per thread (workers may decode at once): the last step's gates, or its row count, and
        # the native step's per-sentence tensors of the sentences being decoded
        self._gates = threading.local()

    @property
    def encoder_layers(self) -> nn.ModuleList:
        """The encoder layers as this model runs them: one graph standing for all of them."""
        return self._encoder.encoder_layers

    def encode(self, *args: Any, **kwargs: Any) -> EncoderState:
        """As the model's `encode`, its encoder layers (and memory encoder) run as graphs."""
        return self._encoder.encode(*args, **kwargs)

    def init_cache(self, state: EncoderState) -> DecoderCache:
        """The cross-attention (and memory) keys/values and attention biases; all of them per
        sentence, as `Transformer.init_cache` makes them. For the native step every layer's
        are stacked in the first layer's dict, the keys transposed (`models.native_step`)."""
        layers: list[dict[str, Tensor]] = [{} for _ in range(len(self.float_model.decoder_layers))]
        first = layers[0]
        states = {"cross": (state.memory, state.src_pad)}
        first["src_bias"] = _bias(state.src_pad)
        if self.uses_memory and state.retrieved.size(1) > 0:
            states["memory"] = (state.retrieved, state.retrieved_pad)
            first["mem_bias"] = _bias(state.retrieved_pad)
            first["has_memory"] = state.has_memory.float()[:, None, None]
        for kind, (x, pad) in states.items():
            x = x.float().contiguous().numpy()
            if self.native:
                threads = _threads_for(int((~pad).sum()), self.threads)
                kt, v = self._kv[kind](x, pad.numpy(), threads)
                first[f"{kind}_kt"], first[f"{kind}_v"] = torch.from_numpy(kt), torch.from_numpy(v)
            else:
                _put(layers, kind, self._kv[kind].run({"x": x}))
        keys = frozenset(k for c in layers for k in c)
        return _ReorderedCache(layers=layers, per_sentence=keys)

    def decode_candidates(
        self,
        last_tokens: Tensor,
        state: EncoderState,
        cache: DecoderCache,
        n: int,
        forced: np.ndarray,
        ban: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One step, as `Transformer.decode_step` then `models.decoding`'s constraints and top
        n: each row's n best log-probs and tokens `(B, n)`, best first, with pad and BOS never,
        the tokens of `ban` `(B, J)` (a row's padded with the pad id) never, and EOS alone on
        the `forced` `(B,)` rows. `cache` is extended in place."""
        first = cache.layers[0]
        memory = "mem_bias" in first
        rows = last_tokens.size(0)
        order = getattr(cache, "order", None)
        c = self.config
        never = np.broadcast_to(np.array([c.pad_id, c.bos_id], dtype=np.int64), (rows, 2))
        banned = np.ascontiguousarray(never) if ban is None else np.hstack([never, ban])
        rows_order = np.arange(rows) if order is None else order.numpy()
        if self.native:
            best_lp, best_ids, eos_lp, gate = self._native_step(
                first, memory, last_tokens.numpy(), cache.step, rows_order, banned, n
            )
        else:
            best_lp, best_ids, eos_lp, gate = self._graph_step(
                cache, memory, last_tokens.numpy(), rows_order, banned, n
            )
        if isinstance(cache, _ReorderedCache):
            cache.order = None
        if self.uses_memory:  # without a memory the gate is 1: made only when asked for
            self._gates.last = torch.from_numpy(gate) if gate is not None else rows
        cache.step += 1
        if forced.any():  # rows at their length limit: EOS alone, as `_constrain` does
            best_lp[forced] = -math.inf
            best_lp[forced, 0] = eos_lp[forced]
            best_ids[forced] = c.pad_id
            best_ids[forced, 0] = c.eos_id
        return best_lp, best_ids

    def _graph_step(
        self,
        cache: DecoderCache,
        memory: bool,
        tokens: np.ndarray,
        order: np.ndarray,
        ban: np.ndarray,
        n: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The step graph's best log-probs and tokens, EOS log-probs and gate (None without a
        memory); the self-attention keys/values of `cache` extended."""
        first = cache.layers[0]
        feed = {
            "tokens": tokens,
            "position": np.array([cache.step], dtype=np.int64),
            "order": order,
            "ban": ban,
            "n_best": np.zeros(n, dtype=np.float32),
            "src_bias": first["src_bias"].numpy(),
        }
        if memory:
            feed["mem_bias"] = first["mem_bias"].numpy()
            feed["has_memory"] = first["has_memory"].numpy()
        for i, layer in enumerate(cache.layers):
            if "self_k" in layer:
                feed[f"self_k{i}"], feed[f"self_v{i}"] = (
                    layer["self_k"].numpy(),
                    layer["self_v"].numpy(),
                )
            else:
                k = layer["cross_k"]
                empty = np.zeros((len(tokens), k.size(1), 0, k.size(3)), dtype=np.float32)
                feed[f"self_k{i}"] = feed[f"self_v{i}"] = empty
            feed[f"cross_k{i}"], feed[f"cross_v{i}"] = (
                layer["cross_k"].numpy(),
                layer["cross_v"].numpy(),
            )
            if memory:
                feed[f"memory_k{i}"] = layer["memory_k"].numpy()
                feed[f"memory_v{i}"] = layer["memory_v"].numpy()
        out = self._steps[memory].run(feed)
        for i, layer in enumerate(cache.layers):
            layer["self_k"] = torch.from_numpy(out[3 + 2 * i])
            layer["self_v"] = torch.from_numpy(out[4 + 2 * i])
        return out[0], out[1], out[2], out[-1] if memory else None

    def _sentences(self, first: dict[str, Tensor], memory: bool) -> Any:
        """The native step's per-sentence tensors (`models.native_step.SentenceTensors`) of
        the stacked cache `first`: made once per sentence, and again only when finished
        sentences are dropped (which makes new per-sentence tensors)."""
        from models.native_step import SentenceTensors

        key = (first["cross_kt"], first.get("memory_kt"))
        bound = getattr(self._gates, "sentences", None)
        if bound is None or bound[0][0] is not key[0] or bound[0][1] is not key[1]:
            groups = first["src_bias"].size(0)
            memory_parts = {}
            if memory:
                memory_parts = {
                    "mem_bias": first["mem_bias"].numpy().reshape(groups, -1),
                    "has_memory": first["has_memory"].numpy().reshape(-1),
                    "mem_kt": first["memory_kt"].numpy(),
                    "mem_v": first["memory_v"].numpy(),
                }
            sentences = SentenceTensors(
                src_bias=first["src_bias"].numpy().reshape(groups, -1),
                cross_kt=first["cross_kt"].numpy(),
                cross_v=first["cross_v"].numpy(),
                **memory_parts,
            )
            bound = self._gates.sentences = (key, sentences)
        return bound[1]

    def _native_step(
        self,
        first: dict[str, Tensor],
        memory: bool,
        tokens: np.ndarray,
        position: int,
        order: np.ndarray,
        ban: np.ndarray,
        n: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """As `_graph_step`, by the native step on the stacked tensors of `first`."""
        sentences = self._sentences(first, memory)
        threads = _threads_for(len(tokens), self.threads)
        best_lp, best_ids, eos_lp, past, gate = self._steps[memory].step(
            tokens, position, order, ban, n, sentences, first.get("self_kv"), threads
        )
        first["self_kv"] = past  # deferred like the graph's keys/values: rows reordered by it
        return best_lp, best_ids, eos_lp, gate

    def native_beam_search(
        self,
        cache: DecoderCache,
        limits: np.ndarray,
        beams: int,
        length_penalty: float,
        repeats: Any,
    ) -> tuple[list[list[int]], list[float | None]] | None:
        """The whole beam search in the native library (`NativeStep.beam_search`), from a
        fresh `init_cache`: each sentence's best hypothesis and mean gate (None without a
        memory). None where this decoder has no native step."""
        if not (self.native and self.native_search):
            return None
        first = cache.layers[0]
        memory = "mem_bias" in first
        c = self.config
        hyps, gates = self._steps[memory].beam_search(
            self._sentences(first, memory), limits, beams, length_penalty,
            (c.pad_id, c.bos_id), repeats, _budget(self.threads), PARALLEL_POSITIONS,
        )  # fmt: skip
        return hyps, [None if np.isnan(g) else float(g) for g in gates]

    def last_gates(self) -> Tensor:
        """The last step's gate averaged over the decoder layers `(B, 1)` (1.0 without memory)."""
        gate = getattr(self._gates, "last", None)
        if gate is None:
            raise ValueError("no decoding step has run")
        if isinstance(gate, int):  # rows of a step without a memory
            return torch.ones(gate, 1)
        return gate


@dataclass
class _ReorderedCache(DecoderCache):
    """A cache whose self-attention keys/values are reordered by the next step's graph:
    `order` `(B,)` holds, for each row to come, the row it continues (None: in order)."""

    order: Tensor | None = None

    def index_select(self, idx: Tensor) -> DecoderCache:
        """Rows `idx`, one a sentence (greedy dropping finished sentences): the per-sentence
        tensors compacted in place (`_compact`), this cache spent."""
        return self.select_sentences(idx, idx)

    def select_sentences(self, sentences: Tensor, rows: Tensor) -> DecoderCache:
        """As `DecoderCache.select_sentences`, but the per-sentence tensors (the cross-attention
        and memory keys/values, most of the cache) are compacted in place rather than copied
        (`_compact`), and the self-attention keys/values are reordered by the next step. This
        cache is spent: its per-sentence tensors now hold the kept sentences first."""
        cache = self._rows(rows, keep=self.per_sentence)
        for layer in cache.layers:
            for key in self.per_sentence & layer.keys():
                layer[key] = _compact(layer[key], sentences)
        return cache

    def _rows(self, idx: Tensor, keep: frozenset[str]) -> _ReorderedCache:
        deferred = keep | {"self_k", "self_v", "self_kv"}
        layers = [
            {k: v if k in deferred else v.index_select(0, idx) for k, v in c.items()}
            for c in self.layers
        ]
        order = idx if self.order is None else self.order.index_select(0, idx)
        return _ReorderedCache(layers, self.step, self.per_sentence, order)


def _compact(t: Tensor, idx: Tensor) -> Tensor:
    """Rows `idx` of `t` as the first `len(idx)` rows of `t` itself, returned as that prefix:
    only the rows whose place changes are copied, in place. Beam search orders the sentences it
    keeps so that few move (`models.decoding.fill_order`); a prefix of a contiguous tensor is
    fed to ONNX Runtime without a copy. Dropping finished sentences by `index_select` copied
    every kept sentence's keys and values, a tenth of a batch of 32's decoding time."""
    moved = torch.nonzero(idx != torch.arange(idx.numel())).flatten()
    if moved.numel():
        t[moved] = t.index_select(0, idx.index_select(0, moved))
    return t[: idx.numel()]


def _put(layers: list[dict[str, Tensor]], kind: str, kv: list[np.ndarray]) -> None:
    """Each layer's keys/values `(G, H, S, Dh)` from a keys/values graph's outputs."""
    for i, layer in enumerate(layers):
        layer[f"{kind}_k"] = torch.from_numpy(kv[2 * i])
        layer[f"{kind}_v"] = torch.from_numpy(kv[2 * i + 1])


def _bias(pad: Tensor) -> Tensor:
    """`(G, S)` padding -> `(G, 1, 1, S)` additive attention bias."""
    return torch.zeros(pad.shape).masked_fill_(pad, _MASKED)[:, None, None, :].contiguous()
