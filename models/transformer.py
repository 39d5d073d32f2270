"""Pre-norm Transformer encoder-decoder (Vaswani et al. 2017) with one shared embedding.

Source, target and output share one embedding matrix because the vocabulary is a joint
SentencePiece model; tying saves parameters and helps small data. The public methods
(`encode`, `decode`, `forward`, `init_cache`, `decode_step`) are the contract that training,
`models.decoding` and later architectures rely on.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models.layers import (
    POSITIONS,
    DecoderCache,
    DecoderLayer,
    EncoderLayer,
    EncoderState,
    StrictConfig,
    make_positions,
)

__all__ = ["DecoderCache", "EncoderState", "Transformer", "TransformerConfig"]

# Annotation text -> accepted runtime types (annotations are strings under `annotations`).
_SCALAR_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "str": str,
    "bool": bool,
}


@dataclass(frozen=True)
class TransformerConfig(StrictConfig):
    """Every size and id the model needs; stored verbatim in model bundles."""

    vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    enc_layers: int = 4
    dec_layers: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    attn_dropout: float = 0.0
    max_len: int = 256
    positions: str = "sinusoidal"  # "sinusoidal" | "learned"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    tie_embeddings: bool = True

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            want = _SCALAR_TYPES.get(str(f.type))  # subclasses may add other field types
            if want is None:
                continue
            # bool is an int subclass; a JSON `true` must not pass as a layer count.
            if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
                raise ValueError(f"{f.name} must be {f.type}, got {value!r}")
        for name in ("vocab_size", "d_model", "n_heads", "enc_layers", "dec_layers", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        for name in ("dropout", "attn_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.max_len < 2:
            raise ValueError(f"max_len must be at least 2, got {self.max_len}")
        if self.positions not in POSITIONS:
            raise ValueError(
                f"positions must be one of {sorted(POSITIONS)}, got {self.positions!r}"
            )
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {self.d_model}")
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in ids.items():
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} {value} is outside the vocabulary [0, {self.vocab_size})")
        if len(set(ids.values())) != 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got {ids}")
        if self.vocab_size <= 3:
            raise ValueError(f"vocab_size must leave room for real tokens, got {self.vocab_size}")


class Transformer(nn.Module):
    """Encoder-decoder with pre-norm layers, final LayerNorms and tied embeddings."""

    decoder_layer_cls: type[DecoderLayer] = DecoderLayer  # subclasses swap the decoder layer
    uses_memory: bool = False  # True: `encode(src, neighbours)` reads retrieved pairs

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        self.embed_scale = math.sqrt(c.d_model)
        self.embed = nn.Embedding(c.vocab_size, c.d_model, padding_idx=c.pad_id)
        self.positions = make_positions(c.positions, c.max_len, c.d_model)
        self.dropout = nn.Dropout(c.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.enc_layers))
        self.encoder_norm = nn.LayerNorm(c.d_model)
        self.decoder_layers = nn.ModuleList(self.decoder_layer_cls(c) for _ in range(c.dec_layers))
        self.decoder_norm = nn.LayerNorm(c.d_model)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.output.weight = self.embed.weight  # one Parameter under two names
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform linears, N(0, d^-1/2) embeddings (unit scale after sqrt(d)), zero pad."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                if module.weight is not self.embed.weight:
                    nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.normal_(self.embed.weight, mean=0.0, std=self.config.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[self.config.pad_id].zero_()

    def _embed(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens `(B, T)` at positions offset.. -> `(B, T, D)`."""
        x = self.embed(tokens) * self.embed_scale
        x = x + self.positions(tokens.size(1), offset).to(x.dtype)  # (T, D) broadcast over B
        return self.dropout(x)

    def encode(self, src: Tensor, source: EncoderState | None = None) -> EncoderState:
        """src `(B, S)` token ids, right-padded with pad_id -> encoder state.

        source: the state this method returned for `src` earlier (shared with dense retrieval,
        which encodes the same sentences); checked against `src` and returned as it is.
        """
        src_pad = src.eq(self.config.pad_id)  # (B, S)
        if source is not None:
            if source.memory.shape[:2] != src.shape or not torch.equal(source.src_pad, src_pad):
                raise ValueError(
                    f"source state {tuple(source.memory.shape[:2])} with its padding does not "
                    f"belong to the source batch {tuple(src.shape)}"
                )
            return source
        x = self._embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_pad)
        return EncoderState(memory=self.encoder_norm(x), src_pad=src_pad)

    def decode(self, tgt_in: Tensor, state: EncoderState) -> Tensor:
        """Teacher-forced: tgt_in `(B, T)` (BOS + target) -> logits `(B, T, V)`."""
        x = self._embed(tgt_in)
        for layer in self.decoder_layers:
            x = layer(x, state)
        return self.output(self.decoder_norm(x))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """src `(B, S)`, tgt_in `(B, T)` -> logits `(B, T, V)`."""
        return self.decode(tgt_in, self.encode(src))

    def init_cache(self, state: EncoderState) -> DecoderCache:
        """Cache for `decode_step`, holding the cross-attention keys/values of `state`.

        What the layers put in at this point is computed from `state` only, so it is marked
        per-sentence: beam reordering leaves it alone (`DecoderCache.reorder_beams`).
        """
        layers = [layer.init_cache(state) for layer in self.decoder_layers]
        return DecoderCache(layers=layers, per_sentence=frozenset(k for c in layers for k in c))

    def decode_step(self, last_tokens: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        """Feed one token per row at position `cache.step`; log-probs `(B, V)` of the next one.

        Updates `cache` in place (appends keys/values, advances `step`).
        """
        x = self._embed(last_tokens[:, None], offset=cache.step)  # (B, 1, D)
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            x = layer(x, state, layer_cache)
        cache.step += 1
        logits = self.output(self.decoder_norm(x[:, 0]))  # (B, V)
        return torch.log_softmax(logits.float(), dim=-1)
