"""experiments/tokenizer_ceiling.py: the characters a tokenizer's round trip loses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "tokenizer_ceiling.py"
spec = importlib.util.spec_from_file_location("tokenizer_ceiling", SCRIPT)
tokenizer_ceiling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tokenizer_ceiling)  # type: ignore[union-attr]


def test_lost_characters_count_references_not_occurrences() -> None:
    refs = ["„Ja“ – „nein“", "Gut.", "Er sagte … – nichts"]
    trips = ['"Ja" - "nein"', "Gut.", "Er sagte ... - nichts"]
    lost = tokenizer_ceiling.lost_characters(refs, trips)
    assert lost == {"„": 1, "“": 1, "–": 2, "…": 1}
