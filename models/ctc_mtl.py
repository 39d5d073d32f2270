"""REDER's multitask baseline (SEEDS §3.3 (d)): one non-reversible CTC encoder that translates
both ways, told the target language by a tag, trained on both directions.

It isolates what reversibility buys: the same sublayers as REDER (`models/reder.py`: pre-norm
relative self-attention and GELU feed-forward, LayerNorms without affine parameters, seeded
dropout), the same depth (2 x `layers_per_end`: REDER's source end then target end), the same
width per sublayer (`d_model`, one of REDER's two halves), so the same parameters within the
tags; but one residual stream, h = h + SAN(h), h = h + FFN(h), shared by both directions, with a
learned tag of the target language added to every input frame. Input and output as REDER's:
ids upsampled x`upsample`, sqrt(d)-scaled tied embeddings (the blank an extra row) plus learned
positions over frames, log-softmax over the vocabulary and the blank. Not invertible: it trains
with CTC alone (`models.train_reder` refuses the agreement and cycle losses for it).

Config: `RederConfig`, read the same way; `inner_order` does not apply (one stack).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models import ctc
from models.layers import make_positions
from models.reder import RederConfig, ReversibleLayer, SeededDropout, TwoWay

__all__ = ["CtcMtl", "CtcMtlConfig", "ResidualLayer"]


@dataclass(frozen=True)
class CtcMtlConfig(RederConfig):
    """REDER's config; the stack is 2 x `layers_per_end` layers deep."""


class ResidualLayer(ReversibleLayer):
    """REDER's two sublayers on one stream of width d: h + SAN(h), then + FFN(h)."""

    def forward(self, h: Tensor, pad: Tensor, seed: int | None = None) -> Tensor:
        h = h + self.san(h, pad, seed)
        return h + self.feed_forward(h, seed)

    def reverse(self, h: Tensor, pad: Tensor, seed: int | None = None) -> Tensor:
        raise TypeError("a residual layer has no reverse form")


class CtcMtl(TwoWay, nn.Module):
    """One CTC encoder for every direction between `config.languages`, told the target."""

    def __init__(self, config: CtcMtlConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed_scale = math.sqrt(c.d_model)
        self.embed = nn.Embedding(c.n_labels, c.d_model, padding_idx=c.pad_id)
        self.tags = nn.Embedding(len(c.languages), c.d_model)  # the target language's tag
        self.positions = make_positions(c.positions, c.upsample * c.max_len, c.d_model)
        self.input_dropout = SeededDropout(c.dropout, stream=0)
        depth = 2 * c.layers_per_end
        self.layers = nn.ModuleList(ResidualLayer(c, 1 + 2 * i) for i in range(depth))
        self.norm = nn.LayerNorm(c.d_model, elementwise_affine=False)
        self.last_seed: int | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """REDER's initialisation (fairseq's defaults), the tags as the embeddings."""
        for layer in self.layers:
            a = layer.attn
            for proj in (a.q_proj, a.k_proj, a.v_proj, a.out_proj):
                nn.init.xavier_uniform_(proj.weight)
                nn.init.zeros_(proj.bias)
        for table in (self.embed, self.tags):
            nn.init.normal_(table.weight, mean=0.0, std=self.config.d_model**-0.5)
        with torch.no_grad():
            self.embed.weight[self.config.pad_id].zero_()

    def forward_states(
        self,
        src: Tensor,
        source_lang: str | None = None,
        target_lang: str | None = None,
        *,
        seed: int | None = None,
    ) -> list[Tensor]:
        """src `(B, S)` right-padded ids -> states [H_0 .. H_L], each `(B, T, D)`, T = k·S."""
        _, target = self.direction(source_lang, target_lang)
        ids, pad = ctc.upsample(src, src.eq(self.config.pad_id), self.config.upsample)
        seed = self._seed(seed)
        tag = self.tags.weight[self.config.languages.index(target)]  # (D,)
        x = self.embed(ids) * self.embed_scale + self.positions(ids.size(1)).to(tag) + tag
        states = [self.input_dropout(x, seed)]
        for layer in self.layers:
            states.append(layer(states[-1], pad, seed))
        return states

    def logits(self, h: Tensor) -> Tensor:
        """Final state `(B, T, D)` -> logits `(B, T, n_labels)` (tied output)."""
        return nn.functional.linear(self.norm(h), self.embed.weight)

    def project(self, h: Tensor) -> Tensor:
        """Final state `(B, T, D)` -> log-probs `(B, T, n_labels)` in fp32."""
        return torch.log_softmax(self.logits(h).float(), dim=-1)
