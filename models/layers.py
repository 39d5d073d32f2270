"""Shared Transformer blocks: attention, feed-forward, positions, pre-norm encoder/decoder layers.

Every architecture is assembled from these so a fix lands once. The layers read their sizes from
the architecture's frozen config (anything with the `BlockConfig` fields). The decoder layer keeps
each sublayer in its own method so a subclass (e.g. the semi-parametric model, which adds a gated
cross-attention over a retrieved memory) overrides one method and reuses the rest, and it keeps
its incremental-decoding state in a plain dict of tensors that beam search can reorder blindly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol, Self

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "StrictConfig",
    "POSITIONS",
    "BlockConfig",
    "DecoderCache",
    "DecoderLayer",
    "EncoderLayer",
    "EncoderState",
    "FeedForward",
    "LearnedPositions",
    "MultiHeadAttention",
    "SinusoidalPositions",
    "make_positions",
]


class StrictConfig:
    """`from_dict`/`to_dict` for an architecture's frozen config dataclass: an unknown key
    is an error that names it, so a typo in a config file never passes silently."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} keys: {unknown}")
        try:
            return cls(**d)
        except TypeError as e:  # a missing required field
            raise ValueError(f"{cls.__name__}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


class BlockConfig(Protocol):
    """The config fields the shared layers read; every architecture's config provides them."""

    @property
    def d_model(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def d_ff(self) -> int: ...

    @property
    def dropout(self) -> float: ...

    @property
    def attn_dropout(self) -> float: ...


# --------------------------------------------------------------------------- decoding state


@dataclass(frozen=True)
class EncoderState:
    """What the decoder needs from the source side, batched on dim 0.

    Subclasses add fields (e.g. a retrieved memory); `index_select` reorders every tensor field,
    so beam search can expand and reorder states of any architecture without knowing them.
    """

    memory: Tensor  # (B, S, D) final encoder output
    src_pad: Tensor  # (B, S) bool, True at padding

    def index_select(self, idx: Tensor) -> EncoderState:
        """Rows `idx` of every tensor field (beam expansion, dropping finished sentences)."""
        idx = idx.to(self.memory.device)
        changes = {
            f.name: getattr(self, f.name).index_select(0, idx)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **changes)


@dataclass
class DecoderCache:
    """Incremental-decoding state: one dict of tensors per decoder layer, batched on dim 0.

    Self-attention keys/values grow by one position per step; cross-attention keys/values are
    computed once from the encoder output. `step` is the number of target tokens fed so far,
    which is also the position of the next one.
    """

    layers: list[dict[str, Tensor]]
    step: int = 0
    # Keys whose tensors are functions of the encoder state alone (cross-attention and memory
    # keys/values, from `init_cache`): beam search holds them once per sentence, and all the
    # sentence's beams read that row (they would hold equal copies otherwise).
    per_sentence: frozenset[str] = frozenset()

    def index_select(self, idx: Tensor) -> DecoderCache:
        """Rows `idx` of every cached tensor (dropping finished sentences)."""
        return self._rows(idx, keep=frozenset())

    def select_sentences(self, sentences: Tensor, rows: Tensor) -> DecoderCache:
        """Keep `sentences` of the per-sentence tensors and `rows` of the per-hypothesis ones:
        beam search holds one row per sentence of the former (its K beams share it, see
        `MultiHeadAttention`) and K of the latter, and drops finished sentences from both."""
        per_hyp = self._rows(rows, keep=self.per_sentence)
        layers = [
            {
                k: v.index_select(0, sentences.to(v.device)) if k in self.per_sentence else v
                for k, v in c.items()
            }
            for c in per_hyp.layers
        ]
        return dataclasses.replace(per_hyp, layers=layers)

    def reorder_beams(self, idx: Tensor) -> DecoderCache:
        """Rows `idx` of the per-hypothesis tensors, where `idx` only moves rows among the
        beams of one sentence. The per-sentence tensors are the same for those beams and are
        kept as they are (one row per sentence, or equal rows where a caller expanded them).
        """
        return self._rows(idx, keep=self.per_sentence)

    def _rows(self, idx: Tensor, keep: frozenset[str]) -> DecoderCache:
        layers = [
            {k: v if k in keep else v.index_select(0, idx.to(v.device)) for k, v in c.items()}
            for c in self.layers
        ]
        return DecoderCache(layers=layers, step=self.step, per_sentence=self.per_sentence)


# --------------------------------------------------------------------------- attention


class MultiHeadAttention(nn.Module):
    """Multi-head attention on top of `F.scaled_dot_product_attention`.

    Keys/values come from `kv` when given (precomputed cross-attention keys or a self-attention
    cache), else from projecting `key_value` (cross-attention), else from `query` (self-attention).

    Precomputed keys/values may have fewer rows than the query: in beam search each sentence's
    K hypotheses are K consecutive query rows that read one row of cross-attention keys/values,
    so these are neither copied per beam nor read K times (see `DecoderCache`).
    """

    def __init__(self, d_model: int, n_heads: int, attn_dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.attn_dropout = attn_dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape  # (B, T, D) -> (B, H, T, Dh)
        return x.view(b, t, self.n_heads, self.d_head).transpose(1, 2)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values `(B, H, S, Dh)` for `x (B, S, D)`.

        Made contiguous so cached and freshly projected keys share one memory layout: the same
        attention kernel then runs on them and incremental decoding matches batch decoding.
        """
        k = self._split(self.k_proj(x)).contiguous()
        v = self._split(self.v_proj(x)).contiguous()
        return k, v

    def forward(
        self,
        query: Tensor,
        key_value: Tensor | None = None,
        *,
        kv: tuple[Tensor, Tensor] | None = None,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """Attend `query (B, T, D)` to S keys; returns `(B, T, D)`.

        key_padding_mask: `(B, S)` bool, True where the key is padding and must be ignored; or
        `(B, T, S)`, True where query t must ignore key s (a block mask, e.g. words attending
        within themselves).
        causal: query i (the last T of S positions) sees keys up to its own position.
        """
        if kv is None:
            kv = self.project_kv(query if key_value is None else key_value)
        return self.out_proj(self.context(self.q_proj(query), kv, key_padding_mask, causal))

    def context(
        self,
        q: Tensor,
        kv: tuple[Tensor, Tensor],
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """Attention of queries already projected by `q_proj` `(B, T, D)`, before `out_proj`.

        Apart from `forward` so a caller can project several attentions' queries in one matmul
        and their outputs in another (the gated memory decoder does, at every decoding step).
        """
        b, t, d = q.shape
        groups = kv[0].size(0)  # (G, H, S, Dh), G = B or B/K
        if groups == b:
            return self._attend(q, kv, key_padding_mask, causal)
        # K consecutive query rows share one key/value row: they become K*T queries of it.
        if causal or b % groups:
            raise ValueError(
                f"{b} query rows cannot share {groups} key/value rows"
                + (" under a causal mask" if causal else "")
            )
        if key_padding_mask is not None and key_padding_mask.size(0) != groups:
            raise ValueError(
                f"key padding for {key_padding_mask.size(0)} rows, keys/values have {groups}"
            )
        grouped = q.reshape(groups, (b // groups) * t, d)
        return self._attend(grouped, kv, key_padding_mask, False).reshape(b, t, d)

    def _attend(
        self,
        q: Tensor,
        kv: tuple[Tensor, Tensor],
        key_padding_mask: Tensor | None,
        causal: bool,
    ) -> Tensor:
        """`context` once query and key/value rows correspond one to one; `q` is projected."""
        b, t, d = q.shape
        k, v = kv  # (B, H, S, Dh)
        q = self._split(q)  # (B, H, T, Dh)
        s = k.size(-2)

        mask: Tensor | None = None
        is_causal = False
        if key_padding_mask is not None and key_padding_mask.dim() == 3:  # per query (B, T, S)
            mask = ~key_padding_mask[:, None, :, :]  # (B, 1, T, S) True = may attend
        elif key_padding_mask is not None:
            mask = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S) True = may attend
        if causal and t > 1:  # a single query at the end of the sequence may see every key
            if mask is None and t == s:
                is_causal = True
            else:
                # Bottom-right aligned: the T queries are the last T positions of the S keys.
                allowed = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)
                mask = allowed if mask is None else mask & allowed  # (B, 1, T, S)
        out = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=is_causal,
            # SDPA's own default, given as a constant: left to SDPA, an exported graph (the ONNX
            # Runtime encoder) computes it from the query's shape in every attention
            scale=self.d_head**-0.5,
        )  # (B, H, T, Dh)
        return out.transpose(1, 2).reshape(b, t, d)


class FeedForward(nn.Module):
    """Position-wise two-layer ReLU network."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, T, D) -> (B, T, D)
        return self.fc2(self.dropout(F.relu(self.fc1(x))))


# --------------------------------------------------------------------------- positions


class SinusoidalPositions(nn.Module):
    """Fixed sine/cosine positions (Vaswani et al. 2017); nothing to train or store."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {d_model}")
        self.max_len = max_len
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
        inv_freq = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
        )  # (D/2,)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(pos * inv_freq)
        table[:, 1::2] = torch.cos(pos * inv_freq)
        # Not persistent: recomputed at construction, so bundles do not carry it.
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Positions `offset .. offset+length-1` as `(T, D)`."""
        _check_range(length, offset, self.max_len)
        return self.table[offset : offset + length]


class LearnedPositions(nn.Module):
    """A trained embedding per position."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Positions `offset .. offset+length-1` as `(T, D)`."""
        _check_range(length, offset, self.max_len)
        return self.weight[offset : offset + length]


def _check_range(length: int, offset: int, max_len: int) -> None:
    if offset < 0 or offset + length > max_len:
        raise ValueError(
            f"positions {offset}..{offset + length - 1} exceed max_len {max_len}; "
            "shorten the input or raise the config's max_len"
        )


POSITIONS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
}


def make_positions(kind: str, max_len: int, d_model: int) -> nn.Module:
    """The position module named `kind` (a key of `POSITIONS`)."""
    try:
        cls = POSITIONS[kind]
    except KeyError:
        raise ValueError(f"unknown positions {kind!r}; known: {sorted(POSITIONS)}") from None
    return cls(max_len, d_model)


# --------------------------------------------------------------------------- layers


class EncoderLayer(nn.Module):
    """Pre-norm self-attention + feed-forward; pre-norm trains stably with small batches."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ffn_norm = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, src_pad: Tensor) -> Tensor:
        """x `(B, S, D)`, src_pad `(B, S)` True at padding (or `(B, S, S)`, True where query i
        may not see key j) -> `(B, S, D)`."""
        h = self.self_attn_norm(x)
        x = x + self.dropout(self.self_attn(h, key_padding_mask=src_pad))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))


class DecoderLayer(nn.Module):
    """Pre-norm causal self-attention, cross-attention to the source, feed-forward.

    With `cache` (one layer's dict from `DecoderCache`) the layer decodes incrementally: new
    self-attention keys/values are appended to the cache, and cross-attention uses the keys and
    values that `init_cache` precomputed.
    """

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(cfg.d_model)
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.cross_attn_norm = nn.LayerNorm(cfg.d_model)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout)
        self.ffn_norm = nn.LayerNorm(cfg.d_model)
        self.ffn = FeedForward(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def init_cache(self, state: EncoderState) -> dict[str, Tensor]:
        """This layer's cache before the first step: the cross-attention keys/values.

        Subclasses extend the dict (e.g. keys/values of a retrieved memory).
        """
        k, v = self.cross_attn.project_kv(state.memory)  # (B, H, S, Dh)
        return {"cross_k": k, "cross_v": v}

    def forward(
        self, x: Tensor, state: EncoderState, cache: dict[str, Tensor] | None = None
    ) -> Tensor:
        """x `(B, T, D)` target states -> `(B, T, D)`; T new positions when `cache` is given."""
        x = self.self_attention(x, cache)
        x = self.cross_attention(x, state, cache)
        return x + self.dropout(self.ffn(self.ffn_norm(x)))

    def self_attention(self, x: Tensor, cache: dict[str, Tensor] | None) -> Tensor:
        """Residual causal self-attention sublayer."""
        h = self.self_attn_norm(x)  # (B, T, D)
        kv = None
        if cache is not None:
            k, v = self.self_attn.project_kv(h)  # (B, H, T, Dh)
            if "self_k" in cache:
                k = torch.cat([cache["self_k"], k], dim=2)  # (B, H, t+T, Dh)
                v = torch.cat([cache["self_v"], v], dim=2)
            cache["self_k"], cache["self_v"] = k, v
            kv = (k, v)
        return x + self.dropout(self.self_attn(h, kv=kv, causal=True))

    def cross_attention(
        self, x: Tensor, state: EncoderState, cache: dict[str, Tensor] | None
    ) -> Tensor:
        """Residual cross-attention sublayer over the encoder output.

        The override point for models that attend to more than the source sentence.
        """
        h = self.cross_attn_norm(x)
        kv = (cache["cross_k"], cache["cross_v"]) if cache is not None else None
        a = self.cross_attn(h, state.memory, kv=kv, key_padding_mask=state.src_pad)
        return x + self.dropout(a)
