"""Greedy and beam-search decoding over any model with the encode/init_cache/decode_step API.

Both are batched (beam search runs B*K rows), encode once and decode incrementally with the
model's key/value cache. Sentences that finish are dropped from the batch so long sentences do
not make short ones pay. Greedy and beam search share the length limits, the token constraints
and the candidate ranking, which makes `beam_search(beam_size=1)` reproduce `greedy` exactly.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from models.layers import EncoderState

__all__ = ["RepeatBan", "Repeats", "beam_search", "ctc_greedy", "fill_order", "greedy"]


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _encode(
    model: nn.Module,
    src: Tensor,
    neighbours: Any,
    source: EncoderState | None,
    languages: tuple[str, str] | None = None,
) -> Any:
    """The model's encoder state; `neighbours` and `source` (the source's encoding, made
    earlier) go to `encode` only when given, so models without retrieval keep their
    one-argument `encode`. `languages`: the (source, target) pair, for a model that
    translates several ways (it takes them as `encode`'s `languages`)."""
    if languages is not None:
        if neighbours is not None:
            raise ValueError("a model told the language pair reads no retrieved pairs")
        return model.encode(src, source, languages=languages)
    if source is None:
        return model.encode(src) if neighbours is None else model.encode(src, neighbours)
    if neighbours is None:
        return model.encode(src, source=source)
    return model.encode(src, neighbours, source=source)


def _length_limits(model: nn.Module, src: Tensor, a: float, b: float) -> list[int]:
    """Per sentence, the most tokens to generate before EOS: a*src_len + b, within max_len.

    Target positions run 0..max_len-1 and position 0 is BOS, so at most max_len-1 tokens
    precede the EOS that the last position predicts.
    """
    cfg = model.config
    src_len = src.ne(cfg.pad_id).sum(dim=1).tolist()
    if any(n == 0 for n in src_len):
        raise ValueError("empty source sentence (all padding) in the batch")
    # The epsilon keeps e.g. 1.2 * 5 + 10 = 15.999... from rounding down.
    return [max(0, min(math.floor(a * n + b + 1e-6), cfg.max_len - 1)) for n in src_len]


def _constrain(lp: Tensor, forced_eos: Tensor, model: nn.Module) -> Tensor:
    """Never emit pad or BOS; rows in `forced_eos` `(R,)` reached their limit and must end."""
    cfg = model.config
    lp[:, cfg.pad_id] = -math.inf
    lp[:, cfg.bos_id] = -math.inf
    if bool(forced_eos.any()):
        eos_only = torch.full_like(lp, -math.inf)
        eos_only[:, cfg.eos_id] = lp[:, cfg.eos_id]
        lp = torch.where(forced_eos.to(lp.device)[:, None], eos_only, lp)
    return lp


def _row_candidates(lp: Tensor, beam_size: int) -> tuple[Tensor, Tensor]:
    """The 2K best tokens of each row `(R, V)`, best first: (log-probs, ids), each `(R, 2K)`.

    2K so that K non-EOS continuations survive even if every beam's best token is EOS. Greedy
    takes column 0 of the same call, so ties between tokens break the same way in both.
    """
    return lp.topk(min(2 * beam_size, lp.size(-1)), dim=-1)


def _step_candidates(
    model: nn.Module,
    last: Tensor,
    state: Any,
    cache: Any,
    forced: np.ndarray,
    repeats: RepeatBan | None,
    hist: Tensor | np.ndarray,
    per_sentence: int,
) -> tuple[np.ndarray, np.ndarray]:
    """One step's 2K best (log-probs, ids) per row, best first, as NumPy arrays `(R, 2K)`:
    pad and BOS never, the repeat ban applied, EOS alone on the `forced` `(R,)` rows. A model
    with `decode_candidates` (ONNX Runtime's) does all of that in its own step; any other
    gives its log-probs `(R, V)` and the constraints and the top 2K are taken here."""
    n = min(2 * per_sentence, model.config.vocab_size)
    if hasattr(model, "decode_candidates"):
        pad = model.config.pad_id
        ban = repeats.table(hist, per_sentence, pad) if repeats is not None else None
        return model.decode_candidates(last, state, cache, n, forced, ban)
    lp = _constrain(model.decode_step(last, state, cache), torch.from_numpy(forced), model)
    if repeats is not None:
        lp = repeats.apply(lp, hist, per_sentence)
    return tuple(t.cpu().numpy() for t in _row_candidates(lp, per_sentence))  # type: ignore[return-value]


class Repeats:
    """What a vocabulary counts as a loop: `canon` `(V,)` maps each id to its case-folded
    twin (a loop that changes case is still one), `words` `(V,)` marks whole-word pieces,
    which may not follow themselves ("Speichern speichern"), and spans of 2 to `max_n`
    tokens may not follow themselves ("heute nett heute nett"), nor follow themselves after
    one separating piece of `gaps` `(V,)` ("die Söhne, die Söhne"; None: no such pieces);
    nor may a whole word follow itself after one piece of `stops` `(V,)` that ends a sentence
    ("Abschnitte. Abschnitte"; None: no such pieces). A span counts only when one of its
    pieces is `wordy` `(V,)` (holds a word; None: every piece): a row of dots or "%s %s" is
    copied text, not a loop. Made once per tokenizer; `ban` makes a batch's `RepeatBan`."""

    def __init__(
        self,
        canon: Tensor,
        words: Tensor,
        max_n: int,
        gaps: Tensor | None = None,
        stops: Tensor | None = None,
        wordy: Tensor | None = None,
    ) -> None:
        if max_n < 1:
            raise ValueError(f"max_n must be at least 1, got {max_n}")
        self.canon, self.words, self.max_n = canon, words, max_n
        self.gaps = gaps if gaps is not None else torch.zeros_like(words)
        self.stops = stops if stops is not None else torch.zeros_like(words)
        self.wordy = wordy if wordy is not None else torch.ones_like(words)
        # members[c]: the ids whose twin is c, padded with -1 (case classes are small)
        sorted_c, order = canon.sort(stable=True)
        counts = torch.bincount(canon, minlength=canon.numel())
        first = counts.cumsum(0) - counts
        rank = torch.arange(canon.numel()) - first[sorted_c]
        self.members = torch.full((canon.numel(), int(counts.max())), -1, dtype=torch.long)
        self.members[sorted_c, rank] = order
        self._gap_ids = set(self.gaps.nonzero().view(-1).tolist())
        self._stop_ids = set(self.stops.nonzero().view(-1).tolist())

    def ban(
        self, src: Tensor, pad_id: int, free: Sequence[tuple[bool, bool]] | None = None
    ) -> RepeatBan:
        """The ban for a batch `src` `(B, S)`. A sentence whose source says a token twice in
        a row ("two two") may do so too, and one whose source repeats a span ("very, very
        good", a list of names) may repeat spans. `free`: per sentence, whether it says a
        word and a span again, judged on its words by the caller; None: on its pieces here
        (where a word cut in two, "▁animal s, ▁animal s", reads as a span said again)."""
        if free is None:
            rows = (self.canon[src] * src.ne(pad_id)).tolist()
            free = [
                _source_repeats([t for t in r if t], self.max_n, self._gap_ids, self._stop_ids)
                for r in rows
            ]
        if len(free) != src.size(0):
            raise ValueError(f"{len(free)} repeat exemptions for {src.size(0)} sentences")
        return RepeatBan(self, torch.tensor(list(free), device=src.device).view(-1, 2))


class RepeatBan:
    """Forbids the rows of a batch to close a back-to-back repeat (`Repeats`): the token
    that would close it gets -inf. `free` `(B, 2)`: whether sentence b may repeat a token
    (column 0), a span (column 1).

    The check runs in NumPy on the host, whatever the device: it is some twenty operations
    on a few hundred integers at every step, which cost PyTorch's dispatch 10-30 us each on
    the CPU (4-5 ms of a 40 ms sentence at batch 1) and NumPy a few; on a GPU it costs one
    copy of the token history per step.
    """

    def __init__(self, repeats: Repeats, free: Tensor) -> None:
        self.canon = repeats.canon.cpu().numpy()
        self.words = repeats.words.cpu().numpy()
        self.members = repeats.members.cpu().numpy()
        self.gaps = repeats.gaps.cpu().numpy()
        self.stops = repeats.stops.cpu().numpy()
        self.wordy = repeats.wordy.cpu().numpy()
        self.max_n = repeats.max_n
        self.free = free.cpu()

    def select(self, rows: Tensor) -> RepeatBan:
        """The ban for the sentences `rows` of the batch (those still decoding)."""
        other = copy.copy(self)
        other.free = self.free.index_select(0, rows.cpu())
        return other

    def apply(self, lp: Tensor, hist: Tensor | np.ndarray, per_sentence: int) -> Tensor:
        """`lp` `(R, V)` with each row's repeat-closing tokens banned (in place); `hist`
        `(R, t)` the rows' tokens so far, `per_sentence` rows (beams) per sentence."""
        found = self.banned(hist, per_sentence)
        if found is not None:
            rows, ids = (torch.from_numpy(a).to(lp.device) for a in found)
            lp[rows, ids] = -math.inf
        return lp

    def table(self, hist: Tensor | np.ndarray, per_sentence: int, fill: int) -> np.ndarray:
        """The banned tokens as a table `(R, J)`, each row's ids padded with `fill` (an id
        that is never emitted anyway, such as padding), J at least 1: what a decoder that
        bans them itself takes (`OrtDecoder.decode_candidates`)."""
        rows_n = hist.shape[0]
        found = self.banned(hist, per_sentence)
        if found is None:
            return np.full((rows_n, 1), fill, dtype=np.int64)
        rows, ids = found  # rows in order
        counts = np.bincount(rows, minlength=rows_n)
        out = np.full((rows_n, int(counts.max())), fill, dtype=np.int64)
        out[rows, np.arange(rows.size) - (np.cumsum(counts) - counts)[rows]] = ids
        return out

    def banned(
        self, hist: Tensor | np.ndarray, per_sentence: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, ids) of the tokens each row may not emit next, rows in order; None: none."""
        t = hist.shape[1]
        if t == 0:
            return None
        h = hist if isinstance(hist, np.ndarray) else hist.cpu().numpy()
        c = self.canon[h]  # (R, t)
        banned = [np.where(self.words[h[:, -1]], c[:, -1], -1)[:, None]]
        if t >= 2:  # a whole word again after a sentence's end: its twin after the stop
            after_stop = self.stops[h[:, -1]] & self.words[h[:, -2]]
            banned.append(np.where(after_stop, c[:, -2], -1)[:, None])
        singles = len(banned)  # the columns that ban a single word; spans follow
        for gap in (0, 1):  # right after the span, or after one separating piece
            top = min(self.max_n, (t + 1 - gap) // 2)
            if top < 2:
                continue
            # For every span length n at once: do the last n-1 tokens equal the n-1 tokens
            # that start n + gap back? Then that start token would close a repeat of n.
            ns = np.arange(2, top + 1)[:, None]  # (N, 1)
            # A repeat of n needs the last token to equal the one n + gap back: most steps
            # have no such n in any row and stop here.
            if not (c[:, -1:] == c[:, t - 1 - ns[:, 0] - gap]).any():
                continue
            back = np.arange(top - 1)[None, :]  # (1, J) 0 = the last token
            counted = back < ns - 1  # (N, J) the first n-1 positions count for n
            now = c[:, t - 1 - back[0]]  # (R, J)
            then = c[:, np.maximum(t - 1 - back - ns - gap, 0)]  # (R, N, J)
            same = ((now[:, None, :] == then) | ~counted).all(axis=2)  # (R, N)
            if gap:
                same &= self.gaps[h[:, t - ns[:, 0]]]  # the piece between is a separator
            # Only a span that says a word is a loop: ". . . .", "%s %s" are copied text.
            cs = np.concatenate([np.zeros((len(h), 1), np.int64), self.wordy[h].cumsum(1)], 1)
            same &= cs[:, t - ns[:, 0] - gap + 1] > cs[:, t - 2 * ns[:, 0] - gap + 1]
            banned.append(np.where(same, c[:, t - ns[:, 0] - gap], -1))
        free = np.repeat(self.free.numpy(), per_sentence, axis=0)  # (R, 2)
        ids = np.concatenate(banned, axis=1)  # (R, m) twins to ban, -1: none
        ids[free[:, 0], :singles] = -1
        ids[free[:, 1], singles:] = -1
        rows, cols = np.nonzero(ids >= 0)
        if rows.size == 0:
            return None
        members = self.members[ids[rows, cols]]  # (K, M)
        ok = members >= 0
        return np.broadcast_to(rows[:, None], members.shape)[ok], members[ok]


def _source_repeats(
    ids: list[int], max_n: int, gaps: set[int], stops: frozenset[int] | set[int] = frozenset()
) -> tuple[bool, bool]:
    """Whether a source says a token right after itself or after one id of `stops`, and
    whether it says a span of 2..max_n ids again at once or after one id of `gaps`: what its
    translation may do too."""
    token = any(a == b for a, b in zip(ids, ids[1:], strict=False)) or any(
        ids[i] == ids[i + 2] and ids[i + 1] in stops for i in range(len(ids) - 2)
    )
    for n in range(2, max_n + 1):
        for i in range(len(ids) - 2 * n + 1):
            if ids[i : i + n] == ids[i + n : i + 2 * n]:
                return token, True
            if ids[i + n] in gaps and ids[i : i + n] == ids[i + n + 1 : i + 2 * n + 1]:
                return token, True
    return token, False


def fill_order(keep: np.ndarray) -> np.ndarray:
    """The surviving rows `keep` (ascending) in the order decoding keeps them: a survivor among
    the first `len(keep)` rows stays in its place, and those after them fill the places the
    dropped rows leave. A cache can then compact in place, moving only those few rows
    (`models.ort_decoder._compact`), instead of copying every survivor. The order of a
    batch's sentences changes no sentence's translation."""
    m = keep.size
    stay = keep < m
    order = np.empty(m, dtype=np.int64)
    order[keep[stay]] = keep[stay]
    order[np.setdiff1d(np.arange(m), keep[stay], assume_unique=True)] = keep[~stay]
    return order


@torch.inference_mode()
def greedy(
    model: nn.Module,
    src: Tensor,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    *,
    neighbours: Any = None,
    source: EncoderState | None = None,
    repeats: RepeatBan | None = None,
    languages: tuple[str, str] | None = None,
) -> list[list[int]]:
    """Most probable next token at every step; src `(B, S)` right-padded token ids.

    neighbours: retrieved pairs for a retrieval model (e.g. `models.semiparametric.Neighbours`).
    source: the model's encoder state of `src` when it was computed already (not encoded again).
    repeats: a `RepeatBan` for `src`, forbidding back-to-back repeats; None allows them.
    languages: (source, target) for a model that translates several ways (`directional`).
    Returns one token list per sentence, without BOS/EOS/pad.
    """
    eos = model.config.eos_id
    src = src.to(_device(model))
    limits = _length_limits(model, src, max_len_a, max_len_b)
    state = _encode(model, src, neighbours, source, languages)
    cache = model.init_cache(state)
    alive = list(range(src.size(0)))  # sentence id of each row
    last = torch.full((len(alive),), model.config.bos_id, dtype=torch.long, device=src.device)
    out: list[list[int]] = [[] for _ in alive]
    hist = torch.empty((len(alive), 0), dtype=torch.long, device=src.device)  # for `repeats`
    step = 0
    while alive:
        forced = np.array([limits[s] == step for s in alive])
        cand = _step_candidates(model, last, state, cache, forced, repeats, hist, 1)[1]
        tok = torch.from_numpy(cand[:, 0].copy()).to(src.device)  # (R,)
        keep = []
        for row, (s, t) in enumerate(zip(alive, tok.tolist(), strict=True)):
            if t == eos:
                continue
            out[s].append(t)
            keep.append(row)
        if not keep:
            break  # every sentence is done
        if len(keep) < len(alive):
            idx = torch.from_numpy(fill_order(np.array(keep, dtype=np.int64))).to(src.device)
            state, cache = state.index_select(idx), cache.index_select(idx)
            tok = tok.index_select(0, idx)
            if repeats is not None:
                hist, repeats = hist.index_select(0, idx), repeats.select(idx)
            alive = [alive[r] for r in idx.tolist()]
        if repeats is not None:
            hist = torch.cat([hist, tok[:, None]], dim=1)
        last = tok
        step += 1
    return out


@torch.inference_mode()
def beam_search(
    model: nn.Module,
    src: Tensor,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: float = 10,
    *,
    neighbours: Any = None,
    gates: list[float | None] | None = None,
    source: EncoderState | None = None,
    repeats: RepeatBan | None = None,
    languages: tuple[str, str] | None = None,
) -> list[list[int]]:
    """Beam search with GNMT length normalisation score / ((5 + len) / 6) ** length_penalty.

    src `(B, S)` right-padded token ids. A sentence stops when K hypotheses have ended (the
    usual early stop) or at its length limit, where EOS is forced. `len` counts the EOS.
    neighbours: as for `greedy`; the memory is encoded once per sentence, before beam expansion.
    gates: a list to fill with each sentence's mean memory gate (memory models only; None for a
    sentence without a memory). The gate of every step is summed along each beam as it is
    decoded, so the mean over the chosen output's positions (BOS and its tokens, as a
    teacher-forced pass over it would give) costs no second pass.
    source, repeats, languages: as for `greedy`.
    Returns the best hypothesis per sentence, without BOS/EOS/pad.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    track = gates is not None
    if track and not hasattr(model, "last_gates"):
        raise ValueError(f"{type(model).__name__} has no memory gate to report")
    k = beam_size
    cfg = model.config
    device = _device(model)
    src = src.to(device)
    n_sent = src.size(0)
    limits = np.array(_length_limits(model, src, max_len_a, max_len_b))

    # Encode once and project the cross-attention (and memory) keys/values once per sentence.
    # The state and those keys/values keep one row per sentence: the K hypotheses of a sentence
    # are K consecutive decoder rows (row = sentence * K + beam) that attention reads them with
    # (`MultiHeadAttention`); copying them per beam was most of a memory model's decoding time.
    state = _encode(model, src, neighbours, source, languages)
    cache = model.init_cache(state)
    # A decoder with a native step searches in one native call: the same search as below
    # (candidates, ties, order), without the Python between steps.
    search = getattr(model, "native_beam_search", None)
    found = search(cache, limits, k, length_penalty, repeats) if search is not None else None
    if found is not None:
        if gates is not None:
            gates.extend(found[1])
        return found[0]
    has_memory = state.has_memory.tolist() if track else [False] * n_sent
    # The bookkeeping below runs in NumPy on the host on a few dozen numbers per sentence:
    # some thirty operations a step, which cost PyTorch's dispatch 10-30 us each on the CPU.
    # The model's step, the constraints and the top 2K per row stay on the model's device.
    alive = np.arange(n_sent)  # sentence id of each group of K rows
    scores = np.full((n_sent, k), -np.inf, dtype=np.float32)  # (A, K) summed log-probs
    scores[:, 0] = 0.0  # only beam 0 is live at first, so the K beams do not start as copies
    hist = np.empty((n_sent * k, 0), dtype=np.int64)  # (A*K, t) tokens
    last = torch.full((n_sent * k,), cfg.bos_id, dtype=torch.long, device=device)
    gate_sum = np.zeros(n_sent * k, dtype=np.float32)  # (A*K,) gates along each beam so far
    finished: list[list[tuple[float, list[int], float | None]]] = [[] for _ in range(n_sent)]
    beams = np.arange(k)
    step = 0
    while alive.size:
        n_alive = alive.size
        forced = np.repeat(limits[alive] == step, k)
        row_lp, row_tok = _step_candidates(model, last, state, cache, forced, repeats, hist, k)
        if track:  # this step's input included
            gate_sum = gate_sum + model.last_gates()[:, -1].float().cpu().numpy()
        n = row_lp.shape[1]
        cand = (scores[:, :, None] + row_lp.reshape(n_alive, k, n)).reshape(n_alive, k * n)
        # Stable sort: equal scores keep beam-then-row order, so K=1 ranks exactly as greedy.
        m = min(2 * k, k * n)
        order = np.argsort(-cand, axis=1, kind="stable")[:, :m]  # (A, m)
        at = np.arange(n_alive)[:, None]  # (A, 1) each row's own index
        cand_scores = cand[at, order]
        cand_beam = order // n  # (A, m) beam each candidate extends
        cand_tok = row_tok.reshape(n_alive, k * n)[at, order]
        is_eos = cand_tok == cfg.eos_id

        # Hypotheses ending among the K best candidates are final.
        for a, j in np.argwhere(is_eos[:, :k] & np.isfinite(cand_scores[:, :k])).tolist():
            row = a * k + int(cand_beam[a, j])
            toks = hist[row].tolist()
            norm = ((5.0 + len(toks) + 1) / 6.0) ** length_penalty
            sentence = int(alive[a])
            gate = float(gate_sum[row]) / (len(toks) + 1) if has_memory[sentence] else None
            finished[sentence].append((float(cand_scores[a, j]) / norm, toks, gate))

        # The K best non-EOS candidates continue; EOS sorts last and is dead if picked anyway.
        pick = np.argsort(is_eos * m + np.arange(m), axis=1)[:, :k]  # (A, K)
        next_beam, next_tok = cand_beam[at, pick], cand_tok[at, pick]
        scores = np.where(is_eos[at, pick], np.float32(-np.inf), cand_scores[at, pick])
        reorder = (at * k + next_beam).reshape(-1)
        hist = np.concatenate([hist[reorder], next_tok.reshape(-1, 1)], axis=1)
        if track:
            gate_sum = gate_sum[reorder]
        # rows move within each sentence's K beams
        cache = cache.reorder_beams(torch.from_numpy(reorder).to(device))
        last = torch.from_numpy(next_tok.reshape(-1)).to(device)

        live = np.isfinite(scores).any(axis=1)
        keep = [
            a
            for a in range(n_alive)
            if len(finished[alive[a]]) < k and step < limits[alive[a]] and live[a]
        ]
        if not keep:
            break  # every sentence is done: nothing to carry into another step
        if len(keep) < n_alive:
            groups = fill_order(np.array(keep, dtype=np.int64))
            rows = (groups[:, None] * k + beams).reshape(-1)
            groups_t, rows_t = (
                torch.from_numpy(groups).to(device),
                torch.from_numpy(rows).to(device),
            )
            state, cache = state.index_select(groups_t), cache.select_sentences(groups_t, rows_t)
            hist, last = hist[rows], last.index_select(0, rows_t)
            gate_sum = gate_sum[rows]
            scores = scores[groups]
            if repeats is not None:
                repeats = repeats.select(groups_t)
            alive = alive[groups]
        step += 1

    # max() keeps the first of equal scores: the hypothesis that ended first.
    best = [max(f, key=lambda h: h[0]) if f else (0.0, [], None) for f in finished]
    if gates is not None:
        gates.extend(b[2] for b in best)
    return [b[1] for b in best]


