"""CTC mechanics for non-autoregressive translation (REDER, Zheng et al. 2021): no model here.

A CTC model reads an upsampled source (each token repeated in place, x1 x1 x2 x2 ...) and
predicts one label per frame: a target token or the blank. A labelling of the frames
collapses to a target by merging repeats and then dropping blanks, so a doubled target token
needs a blank between its two copies. This module holds what REDER's training and decoding need
around such frame log-probs `(B, T, V)`: upsampling, the length feasibility of a pair, the
loss with label smoothing, the Viterbi best alignment (the target of the forward-backward
agreement loss), collapsing, greedy best-path decoding and prefix beam search.

Conventions: right padding everywhere; `frame_lengths` `(B,)` counts each row's valid frames
and `tgt_lengths` `(B,)` its target tokens; targets never contain the blank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "CTCStats",
    "batch_prefix_beam_search",
    "best_alignment",
    "best_path",
    "collapse",
    "collapse_keep_blanks",
    "ctc_loss",
    "ctc_nll",
    "feasible",
    "min_frames",
    "prefix_beam_search",
    "repeats",
    "upsample",
]

Frames = Sequence[int] | Tensor
"""One sequence of frame labels: a list of ids or a 1-D tensor."""


def upsample(x: Tensor, mask: Tensor, factor: int = 2) -> tuple[Tensor, Tensor]:
    """Each position repeated in place `factor` times (x1 x1 x2 x2 ...), and its mask with it.

    x: ids `(B, S)` or states `(B, S, D)`; mask `(B, S)` (either polarity: it is copied, so a
    padding mask stays a padding mask). Right padding stays right padding, so a row of n
    tokens has `factor * n` valid frames.
    Returns (x `(B, factor*S)` or `(B, factor*S, D)`, mask `(B, factor*S)`).
    """
    if factor < 1:
        raise ValueError(f"upsampling factor must be at least 1, got {factor}")
    if x.dim() not in (2, 3) or mask.shape != x.shape[:2]:
        raise ValueError(
            f"x must be (B, S) or (B, S, D) with a (B, S) mask, got x {tuple(x.shape)} "
            f"and mask {tuple(mask.shape)}"
        )
    return x.repeat_interleave(factor, dim=1), mask.repeat_interleave(factor, dim=1)


def _target_mask(tgt: Tensor, tgt_lengths: Tensor) -> Tensor:
    """True at each row's first `tgt_lengths` positions: `(B, U)`."""
    return torch.arange(tgt.size(1), device=tgt.device) < tgt_lengths[:, None]


def repeats(tgt: Tensor, tgt_lengths: Tensor) -> Tensor:
    """Adjacent equal tokens within each target `(B, U)`: `(B,)`; padding is not counted.

    Each one forces a blank frame between the two copies, so it costs CTC one frame.
    """
    valid = _target_mask(tgt, tgt_lengths)  # (B, U)
    same = (tgt[:, 1:] == tgt[:, :-1]) & valid[:, 1:]  # (B, U-1): pair inside the target
    return same.sum(dim=1)


def min_frames(tgt: Tensor, tgt_lengths: Tensor) -> Tensor:
    """The fewest frames any CTC alignment of each target needs: U + repeats, `(B,)`."""
    return tgt_lengths + repeats(tgt, tgt_lengths)


def feasible(src_lengths: Tensor, tgt: Tensor, tgt_lengths: Tensor, factor: int = 2) -> Tensor:
    """Whether each pair has an alignment at all: U + repeats <= factor * N, bool `(B,)`.

    The paper filters the pairs that fail this; its code instead lets their loss be zeroed
    (`zero_infinity`), which hides how many there are.
    """
    return min_frames(tgt, tgt_lengths) <= factor * src_lengths


@dataclass(frozen=True)
class CTCStats:
    """What `ctc_loss` saw: which pairs it used, how many it filtered, its unsmoothed term."""

    feasible: Tensor  # (B,) bool: the pairs in the loss
    pairs: int  # feasible pairs, the batch mean's denominator
    infeasible: int  # pairs filtered out: too few frames for their target
    ctc: Tensor  # () detached mean CTC term (per target token), 0 with no feasible pair


