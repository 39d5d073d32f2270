"""CTC mechanics against brute force: every frame labelling of tiny cases enumerated."""

from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from models.ctc import (
    batch_prefix_beam_search,
    best_alignment,
    best_path,
    collapse,
    collapse_keep_blanks,
    ctc_loss,
    ctc_nll,
    feasible,
    min_frames,
    prefix_beam_search,
    repeats,
    upsample,
)
from models.decoding import ctc_greedy

pytestmark = pytest.mark.unit

torch.set_num_threads(1)

BLANK, A, B = 0, 1, 2  # the brute-force vocabulary: V = 3 including the blank
V = 3


def reference_collapse(path: tuple[int, ...]) -> tuple[int, ...]:
    """Gamma^-1 written independently of models.ctc: groups of equal labels, blanks out."""
    return tuple(label for label, _ in itertools.groupby(path) if label != BLANK)


def brute_force(lp: np.ndarray) -> dict[tuple[int, ...], tuple[float, float]]:
    """Every labelling of the frames `(T, V)`: collapsed label sequence -> (log of the summed
    probability of its alignments, log-prob of its best alignment)."""
    t = lp.shape[0]
    paths = list(itertools.product(range(V), repeat=t))
    scores = lp[np.arange(t), np.array(paths)].sum(axis=1)  # (V**T,)
    groups: dict[tuple[int, ...], list[float]] = {}
    for path, score in zip(paths, scores.tolist(), strict=True):
        groups.setdefault(reference_collapse(path), []).append(score)
    out = {}
    for y, s in groups.items():
        top = max(s)
        out[y] = (top + math.log(sum(math.exp(x - top) for x in s)), top)
    return out


def random_log_probs(t: int, g: torch.Generator, v: int = V) -> Tensor:
    return torch.log_softmax(2 * torch.randn(t, v, generator=g, dtype=torch.float64), dim=-1)


