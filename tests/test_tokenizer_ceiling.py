"""experiments/tokenizer_ceiling.py: the characters a tokenizer's round trip loses."""

from __future__ import annotations

import pytest

from tests.experiment_scripts import load

pytestmark = pytest.mark.unit

tokenizer_ceiling = load("tokenizer_ceiling")


def test_lost_characters_count_references_not_occurrences() -> None:
    refs = ["„Ja“ – „nein“", "Gut.", "Er sagte … – nichts"]
    trips = ['"Ja" - "nein"', "Gut.", "Er sagte ... - nichts"]
    lost = tokenizer_ceiling.lost_characters(refs, trips)
    assert lost == {"„": 1, "“": 1, "–": 2, "…": 1}