def _check_batch(
    log_probs: Tensor, frame_lengths: Tensor, tgt: Tensor, tgt_lengths: Tensor, blank: int
) -> None:
    """A ValueError naming the first inconsistency between the CTC inputs' shapes and lengths."""
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be (B, T, V), got shape {tuple(log_probs.shape)}")
    b, t, v = log_probs.shape
    if tgt.dim() != 2 or tgt.size(0) != b:
        raise ValueError(f"tgt must be (B, U) with B = {b}, got shape {tuple(tgt.shape)}")
    for name, lengths, most in (
        ("frame_lengths", frame_lengths, t),
        ("tgt_lengths", tgt_lengths, tgt.size(1)),
    ):
        if lengths.shape != (b,):
            raise ValueError(f"{name} must be (B,) = ({b},), got shape {tuple(lengths.shape)}")
        if b and (int(lengths.min()) < 0 or int(lengths.max()) > most):
            raise ValueError(f"{name} must lie in 0..{most}, got {lengths.tolist()}")
    if not 0 <= blank < v:
        raise ValueError(f"blank id {blank} is outside the vocabulary of {v} labels")
    if bool((tgt.eq(blank) & _target_mask(tgt, tgt_lengths)).any()):
        raise ValueError(f"a target contains the blank id {blank}")


def ctc_nll(
    log_probs: Tensor, frame_lengths: Tensor, tgt: Tensor, tgt_lengths: Tensor, blank: int
) -> Tensor:
    """-log p(y | x) per sequence, summed over all alignments: `(B,)`, inf where infeasible.

    log_probs `(B, T, V)` normalised over V; tgt `(B, U)` right-padded. Not divided by the
    target length. Infinite values carry NaN gradients: `ctc_loss` filters those pairs first.
    """
    _check_batch(log_probs, frame_lengths, tgt, tgt_lengths, blank)
    return F.ctc_loss(
        log_probs.transpose(0, 1),  # (T, B, V): F.ctc_loss is time-major
        tgt,
        frame_lengths,
        tgt_lengths,
        blank=blank,
        reduction="none",
        zero_infinity=False,
    )


def ctc_loss(
    log_probs: Tensor,
    frame_lengths: Tensor,
    tgt: Tensor,
    tgt_lengths: Tensor,
    blank: int,
    label_smoothing: float = 0.1,
) -> tuple[Tensor, CTCStats]:
    """REDER's training loss over the feasible pairs, and what it filtered.

    (1 - eps) * CTC + eps * S, where CTC is each pair's -log p(y | x) divided by its target
    length (at least 1), averaged over the feasible pairs (`F.ctc_loss`'s "mean"), and S is
    the mean over their valid frames of -mean over the vocabulary of log p (the reference
    code's smoothing). Infeasible pairs leave the batch entirely (both terms) and are counted
    in the stats rather than zeroed silently. With none feasible the loss is a zero that is
    still connected to `log_probs`, so `backward()` works and gives zero gradients.
    log_probs `(B, T, V)`, frame_lengths `(B,)`, tgt `(B, U)`, tgt_lengths `(B,)`.
    """
    _check_batch(log_probs, frame_lengths, tgt, tgt_lengths, blank)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")
    ok = min_frames(tgt, tgt_lengths) <= frame_lengths  # (B,)
    pairs = int(ok.sum())
    infeasible = ok.numel() - pairs
    if pairs == 0:
        zero = log_probs.flatten()[:0].sum()  # 0 with a grad_fn, NaN-free even beside -inf
        return zero, CTCStats(ok, 0, infeasible, zero.detach())
    rows = ok.nonzero().squeeze(1)  # (F,)
    lp = log_probs.index_select(0, rows)  # (F, T, V)
    n_frames, n_tgt = frame_lengths[rows], tgt_lengths[rows]  # (F,)
    nll = F.ctc_loss(
        lp.transpose(0, 1), tgt[rows], n_frames, n_tgt, blank=blank, reduction="none"
    )  # (F,)
    ctc = (nll / n_tgt.clamp_min(1).to(nll.dtype)).mean()
    loss = ctc
    if label_smoothing > 0:
        valid = torch.arange(lp.size(1), device=lp.device) < n_frames[:, None]  # (F, T)
        # masked_fill, not a product: padded frames may hold -inf, and 0 * -inf is NaN
        frame_means = lp.mean(dim=-1).masked_fill(~valid, 0.0)  # (F, T)
        smooth = -frame_means.sum() / valid.sum().clamp_min(1)
        loss = (1.0 - label_smoothing) * ctc + label_smoothing * smooth
    return loss, CTCStats(ok, pairs, infeasible, ctc.detach())


