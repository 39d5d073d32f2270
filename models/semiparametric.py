"""Semi-parametric Transformer (Bapna & Firat, NAACL 2019): NMT over a retrieved memory.

Retrieved sentence pairs (X_i, Y_i) are encoded into a memory once per sentence; every decoder
cross-attention layer attends to the source and to that memory and mixes the two contexts with
a learned scalar gate. The memory encoder comes in three variants, chosen by config so the
ablations share this file:

- "cstm" (conditional source-target memory): X_i attends to itself and to the encoded current
  source X; Y_i attends to itself and to the encoded X_i. The memory is the encoded Y_i.
- "ctm" (conditional target memory): Y_i attends to itself and directly to X; X_i is unused.
- "tm" (target memory): Y_i is encoded alone.

With no neighbours (or only empty slots) a row's gate is forced to 1, so the model is exactly
the Transformer it extends; that is how a domain without a retrieval store is served.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from models.layers import (
    BlockConfig,
    DecoderLayer,
    EncoderLayer,
    EncoderState,
    FeedForward,
    MultiHeadAttention,
)
from models.transformer import Transformer, TransformerConfig

__all__ = [
    "MEMORY_MODES",
    "GatedDecoderLayer",
    "MemoryEncoder",
    "Neighbours",
    "SemiParametricConfig",
    "SemiParametricModel",
    "SemiParametricState",
    "from_transformer",
]

MEMORY_MODES = ("cstm", "ctm", "tm")

# Gate bias at initialisation (the config's default): sigmoid(2) ~ 0.88 of each context comes
# from the source, so a model warm-started from a trained baseline begins close to it. Measured
# on en-de (docs/semiparametric-en-de.md): with a randomly initialised memory path the gate then
# closed to 0.99 within 439 updates and the memory went unread; `gate_init_bias` 0 (an even mix)
# with `memory_init` "baseline" is the setting that trains it.
GATE_INIT_BIAS = 2.0
MEMORY_INITS = ("random", "baseline")

# The memory encoder runs on neighbour slots grouped by length: at most this many groups, each
# of at least this many slots (a single sentence's few neighbours stay one call).
MEMORY_GROUPS = 4
MEMORY_GROUP_MIN = 64
# An encoder that packs real tokens (ONNX Runtime's) still lays each neighbour out padded to the
# call's widest for attention (softmax and its transposes were 41% of its time at batch 32).
# Grouped by length, a batch of 32 took 0.91x the time on the medical and general tests (its
# memory encoder 0.57-0.64x; docs/decoding-speed.md); a sentence's few neighbours stay one call.
PACKED_GROUPS = 6
PACKED_GROUP_MIN = 32

# Fields of TransformerConfig a warm start may change: training settings, not shapes.
_WARM_START_FREE = frozenset({"dropout", "attn_dropout"})


@dataclass(frozen=True)
class SemiParametricConfig(TransformerConfig):
    """TransformerConfig plus the retrieved memory; unknown keys fail in `from_dict`."""

    memory_layers: int = 1  # layers encoding each retrieved source and target
    memory_mode: str = "cstm"  # "cstm" | "ctm" | "tm"
    max_neighbours: int = 10  # N, retrieved pairs per sentence
    max_neighbour_len: int = 64  # tokens per retrieved side; the memory has N * this positions
    gate_init_bias: float = GATE_INIT_BIAS  # g = sigmoid(this) at initialisation
    # Warm start of the memory path from a baseline (`from_transformer`): "random" keeps it
    # freshly initialised; "baseline" copies trained layers into it (see `from_transformer`).
    memory_init: str = "random"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("memory_layers", "max_neighbours", "max_neighbour_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.memory_mode not in MEMORY_MODES:
            raise ValueError(f"memory_mode must be one of {MEMORY_MODES}, got {self.memory_mode!r}")
        if self.memory_init not in MEMORY_INITS:
            raise ValueError(f"memory_init must be one of {MEMORY_INITS}, got {self.memory_init!r}")
        if self.max_neighbour_len > self.max_len:
            raise ValueError(
                f"max_neighbour_len {self.max_neighbour_len} exceeds max_len {self.max_len}"
            )


# --------------------------------------------------------------------------- inputs and state


@dataclass(frozen=True)
class Neighbours:
    """Retrieved pairs as token ids, right-padded with pad_id; a slot of only padding is absent.

    N may be 0 (no store, or nothing retrieved). Token sequences carry no BOS/EOS.
    """

    src: Tensor  # (B, N, Ls) retrieved sources (unused by "ctm" and "tm")
    tgt: Tensor  # (B, N, Lt) retrieved targets

    def __post_init__(self) -> None:
        if self.src.dim() != 3 or self.tgt.dim() != 3:
            raise ValueError(
                f"neighbours must be (B, N, L), got src {tuple(self.src.shape)} "
                f"and tgt {tuple(self.tgt.shape)}"
            )
        if self.src.shape[:2] != self.tgt.shape[:2]:
            raise ValueError(
                f"neighbour src {tuple(self.src.shape)} and tgt {tuple(self.tgt.shape)} "
                "differ in batch or count"
            )

    @classmethod
    def empty(cls, batch: int, device: torch.device | str | None = None) -> Neighbours:
        """No neighbours for any of `batch` sentences (N = 0)."""
        none = torch.zeros(batch, 0, 0, dtype=torch.long, device=device)
        return cls(src=none, tgt=none)

    @classmethod
    def from_lists(
        cls, pairs: Sequence[Sequence[tuple[Sequence[int], Sequence[int]]]], pad_id: int
    ) -> Neighbours:
        """Pad per-sentence lists of (source ids, target ids) to the smallest tensors."""
        n = max((len(p) for p in pairs), default=0)
        ls = max((len(s) for p in pairs for s, _ in p), default=0)
        lt = max((len(t) for p in pairs for _, t in p), default=0)
        # filled in NumPy: a tensor slice assignment per pair took 3 ms a batch of 32, a tenth
        # of that as arrays
        src = np.full((len(pairs), n, ls), pad_id, dtype=np.int64)
        tgt = np.full((len(pairs), n, lt), pad_id, dtype=np.int64)
        for b, sentence in enumerate(pairs):
            for i, (s, t) in enumerate(sentence):
                src[b, i, : len(s)] = s
                tgt[b, i, : len(t)] = t
        return cls(src=torch.from_numpy(src), tgt=torch.from_numpy(tgt))

    @property
    def count(self) -> int:
        """N, the neighbour slots per sentence."""
        return self.tgt.size(1)

    def to(self, device: torch.device | str) -> Neighbours:
        return Neighbours(src=self.src.to(device), tgt=self.tgt.to(device))


@dataclass(frozen=True)
class SemiParametricState(EncoderState):
    """The source encoding plus the encoded memory; `index_select` reorders all of it."""

    retrieved: Tensor  # (B, M, D) encoded retrieved target tokens, packed (see `encode`)
    retrieved_pad: Tensor  # (B, M) bool, True after a row's last memory token
    has_memory: Tensor  # (B,) bool, False where a row has no neighbour at all
    # Every row has a memory: the gated layers skip their no-memory case. Set once by `encode`
    # (reading it from the tensor at every layer and step would be a device sync on a GPU);
    # still true for any rows `index_select` keeps, and False only costs the masking.
    all_memory: bool = False


# --------------------------------------------------------------------------- memory encoder


class ConditionedEncoderLayer(nn.Module):
    """Pre-norm bidirectional self-attention, cross-attention to a context, feed-forward."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.cross_attn_norm = nn.LayerNorm(cfg.d_model)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ffn_norm = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, pad: Tensor, context: Tensor, context_pad: Tensor) -> Tensor:
        """x `(P, L, D)`, pad `(P, L)`, context `(P, S, D)`, context_pad `(P, S)` -> `(P, L, D)`."""
        x = x + self.dropout(self.self_attn(self.self_attn_norm(x), key_padding_mask=pad))
        h = self.cross_attn_norm(x)
        x = x + self.dropout(self.cross_attn(h, context, key_padding_mask=context_pad))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))