@torch.inference_mode()
def ctc_greedy(
    model: nn.Module, src: Tensor, languages: tuple[str, str] | None = None
) -> list[list[int]]:
    """Standard CTC best-path decoding for non-autoregressive models: the most probable label
    of each frame, repeats merged, then blanks dropped (a blank between two equal labels is how
    CTC spells a doubled one). One batched pass, no search.

    src `(B, S)` right-padded token ids; `model.ctc_log_probs(src)` gives log-probs `(B, T, V)`
    and each row's valid frame count `(B,)`; frames past it are ignored. `languages`:
    (source, target) for a model that translates several ways (`ctc_log_probs(src, source,
    target)`, REDER); None: its one direction.
    Returns one token list per sentence, without blank/BOS/EOS/pad.
    """
    cfg = model.config
    src = src.to(_device(model))
    # a model that gives each frame's best label itself (ONNX Runtime, models.ort_ctc) copies
    # no (B, T, V) log-probs out
    best = getattr(model, "ctc_best_labels", None)
    if best is not None:
        labels, lengths = best(src, *(languages or ()))
    else:
        log_probs, lengths = model.ctc_log_probs(src, *(languages or ()))
        labels = log_probs.argmax(dim=-1)
    special = {cfg.blank_id, cfg.pad_id, cfg.bos_id, cfg.eos_id}
    out: list[list[int]] = []
    for frames, n in zip(labels.tolist(), lengths.tolist(), strict=True):
        tokens, prev = [], None
        for label in frames[:n]:
            if label != prev and label not in special:
                tokens.append(label)
            prev = label
        out.append(tokens)
    return out