@torch.no_grad()
def best_alignment(
    log_probs: Tensor,
    frame_lengths: Tensor,
    tgt: Tensor,
    tgt_lengths: Tensor,
    blank: int,
    fill: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The most probable alignment of each target (Viterbi), as frame labels.

    The path runs over the extended labels (blank, y1, blank, y2, ..., yU, blank): state 2k is
    a blank, state 2k+1 is y_{k+1}, as REDER turns `best_alignment`'s states into the target of
    the forward-backward agreement loss. Batched over B, one step per frame; no gradient (the
    alignment is a target). Every pair must be feasible with a finite score: filter with
    `feasible` (or `CTCStats.feasible`) first; otherwise this raises, naming the rows.
    log_probs `(B, T, V)`, frame_lengths `(B,)` in 1..T, tgt `(B, U)`, tgt_lengths `(B,)`.
    Returns (frames `(B, T)`: blank or a target token at each valid frame, `fill` (default the
    blank) past each frame length; scores `(B,)`: the path's summed log-probs).
    """
    _check_batch(log_probs, frame_lengths, tgt, tgt_lengths, blank)
    if log_probs.size(0) and int(frame_lengths.min()) < 1:
        raise ValueError(
            f"best_alignment needs at least one frame per row, got {frame_lengths.tolist()}"
        )
    short = (min_frames(tgt, tgt_lengths) > frame_lengths).nonzero().view(-1).tolist()
    if short:
        raise ValueError(f"rows {short} have fewer frames than their targets need (infeasible)")
    b, t_max, _ = log_probs.shape
    device = log_probs.device
    tokens = tgt.masked_fill(~_target_mask(tgt, tgt_lengths), blank)  # (B, U) blanks past U
    s = 2 * tgt.size(1) + 1
    ext = torch.full((b, s), blank, dtype=torch.long, device=device)  # (B, S)
    ext[:, 1::2] = tokens
    emit = log_probs.gather(2, ext[:, None, :].expand(b, t_max, s))  # (B, T, S)
    # A skip over a blank (s-2 -> s) is allowed into a token that differs from the one before.
    skip = torch.zeros((b, s), dtype=torch.bool, device=device)  # (B, S)
    skip[:, 3::2] = tokens[:, 1:] != tokens[:, :-1]
    neg = torch.tensor(-math.inf, dtype=log_probs.dtype, device=device)
    alpha = torch.full((b, s), -math.inf, dtype=log_probs.dtype, device=device)  # (B, S)
    alpha[:, :2] = emit[:, 0, :2]
    back = torch.zeros((t_max, b, s), dtype=torch.uint8, device=device)  # steps back: 0, 1, 2
    last = frame_lengths - 1  # (B,)
    final = alpha.clone()
    for t in range(1, t_max):
        from_prev = F.pad(alpha[:, :-1], (1, 0), value=-math.inf)  # (B, S): state s-1
        from_skip = torch.where(skip, F.pad(alpha[:, :-2], (2, 0), value=-math.inf), neg)
        best, step = torch.stack([alpha, from_prev, from_skip], dim=-1).max(dim=-1)  # (B, S)
        alpha = best + emit[:, t]
        back[t] = step.to(torch.uint8)
        final = torch.where((last == t)[:, None], alpha, final)  # each row's last frame
    # The path ends on the last token or the blank after it (only the blank when U = 0).
    end_blank = final.gather(1, (2 * tgt_lengths)[:, None]).squeeze(1)  # (B,)
    end_token = final.gather(1, (2 * tgt_lengths - 1).clamp_min(0)[:, None]).squeeze(1)
    end_token = torch.where(tgt_lengths > 0, end_token, neg)
    scores = torch.maximum(end_blank, end_token)  # (B,)
    lost = torch.isneginf(scores).nonzero().view(-1).tolist()
    if lost:
        raise ValueError(f"rows {lost} have no alignment of nonzero probability")
    state = torch.where(end_token > end_blank, 2 * tgt_lengths - 1, 2 * tgt_lengths)  # (B,)
    states = torch.zeros((b, t_max), dtype=torch.long, device=device)  # (B, T)
    rows = torch.arange(b, device=device)
    for t in range(t_max - 1, -1, -1):
        active = t <= last  # (B,) rows whose path covers frame t
        states[:, t] = state
        if t > 0:
            state = torch.where(active, state - back[t, rows, state].long(), state)
    frames = ext.gather(1, states)  # (B, T)
    pad = blank if fill is None else fill
    frames = frames.masked_fill(torch.arange(t_max, device=device) > last[:, None], pad)
    return frames, scores


def _labels(frames: Frames) -> list[int]:
    return frames.tolist() if isinstance(frames, Tensor) else list(frames)


def _is_batch(frames: Frames | Sequence[Frames]) -> bool:
    if isinstance(frames, Tensor):
        return frames.dim() == 2
    return len(frames) > 0 and not isinstance(frames[0], int | np.integer)


def _merge(labels: list[int]) -> list[int]:
    """Repeats merged: a label equal to the one before it (of any kind) is dropped."""
    return [x for i, x in enumerate(labels) if i == 0 or x != labels[i - 1]]


def collapse(
    frames: Frames | Sequence[Frames], blank: int, special: Sequence[int] = ()
) -> list[int] | list[list[int]]:
    """CTC's many-to-one map (the paper's Gamma^-1): merge repeats, then drop blanks.

    Labels in `special` (pad, BOS, EOS) are dropped with the blanks; like any other label they
    still split repeats, as in `models.decoding.ctc_greedy`. frames: one sequence (list or
    1-D tensor) -> one list; a batch (list of sequences or `(B, T)` tensor) -> a list of lists.
    The paper applies this everywhere, cycle consistency included.
    """
    drop = {blank, *special}
    if _is_batch(frames):
        return [[x for x in _merge(_labels(f)) if x not in drop] for f in frames]
    return [x for x in _merge(_labels(frames)) if x not in drop]


def collapse_keep_blanks(
    frames: Frames | Sequence[Frames], special: Sequence[int] = ()
) -> list[int] | list[list[int]]:
    """Repeats merged but blanks kept (a run of blanks becomes one): the reference code's
    input to cycle consistency (`post_process_ctc_decoded_tokens`), unlike the paper's
    `collapse`. Labels in `special` are dropped after merging."""
    drop = set(special)
    if _is_batch(frames):
        return [[x for x in _merge(_labels(f)) if x not in drop] for f in frames]
    return [x for x in _merge(_labels(frames)) if x not in drop]


def best_path(
    log_probs: Tensor, frame_lengths: Tensor, blank: int, special: Sequence[int] = ()
) -> list[list[int]]:
    """Greedy decoding: the most probable label of each valid frame, collapsed.

    log_probs `(B, T, V)`, frame_lengths `(B,)`. What `models.decoding.ctc_greedy` does to a
    model's frames, given the frames (pass its pad/BOS/EOS as `special`).
    """
    labels = log_probs.argmax(dim=-1).tolist()  # (B, T)
    return [
        collapse(row[:n], blank, special)
        for row, n in zip(labels, frame_lengths.tolist(), strict=True)
    ]


def prefix_beam_search(
    log_probs: Tensor | np.ndarray, frame_length: int, blank: int, beam: int = 10
) -> list[tuple[list[int], float]]:
    """CTC prefix beam search for one sequence: the n-best labellings, best first.

    Each prefix keeps two log-probs, of its alignments so far ending in a blank and in its last
    token, so that an extension by the same token counts only the paths with a blank between.
    A labelling's score is log p(labelling | x) summed over all its alignments, exact for any
    prefix that never left the beam; with `beam` at least the number of possible prefixes the
    search is exhaustive. Labels never to emit (pad, BOS, EOS) should have log-prob -inf.
    log_probs `(T, V)` normalised over V; only the first `frame_length` frames are read.
    Returns at most `beam` (labels, log-prob) pairs of nonzero probability.
    """
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    lp_all = (
        log_probs.detach().double().cpu().numpy()
        if isinstance(log_probs, Tensor)
        else np.asarray(log_probs, dtype=np.float64)
    )
    if lp_all.ndim != 2 or not 0 <= frame_length <= lp_all.shape[0]:
        raise ValueError(
            f"log_probs must be (T, V) with frame_length in 0..T, got {lp_all.shape} "
            f"and {frame_length}"
        )
    v = lp_all.shape[1]
    if not 0 <= blank < v:
        raise ValueError(f"blank id {blank} is outside the vocabulary of {v} labels")
    prefixes: list[tuple[int, ...]] = [()]
    p_blank = np.zeros(1)  # (K,) log p(alignments of the prefix ending in a blank)
    p_token = np.full(1, -np.inf)  # (K,) ... ending in its last token
    for lp in lp_all[:frame_length]:  # (V,)
        k = len(prefixes)
        total = np.logaddexp(p_blank, p_token)  # (K,)
        last = np.array([p[-1] if p else -1 for p in prefixes])  # (K,) -1: empty
        has_last = last >= 0
        stay_blank = total + lp[blank]  # (K,) a blank frame: prefix unchanged
        stay_token = np.where(has_last, p_token + lp[np.maximum(last, 0)], -np.inf)
        grow = total[:, None] + lp[None, :]  # (K, V) prefix + c
        grow[has_last, last[has_last]] = p_blank[has_last] + lp[last[has_last]]
        grow[:, blank] = -np.inf
        # A prefix whose parent is in the beam also grows from it: add that path here and
        # drop it from `grow`, so every entry left in `grow` is a new, distinct prefix.
        index = {p: i for i, p in enumerate(prefixes)}
        for i, p in enumerate(prefixes):
            parent = index.get(p[:-1]) if p else None
            if parent is not None:
                stay_token[i] = np.logaddexp(stay_token[i], grow[parent, p[-1]])
                grow[parent, p[-1]] = -np.inf
        scores = np.concatenate([np.logaddexp(stay_blank, stay_token), grow.reshape(-1)])
        # the best `beam` in no particular order: a partition, not a sort of K * V scores
        top = (
            np.argpartition(-scores, beam - 1)[:beam]
            if scores.size > beam
            else np.arange(scores.size)
        )
        top = top[np.isfinite(scores[top])]
        new_prefixes, new_blank, new_token = [], [], []
        for j in top.tolist():
            if j < k:
                new_prefixes.append(prefixes[j])
                new_blank.append(stay_blank[j])
                new_token.append(stay_token[j])
            else:
                parent, c = divmod(j - k, v)
                new_prefixes.append((*prefixes[parent], c))
                new_blank.append(-np.inf)
                new_token.append(grow[parent, c])
        prefixes, p_blank, p_token = new_prefixes, np.array(new_blank), np.array(new_token)
        if not prefixes:  # every frame label impossible: nothing has nonzero probability
            return []
    total = np.logaddexp(p_blank, p_token)
    order = np.argsort(-total, kind="stable")
    return [(list(prefixes[i]), float(total[i])) for i in order.tolist()]


def batch_prefix_beam_search(
    log_probs: Tensor, frame_lengths: Tensor, blank: int, beam: int = 10
) -> list[list[tuple[list[int], float]]]:
    """`prefix_beam_search` for each row of log_probs `(B, T, V)` with frame_lengths `(B,)`."""
    lp = log_probs.detach().double().cpu().numpy()  # one copy to the host for the batch
    return [
        prefix_beam_search(row, n, blank, beam)
        for row, n in zip(lp, frame_lengths.tolist(), strict=True)
    ]
