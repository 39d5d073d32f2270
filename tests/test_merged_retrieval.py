"""experiments/merged_retrieval.py: ranks interleaved, repeats dropped, cut to k."""

from __future__ import annotations

import pytest

from index_builder.retrieval.base import Neighbour
from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

merged = load("merged_retrieval")


def _n(pair_id: int, text: str) -> Neighbour:
    return Neighbour(pair_id, text, text.upper(), 1.0, None, text)


def test_merge_takes_ranks_in_turn_and_keeps_a_shared_pair_once() -> None:
    dense = [_n(1, "a"), _n(2, "b"), _n(3, "c")]
    idf = [_n(2, "b"), _n(4, "d"), _n(5, "e"), _n(6, "f")]
    got = [n.source for n in merged.merge([dense, idf], 5)]
    assert got == ["a", "b", "d", "c", "e"]  # b found by both: kept once, at its first rank
    assert [n.source for n in merged.merge([dense, idf], 2)] == ["a", "b"]
    assert [n.source for n in merged.merge([[], idf], 3)] == ["b", "d", "e"]
    assert merged.merge([[], []], 5) == []