def tiny_cases(n: int, seed: int) -> list[tuple[Tensor, list[int]]]:
    """`n` feasible (log-probs `(T, 3)`, target) pairs with T <= 6, U <= 3, repeats included."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    cases = []
    while len(cases) < n:
        t, u = rng.randint(1, 6), rng.randint(0, 3)
        y = [rng.choice([A, B]) for _ in range(u)]
        if u + sum(a == b for a, b in itertools.pairwise(y)) <= t:
            cases.append((random_log_probs(t, g), y))
    return cases


def padded_batch(cases: list[tuple[Tensor, list[int]]], g: torch.Generator) -> tuple[Tensor, ...]:
    """Right-padded (log_probs `(B, 6, 3)`, frame_lengths, tgt `(B, 3)`, tgt_lengths). Padded
    frames hold other valid log-probs and padded targets a real label, so a leak shows."""
    log_probs = random_log_probs(len(cases) * 6, g).view(len(cases), 6, V).clone()
    tgt = torch.full((len(cases), 3), A)
    for i, (lp, y) in enumerate(cases):
        log_probs[i, : lp.size(0)] = lp
        tgt[i, : len(y)] = torch.tensor(y, dtype=torch.long)
    frame_lengths = torch.tensor([lp.size(0) for lp, _ in cases])
    tgt_lengths = torch.tensor([len(y) for _, y in cases])
    return log_probs, frame_lengths, tgt, tgt_lengths


def one(lp: Tensor, y: list[int]) -> tuple[Tensor, ...]:
    """A batch of one unpadded pair."""
    return (
        lp[None],
        torch.tensor([lp.size(0)]),
        torch.tensor([y], dtype=torch.long).view(1, -1),
        torch.tensor([len(y)]),
    )


# --- upsampling and feasibility ---------------------------------------------------------


def test_upsample_repeats_each_token_in_place_and_its_padding_mask() -> None:
    ids = torch.tensor([[5, 6, 7], [8, 9, 0]])  # pad 0
    up, mask = upsample(ids, ids.eq(0))
    assert up.tolist() == [[5, 5, 6, 6, 7, 7], [8, 8, 9, 9, 0, 0]]
    assert torch.equal(up[:, 0::2], ids) and torch.equal(up[:, 1::2], ids)
    assert mask.tolist() == [[False] * 6, [False] * 4 + [True] * 2]
    assert torch.equal(mask, up.eq(0))
    assert (~mask).sum(dim=1).tolist() == [6, 4]  # 2 frames per real token

    states = torch.arange(12.0).view(2, 3, 2)  # (B, S, D)
    up3, mask3 = upsample(states, ids.ne(0), factor=3)
    assert up3.shape == (2, 9, 2)
    assert up3[0, :, 0].tolist() == [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 4.0, 4.0, 4.0]
    assert mask3[1].tolist() == [True] * 6 + [False] * 3
    with pytest.raises(ValueError, match="mask"):
        upsample(ids, ids.eq(0)[:, :2])
    with pytest.raises(ValueError, match="factor"):
        upsample(ids, ids.eq(0), factor=0)


def test_feasibility_counts_a_blank_between_repeated_tokens() -> None:
    # targets: "a a" (3 frames), "a b" (2), "a a a" (5), "a" (1), "a b b a" (5), "" (0)
    tgt = torch.tensor(
        [[A, A, 9, 9], [A, B, 9, 9], [A, A, A, 9], [A, 9, 9, 9], [A, B, B, A], [9] * 4]
    )
    tgt_lengths = torch.tensor([2, 2, 3, 1, 4, 0])  # padding (9 9 ...) repeats: never counted
    assert repeats(tgt, tgt_lengths).tolist() == [1, 0, 2, 0, 1, 0]
    assert min_frames(tgt, tgt_lengths).tolist() == [3, 2, 5, 1, 5, 0]
    one_token = torch.ones(6, dtype=torch.long)  # 2 frames each at factor 2
    assert feasible(one_token, tgt, tgt_lengths).tolist() == [False, True, False, True, False, True]
    assert feasible(2 * one_token, tgt, tgt_lengths).tolist() == [
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    assert feasible(3 * one_token, tgt, tgt_lengths).tolist() == [True] * 6
    assert feasible(one_token, tgt, tgt_lengths, factor=3).tolist() == [
        True,
        True,
        False,
        True,
        False,
        True,
    ]


# --- the loss ---------------------------------------------------------------------------


def test_ctc_loss_equals_brute_force_log_sum_over_all_alignments() -> None:
    for lp, y in tiny_cases(24, seed=0):
        total = brute_force(lp.numpy())[tuple(y)][0]
        loss, stats = ctc_loss(*one(lp, y), blank=BLANK, label_smoothing=0.0)
        assert loss.item() == pytest.approx(-total / max(len(y), 1), abs=1e-6)
        assert ctc_nll(*one(lp, y), blank=BLANK).item() == pytest.approx(-total, abs=1e-6)
        assert (stats.pairs, stats.infeasible) == (1, 0)


def test_padded_batch_gives_each_pair_its_unpadded_value() -> None:
    g = torch.Generator().manual_seed(1)
    cases = tiny_cases(10, seed=1)
    assert len({lp.size(0) for lp, _ in cases}) > 2 and len({len(y) for _, y in cases}) > 2
    log_probs, frame_lengths, tgt, tgt_lengths = padded_batch(cases, g)
    totals = [brute_force(lp.numpy())[tuple(y)][0] for lp, y in cases]
    nll = ctc_nll(log_probs, frame_lengths, tgt, tgt_lengths, BLANK)
    assert nll.tolist() == pytest.approx([-t for t in totals], abs=1e-6)
    per_token = [-t / max(len(y), 1) for t, (_, y) in zip(totals, cases, strict=True)]
    loss, _ = ctc_loss(log_probs, frame_lengths, tgt, tgt_lengths, BLANK, label_smoothing=0.0)
    assert loss.item() == pytest.approx(sum(per_token) / len(cases), abs=1e-6)
    # smoothing reads the valid frames only: all of them pooled, padded ones never
    eps = 0.3
    valid = torch.cat([lp for lp, _ in cases])  # (sum T, V)
    smooth = -valid.mean().item()
    loss, _ = ctc_loss(log_probs, frame_lengths, tgt, tgt_lengths, BLANK, label_smoothing=eps)
    expected = (1 - eps) * sum(per_token) / len(cases) + eps * smooth
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_label_smoothing_on_a_hand_computed_case() -> None:
    # Two valid frames p = (.5, .25, .25), (.25, .5, .25) and a padded third frame; y = "a".
    # Alignments of "a": a a (.25 * .5) + _ a (.5 * .5) + a _ (.25 * .25) = .4375.
    # Smoothing: -mean log p per frame = -(log .5 + 2 log .25) / 3 = 5/3 log 2 on both frames.
    probs = torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.01, 0.01, 0.98]])
    log_probs = probs.double().log()[None]  # (1, 3, 3)
    tgt, frames, tgt_len = torch.tensor([[A, B]]), torch.tensor([2]), torch.tensor([1])
    loss, stats = ctc_loss(log_probs, frames, tgt, tgt_len, BLANK, label_smoothing=0.1)
    expected = 0.9 * -math.log(0.4375) + 0.1 * 5 / 3 * math.log(2)
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    assert stats.ctc.item() == pytest.approx(-math.log(0.4375), abs=1e-12)
    plain, _ = ctc_loss(log_probs, frames, tgt, tgt_len, BLANK, label_smoothing=0.0)
    assert plain.item() == pytest.approx(-math.log(0.4375), abs=1e-12)


def test_infeasible_pairs_are_filtered_and_counted() -> None:
    g = torch.Generator().manual_seed(2)
    log_probs = random_log_probs(12, g).view(3, 4, V).requires_grad_()
    # "a b" in 4 frames; "a a" in 2 frames: needs 3, infeasible; "a a" in 3 frames
    tgt = torch.tensor([[A, B], [A, A], [A, A]])
    frame_lengths, tgt_lengths = torch.tensor([4, 2, 3]), torch.tensor([2, 2, 2])
    loss, stats = ctc_loss(log_probs, frame_lengths, tgt, tgt_lengths, BLANK, label_smoothing=0.1)
    assert stats.feasible.tolist() == [True, False, True]
    assert (stats.pairs, stats.infeasible) == (2, 1)
    lp = log_probs.detach()
    totals = [brute_force(lp[0].numpy())[(A, B)][0], brute_force(lp[2, :3].numpy())[(A, A)][0]]
    ctc = -(totals[0] + totals[1]) / 2 / 2  # each divided by U = 2, then the mean of two
    smooth = -torch.cat([lp[0], lp[2, :3]]).mean().item()
    assert loss.item() == pytest.approx(0.9 * ctc + 0.1 * smooth, abs=1e-6)
    assert stats.ctc.item() == pytest.approx(ctc, abs=1e-6)
    loss.backward()
    assert torch.isfinite(log_probs.grad).all()
    assert log_probs.grad[1].abs().sum().item() == 0.0  # the filtered pair takes no part
    assert log_probs.grad[0].abs().sum().item() > 0.0


def test_an_all_infeasible_batch_gives_a_connected_zero_and_its_count() -> None:
    log_probs = torch.full((2, 3, V), math.log(1 / V), dtype=torch.float64)
    log_probs[1, 2] = -math.inf  # a padded frame of -inf must not make NaN gradients
    log_probs.requires_grad_()
    tgt = torch.tensor([[A, A, A], [A, B, A]])
    loss, stats = ctc_loss(log_probs, torch.tensor([3, 2]), tgt, torch.tensor([3, 3]), BLANK)
    assert loss.item() == 0.0 and loss.grad_fn is not None
    assert (stats.pairs, stats.infeasible, stats.feasible.tolist()) == (0, 2, [False, False])
    loss.backward()
    assert torch.equal(log_probs.grad, torch.zeros_like(log_probs))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"log_probs": torch.zeros(2, 4)}, r"log_probs must be \(B, T, V\)"),
        ({"tgt": torch.ones(3, 2, dtype=torch.long)}, r"tgt must be \(B, U\) with B = 2"),
        ({"frame_lengths": torch.tensor([4])}, r"frame_lengths must be \(B,\)"),
        ({"frame_lengths": torch.tensor([4, 5])}, r"frame_lengths must lie in 0\.\.4"),
        ({"tgt_lengths": torch.tensor([[1, 1]])}, r"tgt_lengths must be \(B,\)"),
        ({"tgt_lengths": torch.tensor([3, 1])}, r"tgt_lengths must lie in 0\.\.2"),
        ({"blank": 3}, "blank id 3 is outside the vocabulary of 3"),
        ({"tgt": torch.tensor([[A, BLANK], [A, B]])}, "contains the blank id 0"),
    ],
)
def test_ctc_loss_rejects_inconsistent_shapes(change: dict, message: str) -> None:
    args = {
        "log_probs": torch.zeros(2, 4, V),
        "frame_lengths": torch.tensor([4, 3]),
        "tgt": torch.tensor([[A, B], [A, A]]),
        "tgt_lengths": torch.tensor([2, 2]),
        "blank": BLANK,
    } | change
    with pytest.raises(ValueError, match=message):
        ctc_loss(**args)


# --- the best alignment -----------------------------------------------------------------


def test_best_alignment_equals_brute_force_argmax_and_collapses_to_the_target() -> None:
    g = torch.Generator().manual_seed(3)
    cases = tiny_cases(16, seed=3)
    log_probs, frame_lengths, tgt, tgt_lengths = padded_batch(cases, g)
    frames, scores = best_alignment(log_probs, frame_lengths, tgt, tgt_lengths, BLANK, fill=7)
    assert frames.shape == (len(cases), 6)
    for i, (lp, y) in enumerate(cases):
        t = lp.size(0)
        best = brute_force(lp.numpy())[tuple(y)][1]
        assert scores[i].item() == pytest.approx(best, abs=1e-9)  # ties: the score, not the path
        path = frames[i, :t]
        assert lp[torch.arange(t), path].sum().item() == pytest.approx(best, abs=1e-9)
        assert collapse(path, BLANK) == y
        assert frames[i, t:].tolist() == [7] * (6 - t)


def test_best_alignment_leaves_the_greedy_path_only_when_it_must() -> None:
    # argmax labels a a _ a (collapses to "a a") and a a a _ (collapses to "a", not "a a")
    probs = torch.tensor(
        [
            [[0.1, 0.8, 0.1], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.1, 0.8, 0.1]],
            [[0.1, 0.8, 0.1], [0.3, 0.6, 0.1], [0.2, 0.7, 0.1], [0.4, 0.3, 0.3]],
        ]
    )
    tgt, tgt_lengths = torch.tensor([[A, A], [A, A]]), torch.tensor([2, 2])
    frames, scores = best_alignment(probs.log(), torch.tensor([4, 4]), tgt, tgt_lengths, BLANK)
    # row 1: a _ a _ (.0672) beats a _ a a (.0504), a a _ a (.0288), a _ _ a (.0144), ...
    assert frames.tolist() == [[A, A, BLANK, A], [A, BLANK, A, BLANK]]
    assert scores.exp().tolist() == pytest.approx([0.8 * 0.7 * 0.6 * 0.8, 0.8 * 0.3 * 0.7 * 0.4])


def test_best_alignment_rejects_infeasible_pairs() -> None:
    log_probs = torch.zeros(2, 4, V).log_softmax(dim=-1)
    tgt = torch.tensor([[A, A], [A, B]])
    with pytest.raises(ValueError, match=r"rows \[0\] .* \(infeasible\)"):
        best_alignment(log_probs, torch.tensor([2, 2]), tgt, torch.tensor([2, 2]), BLANK)


# --- collapsing and greedy decoding -----------------------------------------------------


def test_collapse_merges_repeats_then_drops_blanks_and_specials() -> None:
    assert collapse([A, A, BLANK, A, B, B, BLANK, BLANK], BLANK) == [A, A, B]
    assert collapse([], BLANK) == []
    assert collapse([[B, BLANK, B], [BLANK, BLANK], [A, B, A]], BLANK) == [[B, B], [], [A, B, A]]
    assert collapse(torch.tensor([[A, A, 5], [5, B, 5]]), BLANK, special=(5,)) == [[A], [B]]
    # a special label still splits a repeat, as in ctc_greedy
    assert collapse(torch.tensor([A, 9, A, A, BLANK]), BLANK, special=(9,)) == [A, A]
    assert collapse_keep_blanks([A, A, BLANK, BLANK, A, B, B, BLANK]) == [A, BLANK, A, B, BLANK]
    assert collapse_keep_blanks([[BLANK, A, A], [B]]) == [[BLANK, A], [B]]
    assert collapse_keep_blanks([A, 9, 9, A, BLANK], special=(9,)) == [A, A, BLANK]


class FixedLogProbs(nn.Module):
    """A stand-in CTC model for `ctc_greedy`: its frame log-probs are given."""

    config = SimpleNamespace(pad_id=0, bos_id=1, eos_id=2, blank_id=3)

    def __init__(self, log_probs: Tensor, lengths: Tensor) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # ctc_greedy reads the device off one
        self.log_probs, self.lengths = log_probs, lengths

    def ctc_log_probs(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.log_probs, self.lengths


def test_best_path_is_argmax_then_collapse_as_ctc_greedy_does() -> None:
    special, blank, a, b = (0, 1, 2), 3, 4, 5
    labels = torch.tensor([[a, a, blank, a, b, b, blank], [blank, b, 2, b, a, a, a]])
    one_hot = torch.log_softmax(5 * nn.functional.one_hot(labels, 6).double(), dim=-1)
    lengths = torch.tensor([7, 5])
    assert best_path(one_hot, lengths, blank, special) == [[a, a, b], [b, b, a]]

    g = torch.Generator().manual_seed(4)
    log_probs = torch.log_softmax(torch.randn(6, 9, 6, generator=g), dim=-1)
    lengths = torch.tensor([9, 8, 5, 2, 1, 9])
    reference = []
    for row, n in zip(log_probs.argmax(dim=-1).tolist(), lengths.tolist(), strict=True):
        merged = [label for label, _ in itertools.groupby(row[:n])]
        reference.append([x for x in merged if x != blank and x not in special])
    assert best_path(log_probs, lengths, blank, special) == reference
    model = FixedLogProbs(log_probs, lengths)
    assert ctc_greedy(model, torch.ones(6, 4, dtype=torch.long)) == reference
    assert any(len(r) > 1 for r in reference)


# --- prefix beam search -----------------------------------------------------------------


def test_prefix_beam_search_finds_the_labelling_that_greedy_misses() -> None:
    # p(_) = .4, p(a) = .35, p(b) = .25 on both frames: greedy says "" (.16), but "a" has
    # a a + a _ + _ a = .35^2 + 2 * .35 * .4 = .4025
    log_probs = torch.tensor([[0.4, 0.35, 0.25]] * 2, dtype=torch.float64).log()
    assert best_path(log_probs[None], torch.tensor([2]), BLANK) == [[]]
    nbest = prefix_beam_search(log_probs, 2, BLANK, beam=10)
    assert nbest[0][0] == [A]
    assert nbest[0][1] == pytest.approx(math.log(0.4025), abs=1e-9)
    expected = {(A,): 0.4025, (B,): 0.25**2 + 2 * 0.25 * 0.4, (): 0.16}
    expected |= {(A, B): 0.35 * 0.25, (B, A): 0.25 * 0.35}
    assert {tuple(y): math.exp(s) for y, s in nbest} == pytest.approx(expected, abs=1e-9)


def test_wide_prefix_beam_search_returns_every_labelling_with_its_exact_probability() -> None:
    g = torch.Generator().manual_seed(5)
    for t in (1, 3, 4, 5):
        for _ in range(3):
            lp = random_log_probs(t, g)
            truth = {y: total for y, (total, _) in brute_force(lp.numpy()).items()}
            prefixes = 2 ** (t + 1) - 1  # label sequences of length <= T over {a, b}
            nbest = prefix_beam_search(lp, t, BLANK, beam=prefixes)
            got = {tuple(y): s for y, s in nbest}
            assert got.keys() == truth.keys()
            assert got == pytest.approx(truth, abs=1e-6)
            assert nbest[0][1] == pytest.approx(max(truth.values()), abs=1e-6)
            assert [s for _, s in nbest] == sorted((s for _, s in nbest), reverse=True)
            narrow = prefix_beam_search(lp, t, BLANK, beam=2)
            assert len(narrow) == min(2, len(truth))
            assert narrow[0][1] <= nbest[0][1] + 1e-12


def test_batched_prefix_beam_search_reads_each_row_to_its_frame_length() -> None:
    g = torch.Generator().manual_seed(6)
    log_probs = random_log_probs(15, g).view(3, 5, V)
    lengths = torch.tensor([5, 2, 4])
    got = batch_prefix_beam_search(log_probs, lengths, BLANK, beam=4)
    for row, n, nbest in zip(log_probs, lengths.tolist(), got, strict=True):
        alone = prefix_beam_search(row[:n].clone(), n, BLANK, beam=4)
        assert [y for y, _ in nbest] == [y for y, _ in alone]
        assert [s for _, s in nbest] == pytest.approx([s for _, s in alone], abs=1e-12)
    assert got[1][0][1] == pytest.approx(
        max(total for total, _ in brute_force(log_probs[1, :2].numpy()).values()), abs=1e-9
    )
