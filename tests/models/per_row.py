"""A reference decoder for beam search: every cached tensor held once per hypothesis.

Beam search keeps the encoder state and the cross-attention (and memory) keys/values once per
sentence and lets a sentence's K hypotheses read that one row (`MultiHeadAttention`). The
wrapper below undoes the sharing at every step, expanding those tensors to the decoder's rows,
so that attention never groups rows: what the sharing must reproduce.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from models.layers import DecoderCache, EncoderState


class PerRowDecoding(nn.Module):
    """`model` with its per-sentence decoding state copied to every hypothesis row."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self.group_sizes: list[tuple[int, int]] = []  # (state rows, decoder rows) per step

    def encode(self, src: Tensor, *args: Any, **kwargs: Any) -> EncoderState:
        return self.model.encode(src, *args, **kwargs)

    def init_cache(self, state: EncoderState) -> DecoderCache:
        return self.model.init_cache(state)

    def decode_step(self, last: Tensor, state: EncoderState, cache: DecoderCache) -> Tensor:
        rows, groups = last.size(0), state.memory.size(0)
        self.group_sizes.append((groups, rows))
        idx = torch.arange(groups).repeat_interleave(rows // groups)
        full = DecoderCache(
            layers=[
                {k: v.index_select(0, idx) if k in cache.per_sentence else v for k, v in c.items()}
                for c in cache.layers
            ],
            step=cache.step,
        )
        out = self.model.decode_step(last, state.index_select(idx), full)
        for mine, theirs in zip(cache.layers, full.layers, strict=True):
            mine.update({k: v for k, v in theirs.items() if k not in cache.per_sentence})
        cache.step = full.step
        return out

    def last_gates(self) -> Tensor:
        return self.model.last_gates()