@torch.inference_mode()
def ctc_nbest(
    model: nn.Module, src: Tensor, languages: tuple[str, str] | None, beam: int
) -> list[list[tuple[list[int], float]]]:
    """CTC prefix beam search (`models.ctc.prefix_beam_search`) per sentence: up to `beam`
    labellings with their log-probs summed over alignments, best first. Pad, BOS and EOS are
    never emitted (the greedy path drops them; here they get no probability)."""
    from models.ctc import batch_prefix_beam_search

    cfg = model.config
    src = src.to(_device(model))
    log_probs, lengths = model.ctc_log_probs(src, *(languages or ()))
    log_probs = log_probs.float().clone()
    for label in {cfg.pad_id, cfg.bos_id, cfg.eos_id} - {cfg.blank_id}:
        log_probs[..., label] = -math.inf
    return batch_prefix_beam_search(log_probs, lengths, cfg.blank_id, beam)


@torch.inference_mode()
def sequence_scores(teacher: nn.Module, src: Tensor, hyps: Sequence[Sequence[int]]) -> Tensor:
    """An autoregressive model's length-normalised log-probability of each hypothesis given its
    source: the mean over the hypothesis's tokens and EOS of log p(token | source, prefix),
    teacher-forced in one batched pass. src `(N, S)` right-padded (row i is hyps[i]'s source);
    returns `(N,)` float32. A model decoded by ONNX Runtime is scored by its float model."""
    total, tokens = sequence_log_probs(teacher, src, hyps)
    return total / tokens