class MemoryEncoder(nn.Module):
    """Encodes P present neighbours (already embedded) into memory rows `(P, Lt, D)`.

    The variant is fixed at construction by which layers exist, so `forward` has no mode
    switch: source layers exist only for "cstm", target layers are conditioned except in "tm".
    """

    # Pads each group of neighbours to its widest (`SemiParametricModel.encode` groups them
    # by length); ONNX Runtime's stand-in packs their real tokens and takes them all at once.
    packs = False
    # A stand-in that encodes every neighbour of a batch in one call and returns the memory
    # packed (`encode_all`, the native library's) sets this.
    encodes_all = False

    def __init__(self, cfg: SemiParametricConfig) -> None:
        super().__init__()
        n = cfg.memory_layers
        self.source_layers: nn.ModuleList | None = None
        self.source_norm: nn.LayerNorm | None = None
        if cfg.memory_mode == "cstm":
            self.source_layers = nn.ModuleList(ConditionedEncoderLayer(cfg) for _ in range(n))
            self.source_norm = nn.LayerNorm(cfg.d_model)
        self.conditioned = cfg.memory_mode != "tm"
        target_layer = ConditionedEncoderLayer if self.conditioned else EncoderLayer
        self.target_layers = nn.ModuleList(target_layer(cfg) for _ in range(n))
        self.norm = nn.LayerNorm(cfg.d_model)

    @property
    def uses_sources(self) -> bool:
        """Whether the retrieved sources are read (only "cstm")."""
        return self.source_layers is not None

    def forward(
        self,
        tgt: Tensor,
        tgt_pad: Tensor,
        src: Tensor | None,
        src_pad: Tensor | None,
        context: Tensor,
        context_pad: Tensor,
        rows: Tensor | None = None,
    ) -> Tensor:
        """Encode retrieved targets `(P, Lt, D)` for P neighbours.

        src/src_pad: the retrieved sources `(P, Ls, D)`/`(P, Ls)` ("cstm" only, else None).
        context/context_pad: the current sentences' encodings `(B, S, D)`/`(B, S)`, and rows
        `(P,)` the sentence of each neighbour (None: context is given per neighbour).
        """
        if rows is not None:
            context, context_pad = context.index_select(0, rows), context_pad.index_select(0, rows)
        if self.source_layers is not None:
            assert src is not None and src_pad is not None and self.source_norm is not None
            for layer in self.source_layers:
                src = layer(src, src_pad, context, context_pad)
            context, context_pad = self.source_norm(src), src_pad  # Y_i now attends to X_i
        x = tgt
        for layer in self.target_layers:
            x = layer(x, tgt_pad, context, context_pad) if self.conditioned else layer(x, tgt_pad)
        return self.norm(x)


