"""The small decoding case both step tests drive: a memory model of the toy bundle's size with
fresh weights, three sentences (one without a memory, one with two neighbours) and the
decoder under test beside it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from models.bundle import load_bundle
from models.decoding import _constrain
from models.ort_decoder import OrtDecoder
from models.semiparametric import Neighbours, SemiParametricModel

BEAMS = 3


def step_case(
    memory_bundle: Path, memory_mode: str, decoder_mode: str
) -> tuple[SemiParametricModel, OrtDecoder, torch.Tensor, Neighbours]:
    """(float model, the same weights decoded in `decoder_mode`, sources, neighbours)."""
    config = dataclasses.replace(load_bundle(memory_bundle).model.config, memory_mode=memory_mode)
    torch.manual_seed(0)
    model = SemiParametricModel(config).eval()
    decoder = OrtDecoder(model, decoder_mode)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0], [10, 11, 12, 2]])
    pairs = [[([5, 6], [7, 8, 9])], [], [([10], [11, 12]), ([13, 14], [15])]]
    return model, decoder, src, Neighbours.from_lists(pairs, pad_id=model.config.pad_id)


def both_started(
    model: SemiParametricModel, decoder: OrtDecoder, src: torch.Tensor, neighbours: Neighbours
) -> tuple[list[Any], list[Any], torch.Tensor]:
    """Both encoded and their caches made: (states, caches, BOS for each of `BEAMS` rows a
    sentence), the float model's first."""
    states = [m.encode(src, neighbours) for m in (model, decoder)]
    caches = [m.init_cache(s) for m, s in zip((model, decoder), states, strict=True)]
    return states, caches, torch.full((src.size(0) * BEAMS,), model.config.bos_id)


def both_steps(
    model: SemiParametricModel,
    decoder: OrtDecoder,
    states: list[Any],
    caches: list[Any],
    tokens: torch.Tensor,
    step: int,
    n: int,
) -> tuple[torch.Tensor, np.ndarray, np.ndarray, torch.Tensor]:
    """One step of each: the float model's log-probs constrained as `models.decoding` does (pad
    and BOS never, three random tokens a row banned, EOS alone on row `step`), and the
    decoder's `n` best told the same. Returns (constrained log-probs, the decoder's log-probs
    and tokens, the banned tokens)."""
    rows = tokens.size(0)
    forced = np.arange(rows) == step  # one row must end
    want = model.decode_step(tokens, states[0], caches[0])
    ban = torch.randint(4, model.config.vocab_size, (rows, 3))
    want = _constrain(want.scatter(1, ban, -math.inf), torch.from_numpy(forced), model)
    got_lp, got_ids = decoder.decode_candidates(
        tokens, states[1], caches[1], n, forced, ban.numpy()
    )
    return want, got_lp, got_ids, ban


def uneven_neighbours(
    config: Any, sentences: int
) -> tuple[torch.Tensor, Neighbours, list[list[tuple[list[int], list[int]]]]]:
    """Sources `(sentences, 9)`, every second one padded after 6 tokens, and four retrieved
    pairs each of 1 to 16 tokens a side (sentence 3 has none): (sources, neighbours, pairs)."""
    g = torch.Generator().manual_seed(2)
    pairs = []
    for i in range(sentences):
        lengths = torch.randint(1, 17, (4, 2), generator=g).tolist()
        pairs.append(
            [] if i == 3 else [(list(range(4, 4 + a)), list(range(9, 9 + b))) for a, b in lengths]
        )
    neighbours = Neighbours.from_lists(pairs, pad_id=config.pad_id)
    src = torch.randint(4, config.vocab_size, (sentences, 9), generator=g)
    src[::2, 6:] = config.pad_id
    return src, neighbours, pairs