@torch.inference_mode()
def sequence_log_probs(
    teacher: nn.Module, src: Tensor, hyps: Sequence[Sequence[int]]
) -> tuple[Tensor, Tensor]:
    """As `sequence_scores`, unnormalised: each hypothesis's summed log-probability (its tokens
    and EOS) and how many tokens that sums, both `(N,)`."""
    teacher = getattr(teacher, "float_model", teacher)
    if getattr(teacher, "uses_memory", False) or not hasattr(teacher, "decode"):
        raise ValueError(
            f"{type(teacher).__name__} cannot score hypotheses: autoregressive "
            "models without a memory only"
        )
    cfg = teacher.config
    device = _device(teacher)
    width = max((len(h) for h in hyps), default=0) + 1
    tgt_in = torch.full((len(hyps), width), cfg.pad_id, dtype=torch.long)
    tgt_out = torch.full((len(hyps), width), cfg.pad_id, dtype=torch.long)
    for i, h in enumerate(hyps):
        tgt_in[i, 0] = cfg.bos_id
        tgt_in[i, 1 : len(h) + 1] = torch.tensor(h, dtype=torch.long)
        tgt_out[i, : len(h)] = torch.tensor(h, dtype=torch.long)
        tgt_out[i, len(h)] = cfg.eos_id
    tgt_in, tgt_out = tgt_in.to(device), tgt_out.to(device)
    logits = teacher.decode(tgt_in, teacher.encode(src.to(device)))
    token_lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt_out[..., None])[..., 0]
    keep = tgt_out.ne(cfg.pad_id)
    return (token_lp * keep).sum(dim=1), keep.sum(dim=1)


def ctc_rerank(
    model: nn.Module,
    src: Tensor,
    languages: tuple[str, str] | None,
    beam: int,
    teacher: nn.Module | None = None,
) -> list[list[int]]:
    """CTC prefix beam search, the best of each sentence's n-best by the teacher's
    length-normalised log-probability (`sequence_scores`; the paper's AT re-ranking), or by
    its CTC log-probability without a teacher. A sentence without any labelling of nonzero
    probability gets an empty translation."""
    nbest = ctc_nbest(model, src, languages, beam)
    if teacher is None:
        return [n[0][0] if n else [] for n in nbest]
    rows = [i for i, n in enumerate(nbest) for _ in n]
    hyps = [h for n in nbest for h, _ in n]
    if not hyps:
        return [[] for _ in nbest]
    sources = src[torch.tensor(rows)]  # each candidate's source
    scores = sequence_scores(teacher, sources, hyps).tolist()
    best: dict[int, tuple[float, list[int]]] = {}
    for row, hyp, score in zip(rows, hyps, scores, strict=True):
        if row not in best or score > best[row][0]:  # the first of equal scores: CTC's order
            best[row] = (score, hyp)
    return [best[i][1] if i in best else [] for i in range(len(nbest))]
