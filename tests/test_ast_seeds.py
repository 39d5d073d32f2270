"""experiments/ast_seeds.py: the exact Mantel test of two seeds' language overlaps."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

ast_seeds = load("ast_seeds")
LANGS = ["de", "es", "pt", "ru", "uk", "zh"]


def _symmetric(n: int, g: torch.Generator) -> torch.Tensor:
    m = torch.rand(n, n, generator=g, dtype=torch.float64).triu(1)
    return m + m.T


def _record(system: str, m: torch.Tensor, langs: list[str]) -> dict:
    pairs = itertools.combinations(range(len(langs)), 2)
    jaccard = {f"{langs[i]}-{langs[j]}": float(m[i, j]) for i, j in pairs}
    return {"system": system, "jaccard": jaccard, "jaccard_mean": 0.3, "related_gap": 0.1}


def test_the_same_pattern_is_r_one_and_reached_by_no_other_labelling() -> None:
    a = _symmetric(6, torch.Generator().manual_seed(0))
    r, p, n = ast_seeds.mantel(a, a.clone())
    assert (r, n) == (1.0, 720)
    assert p == round(1 / 720, 6)  # distinct values: only the identity gives r = 1


def test_an_opposite_pattern_is_r_minus_one_and_p_one() -> None:
    a = _symmetric(5, torch.Generator().manual_seed(1))
    r, p, _ = ast_seeds.mantel(a, 1.0 - a)
    assert r == -1.0 and p == 1.0


def test_the_pattern_under_other_labels_is_not_found() -> None:
    a = _symmetric(6, torch.Generator().manual_seed(2))
    perm = torch.tensor([1, 0, 3, 2, 5, 4])
    r, _, _ = ast_seeds.mantel(a, a[perm][:, perm])
    assert r < 0.99  # the test compares languages by name, not by best match


def test_independent_patterns_give_p_below_alpha_about_alpha_of_the_time() -> None:
    g = torch.Generator().manual_seed(3)
    ps = [ast_seeds.mantel(_symmetric(6, g), _symmetric(6, g))[1] for _ in range(300)]
    # P(p <= 0.1) is 0.1 under the null: 30 expected, sd 5.2; outside [12, 50] w.p. < 0.001
    assert 12 <= sum(p <= 0.1 for p in ps) <= 50
    assert 0.4 <= sum(ps) / len(ps) <= 0.6


def test_records_give_the_matrix_of_their_pairs() -> None:
    a = _symmetric(6, torch.Generator().manual_seed(4))
    rec = _record("one", a, LANGS)
    m = ast_seeds.overlap_matrix(rec["jaccard"], LANGS)
    assert torch.equal(m, a)
    out = ast_seeds.compare(rec, _record("two", a, LANGS))
    assert out["kind"] == "ast-selection-seeds" and out["pearson_r"] == 1.0
    assert out["relabellings"] == math.factorial(6) and out["languages"] == sorted(LANGS)


def test_records_of_other_languages_are_refused() -> None:
    a = _symmetric(6, torch.Generator().manual_seed(5))
    other = [*LANGS[:-1], "hi"]
    with pytest.raises(ValueError, match="other languages"):
        ast_seeds.compare(_record("one", a, LANGS), _record("two", a, other))
