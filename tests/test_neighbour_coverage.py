"""experiments/neighbour_coverage.py: hand-computed shares on a two-sentence set."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

cov = load("neighbour_coverage")


def test_shares_are_clipped_like_bleu_and_count_what_the_baseline_missed() -> None:
    refs = ["a b c d", "x x y"]
    targets = [[["a", "b", "c", "z"], ["d"]], [["x", "q"]]]
    res = cov.coverage(refs, targets, hyps=["a b", "y"])
    # unigrams: a b c d (4 of 4) + one of the two x (1 of 3) -> 5 of 7
    assert res["cov1"] == pytest.approx(100 * 5 / 7)
    # bigrams: "a b", "b c" of "a b"/"b c"/"c d", none of "x x"/"x y" -> 2 of 5
    assert res["cov2"] == pytest.approx(100 * 2 / 5)
    assert res["cov4"] == 0.0 and res["with_neighbours"] == 100.0
    # missed by the baseline: c d (both held) and x x (one held) -> 3 of 4 missed words held
    assert res["missed_by_baseline"] == pytest.approx(100 * 4 / 7)
    assert res["missed_covered"] == pytest.approx(100 * 3 / 4)


def test_a_mismatched_neighbour_file_is_refused() -> None:
    with pytest.raises(ValueError, match="2 references but 1 neighbour records"):
        cov.coverage(["a", "b"], [[]])


def test_fuzzy_bands_take_the_best_retrieved_source() -> None:
    # "abcd" vs "abce": 3 matching characters of 8 -> 0.75; "abcd" itself -> 1.0; none -> 0
    res = cov.fuzzy(["abcd", "abcd", "abcd"], [["abce", "zzzz"], ["abce", "abcd"], []])
    assert res["fuzzy_90"] == pytest.approx(100 / 3)
    assert res["fuzzy_70_90"] == pytest.approx(100 / 3)
    assert res["fuzzy_below_70"] == pytest.approx(100 / 3)
    assert res["fuzzy_mean"] == pytest.approx((0.75 + 1.0 + 0.0) / 3)


def test_both_neighbour_file_formats_read_alike(tmp_path: Path) -> None:
    ours = tmp_path / "nb.jsonl"
    ours.write_text('{"neighbours": [{"source": "a b", "target": "x y", "score": 1.0}]}\n')
    evals = tmp_path / "eval.jsonl"
    evals.write_text('{"gate": 0.5, "neighbours": [["a b", "x y"]]}\n')
    assert cov.read_pairs(ours, 5) == cov.read_pairs(evals, 5) == [[("a b", "x y")]]