# --------------------------------------------------------------------------- gated decoder


class GatedDecoderLayer(DecoderLayer):
    """Decoder layer whose cross-attention mixes source and memory contexts with a gate.

    c_s and c_m attend to the source and to the memory with the same query;
    g = sigmoid(W_gs c_s + W_gm c_m) per row and position; the sublayer output is
    g * c_s + (1 - g) * c_m. Rows with an empty memory get g = 1 and c_m = 0 explicitly, so
    they reproduce the plain Transformer bit for bit.
    """

    # Decoding steps where every row has a memory run `_fused_cross_attention`; False keeps
    # the six-matmul sublayer (the benchmark measures both, side by side).
    fuse_steps: bool = True

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__(cfg)
        self.memory_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.gate_source = nn.Linear(cfg.d_model, 1)  # W_gs, carries the gate bias
        self.gate_memory = nn.Linear(cfg.d_model, 1, bias=False)  # W_gm
        self.gate_init_bias = getattr(cfg, "gate_init_bias", GATE_INIT_BIAS)
        # Gate of the last call `(B, T)` and which rows had a memory `(B,)`, for reporting.
        self.last_gate: Tensor | None = None
        self.last_has_memory: Tensor | None = None
        # (weights' identities, fused projections) of `_fuse`; not in the state dict.
        self._fused: tuple[tuple, tuple[Tensor, ...]] | None = None

    def reset_gate(self) -> None:
        """Zero gate weights and a positive bias: every position starts at sigmoid(bias)."""
        nn.init.zeros_(self.gate_source.weight)
        nn.init.zeros_(self.gate_memory.weight)
        nn.init.constant_(self.gate_source.bias, self.gate_init_bias)

    def init_cache(self, state: EncoderState) -> dict[str, Tensor]:
        """Source keys/values (as the base layer) plus the memory's, computed once."""
        assert isinstance(state, SemiParametricState)
        cache = super().init_cache(state)
        cache["memory_k"], cache["memory_v"] = self.memory_attn.project_kv(state.retrieved)
        self._fuse()  # checked once per decoding call here, not at every step
        return cache

    def cross_attention(
        self, x: Tensor, state: EncoderState, cache: dict[str, Tensor] | None
    ) -> Tensor:
        """Residual gated multi-source attention: x `(B, T, D)` -> `(B, T, D)`."""
        assert isinstance(state, SemiParametricState)
        if self.fuse_steps and cache is not None and state.all_memory and not self.training:
            return self._fused_cross_attention(x, state, cache)
        h = self.cross_attn_norm(x)
        kv = (cache["cross_k"], cache["cross_v"]) if cache is not None else None
        c_s = self.cross_attn(h, state.memory, kv=kv, key_padding_mask=state.src_pad)
        has_memory = _per_row(state.has_memory, x.size(0))  # (B,) state rows may be sentences
        if state.retrieved.size(1) == 0:  # no memory positions in the whole batch
            c, gate = c_s, torch.ones_like(c_s[..., :1])
        else:
            # Rows without memory attend to their (finite, zero-initialised) padding; the result
            # is discarded below. Not relying on a fully masked softmax: older PyTorch and some
            # kernels give NaN there, and NaN would leak into gradients through torch.where.
            safe_pad = state.retrieved_pad  # (B, M)
            if not state.all_memory:
                safe_pad = safe_pad & state.has_memory[:, None]
            mkv = (cache["memory_k"], cache["memory_v"]) if cache is not None else None
            c_m = self.memory_attn(h, state.retrieved, kv=mkv, key_padding_mask=safe_pad)
            gate = torch.sigmoid(self.gate_source(c_s) + self.gate_memory(c_m))  # (B, T, 1)
            if not state.all_memory:
                has = has_memory[:, None, None]  # (B, 1, 1)
                gate = torch.where(has, gate, torch.ones_like(gate))
                c_m = torch.where(has, c_m, torch.zeros_like(c_m))
            c = torch.lerp(c_m, c_s, gate)  # gate * c_s + (1 - gate) * c_m, in one kernel
        self.last_gate = gate.detach()[..., 0]
        self.last_has_memory = has_memory
        return x + self.dropout(c)

    def _fused_cross_attention(
        self, x: Tensor, state: SemiParametricState, cache: dict[str, Tensor]
    ) -> Tensor:
        """The same sublayer for a decoding step where every row has a memory, in three
        matmuls instead of six: both queries from one projection, and each output projection
        with the gate's weights folded in as one more output (its part of the gate's logit).
        A decoding step is a few rows, where a matmul costs its call and reading its weights
        more than its arithmetic; the weights read stay the same. Equal to the unfused sublayer
        up to float rounding (tested).
        """
        d = x.size(-1)
        assert self._fused is not None  # made by `init_cache`, like the cached keys/values
        q_weight, q_bias, s_weight, s_bias, m_weight, m_bias = self._fused[1]
        q_s, q_m = nn.functional.linear(self.cross_attn_norm(x), q_weight, q_bias).split(d, -1)
        a_s = self.cross_attn.context(q_s, (cache["cross_k"], cache["cross_v"]), state.src_pad)
        mkv = (cache["memory_k"], cache["memory_v"])
        a_m = self.memory_attn.context(q_m, mkv, state.retrieved_pad)
        c_s, z_s = nn.functional.linear(a_s, s_weight, s_bias).split([d, 1], dim=-1)
        c_m, z_m = nn.functional.linear(a_m, m_weight, m_bias).split([d, 1], dim=-1)
        gate = torch.sigmoid(z_s + z_m)  # (B, T, 1)
        self.last_gate = gate.detach()[..., 0]
        self.last_has_memory = _per_row(state.has_memory, x.size(0))
        return x + torch.lerp(c_m, c_s, gate)

    def _fuse(self) -> None:
        """Stacked query projection `(2D, D)`, and each output projection `(D + 1, D)` with
        its gate row, rebuilt when a weight they come from changed (training steps, loading,
        moving the model) since the last decoding call, else reused across sentences."""
        src, mem = self.cross_attn, self.memory_attn
        parts = (
            src.q_proj.weight, src.q_proj.bias, mem.q_proj.weight, mem.q_proj.bias,
            src.out_proj.weight, src.out_proj.bias, mem.out_proj.weight, mem.out_proj.bias,
            self.gate_source.weight, self.gate_source.bias, self.gate_memory.weight,
        )  # fmt: skip
        key = tuple((p.data_ptr(), p._version, p.dtype) for p in parts)
        if self._fused is None or self._fused[0] != key:
            # Ordinary tensors even when first built under inference mode, so a later eval
            # outside it can still use them.
            with torch.inference_mode(False), torch.no_grad():
                w_gs, w_gm = self.gate_source.weight, self.gate_memory.weight  # (1, D) each
                # z_s + z_m = w_gs (O_s a_s + b_s) + b_gs + w_gm (O_m a_m + b_m)
                fused = (
                    torch.cat([src.q_proj.weight, mem.q_proj.weight]),
                    torch.cat([src.q_proj.bias, mem.q_proj.bias]),
                    torch.cat([src.out_proj.weight, w_gs @ src.out_proj.weight]),
                    torch.cat(
                        [src.out_proj.bias, w_gs @ src.out_proj.bias + self.gate_source.bias]
                    ),
                    torch.cat([mem.out_proj.weight, w_gm @ mem.out_proj.weight]),
                    torch.cat([mem.out_proj.bias, w_gm @ mem.out_proj.bias]),
                )
            self._fused = (key, fused)


def _per_row(per_sentence: Tensor, rows: int) -> Tensor:
    """A per-sentence vector `(G,)` for `rows` decoder rows: beam search decodes K consecutive
    rows per sentence against one row of the state (`MultiHeadAttention`)."""
    groups = per_sentence.size(0)
    return per_sentence if groups == rows else per_sentence.repeat_interleave(rows // groups)


# --------------------------------------------------------------------------- model


class SemiParametricModel(Transformer):
    """Transformer whose decoder also reads a memory of retrieved pairs (same public API).

    `encode(src, neighbours)` encodes the memory once; `decode`, `init_cache` and `decode_step`
    are the Transformer's, running the gated layers. Embeddings are shared by the source, the
    target and the retrieved pairs.
    """

    decoder_layer_cls = GatedDecoderLayer
    uses_memory = True
    config: SemiParametricConfig
    # Read by their weights (`GatedDecoderLayer._fuse`), not called: they stay float when the
    # decoder is quantized (models.quantize).
    float_modules = (
        r"\.(cross_attn|memory_attn)\.(q_proj|out_proj)$",
        r"\.gate_(source|memory)$",
    )

    def __init__(self, config: SemiParametricConfig) -> None:
        super().__init__(config)
        self.memory_encoder = MemoryEncoder(config)
        self.reset_parameters()  # again, now that the memory encoder exists

    def reset_parameters(self) -> None:
        """The Transformer's initialisation, then the gates' (see `GATE_INIT_BIAS`)."""
        super().reset_parameters()
        for layer in self.decoder_layers:
            layer.reset_gate()

    def encode(
        self,
        src: Tensor,
        neighbours: Neighbours | None = None,
        source: EncoderState | None = None,
    ) -> SemiParametricState:
        """src `(B, S)` and its neighbours (None: no neighbours) -> source and memory state.

        source: this model's encoding of `src`, made earlier (dense retrieval with a store of
        this model's encoder computes it anyway); then the source is not encoded again.
        """
        c = self.config
        base = super().encode(src, source)
        b, d = src.size(0), c.d_model
        if neighbours is None:
            neighbours = Neighbours.empty(b, src.device)
        neighbours = neighbours.to(src.device)
        n, lt = neighbours.tgt.shape[1:]
        if neighbours.tgt.size(0) != b:
            raise ValueError(f"neighbours for {neighbours.tgt.size(0)} sentences, source has {b}")
        if n > c.max_neighbours:
            raise ValueError(
                f"{n} neighbours per sentence exceed max_neighbours {c.max_neighbours}"
            )
        widest = max(lt, neighbours.src.size(2))
        if widest > c.max_neighbour_len:
            raise ValueError(
                f"neighbours {widest} tokens wide exceed max_neighbour_len {c.max_neighbour_len}"
            )

        tgt = neighbours.tgt.reshape(b * n, lt)
        tgt_pad = tgt.eq(c.pad_id)  # (B*N, Lt)
        present = (~tgt_pad).any(dim=1).nonzero().squeeze(1)  # (P,) slots with a target
        if getattr(self.memory_encoder, "encodes_all", False) and present.numel() > 0:
            retrieved, retrieved_pad = self.memory_encoder.encode_all(neighbours, base)
            return self._state(base, retrieved, retrieved_pad)
        if present.numel() == 0:
            retrieved = base.memory.new_zeros(b, n * lt, d)
        else:
            src_all = None
            if self.memory_encoder.uses_sources:
                src_all = neighbours.src.reshape(b * n, neighbours.src.size(2))
                if bool(src_all.index_select(0, present).eq(c.pad_id).all(dim=1).any()):
                    raise ValueError("a neighbour has a target but an empty source")
            retrieved = base.memory.new_zeros(b * n, lt, d)
            # Slots sorted by length and encoded in a few groups, each cut to its own widest
            # neighbour: most retrieved pairs are far shorter than the batch's longest, and
            # padding was two thirds of the memory encoder's work. Padding is masked, so the
            # result is the same as one padded call.
            lens = (~tgt_pad).sum(dim=1).index_select(0, present)
            order = present.index_select(0, torch.argsort(lens, stable=True))
            most, least = (
                (PACKED_GROUPS, PACKED_GROUP_MIN)
                if self.memory_encoder.packs
                else (MEMORY_GROUPS, MEMORY_GROUP_MIN)
            )
            groups = min(most, -(-order.numel() // least))
            for slots in order.tensor_split(groups):
                enc = self._encode_slots(slots, n, tgt, tgt_pad, src_all, base)
                retrieved[slots, : enc.size(1)] = enc
            retrieved = retrieved.view(b, n * lt, d)  # absent slots and padding stay zero
        retrieved, retrieved_pad = _pack(retrieved, tgt_pad.view(b, n * lt))
        return self._state(base, retrieved, retrieved_pad)

    @staticmethod
    def _state(base: EncoderState, retrieved: Tensor, retrieved_pad: Tensor) -> SemiParametricState:
        has_memory = (~retrieved_pad).any(dim=1)
        return SemiParametricState(
            memory=base.memory,
            src_pad=base.src_pad,
            retrieved=retrieved,
            retrieved_pad=retrieved_pad,
            has_memory=has_memory,
            all_memory=bool(has_memory.all()),
        )

    def _encode_slots(
        self,
        slots: Tensor,
        n: int,
        tgt: Tensor,
        tgt_pad: Tensor,
        src_all: Tensor | None,
        base: EncoderState,
    ) -> Tensor:
        """Encode neighbour slots `(P,)` of the flat `(B*N, L)` layout, cut to their width."""
        c = self.config
        # the group's own sentences, and each slot's among them: their encodings are read (and
        # by ONNX Runtime's encoder projected) once per call, for these sentences only
        sentences, rows = torch.unique(slots // n, return_inverse=True)
        t_pad = tgt_pad.index_select(0, slots)
        width = int((~t_pad).sum(dim=1).max())
        src_x = src_pad = None
        if src_all is not None:
            s_tok = src_all.index_select(0, slots)
            s_width = int(s_tok.ne(c.pad_id).sum(dim=1).max())
            s_tok = s_tok[:, :s_width]
            src_pad = s_tok.eq(c.pad_id)
            src_x = self._embed(s_tok)
        return self.memory_encoder(
            self._embed(tgt.index_select(0, slots)[:, :width]),
            t_pad[:, :width],
            src_x,
            src_pad,
            base.memory.index_select(0, sentences),
            base.src_pad.index_select(0, sentences),
            rows,
        )  # (P, width, D)

    def forward(self, src: Tensor, tgt_in: Tensor, neighbours: Neighbours | None = None) -> Tensor:
        """src `(B, S)`, tgt_in `(B, T)`, neighbours of src -> logits `(B, T, V)`."""
        return self.decode(tgt_in, self.encode(src, neighbours))

    def last_gates(self) -> Tensor:
        """Gates of the last call `(B, T)`, averaged over the decoder layers (1.0 on rows
        without a memory): what beam search sums along each hypothesis."""
        return torch.stack([layer.last_gate for layer in self.decoder_layers]).mean(dim=0)

    def last_gate_mean(self) -> float:
        """Mean gate over the decoder layers' last call, on rows that had a memory.

        1.0 means the source alone was used; NaN when no row had a memory.
        """
        total, count = 0.0, 0
        for layer in self.decoder_layers:
            if layer.last_gate is None:
                continue
            rows = layer.last_gate[layer.last_has_memory]  # (R, T)
            total += float(rows.sum())
            count += rows.numel()
        return total / count if count else math.nan


def _pack(memory: Tensor, pad: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's memory tokens moved to its front, in order, cut to the fullest row.

    memory `(B, M, D)` laid out as N slots of Lt positions, pad `(B, M)` -> `(B, M', D)`,
    `(B, M')` with M' the most tokens any row has. Attention over the memory has no notion of
    position (the tokens carry theirs from their own encoding), so this changes no result
    beyond the order of a sum; it drops the padding of short and absent neighbours, which was
    most of M in a batch (every slot padded to the batch's longest neighbour), from the keys
    and values the decoder projects and attends to at every step.
    """
    width = int((~pad).sum(dim=1).max()) if pad.numel() else 0
    order = torch.argsort(pad.to(torch.uint8), dim=1, stable=True)[:, :width]  # tokens first
    packed = memory.gather(1, order[..., None].expand(-1, -1, memory.size(2)))
    return packed, pad.gather(1, order)


def from_transformer(model: Transformer, config: SemiParametricConfig) -> SemiParametricModel:
    """A semi-parametric model warm-started from a trained baseline.

    Every baseline weight is copied (embeddings, encoder, decoder attention, feed-forward,
    norms); the gates keep their fresh initialisation. With `memory_init` "random" so do the
    memory encoder and memory attention; with "baseline" they start from the layers that do the
    same job in the baseline, so the memory path reads trained representations from the first
    update: each layer's memory attention from its source cross-attention (same query, and an
    output the decoder already knows how to use); a retrieved target's layer from the decoder
    layer of the same depth (target-side self-attention, cross-attention to a source encoding);
    a retrieved source's layer from the encoder layer (self-attention, feed-forward) plus that
    decoder layer's cross-attention (to the encoded current source); both output norms from the
    encoder's. With an empty memory the result computes exactly what the baseline computes.
    """
    base = model.config.to_dict()
    mismatched = sorted(
        k for k, v in base.items() if k not in _WARM_START_FREE and getattr(config, k) != v
    )
    if mismatched:
        raise ValueError(f"config differs from the baseline's in {mismatched}")
    out = SemiParametricModel(config)
    missing, unexpected = out.load_state_dict(model.state_dict(), strict=False)
    new_parts = ("memory_encoder.", "memory_attn.", "gate_source.", "gate_memory.")
    stray = [k for k in missing if not any(p in k for p in new_parts)]
    if unexpected or stray:
        raise ValueError(f"baseline weights do not fit: unexpected {unexpected}, missing {stray}")
    if config.memory_init == "baseline":
        _memory_from_baseline(out, model)
    return out.train(model.training)


def _copy(dst: nn.Module, src: nn.Module) -> None:
    """Copy the parameters `dst` shares by name with `src` (all of them must exist in src)."""
    own = src.state_dict()
    dst.load_state_dict({k: own[k].clone() for k in dst.state_dict()})


def _memory_from_baseline(out: SemiParametricModel, base: Transformer) -> None:
    """The "baseline" memory initialisation of `from_transformer` (layer by layer, in place)."""
    enc, dec = base.encoder_layers, base.decoder_layers
    mem = out.memory_encoder
    with torch.no_grad():
        for layer, source in zip(out.decoder_layers, dec, strict=True):
            _copy(layer.memory_attn, source.cross_attn)
        for j, layer in enumerate(mem.target_layers):
            d = dec[min(j, len(dec) - 1)]
            for name, part in layer.named_children():
                if name != "dropout":
                    _copy(part, getattr(d, name))
        if mem.source_layers is not None and mem.source_norm is not None:
            for j, layer in enumerate(mem.source_layers):
                e, d = enc[min(j, len(enc) - 1)], dec[min(j, len(dec) - 1)]
                for name in ("self_attn_norm", "self_attn", "ffn_norm", "ffn"):
                    _copy(getattr(layer, name), getattr(e, name))
                for name in ("cross_attn_norm", "cross_attn"):
                    _copy(getattr(layer, name), getattr(d, name))
            _copy(mem.source_norm, base.encoder_norm)
        _copy(mem.norm, base.encoder_norm)
