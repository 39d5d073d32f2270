"""The committed English->German bundle: verified, small enough to ship, and a translator.

It is what `ragmt serve` serves with no settings, so it must load from a fresh clone and
produce German; its manifest carries the test scores of docs/baseline-en-de.md.
"""

from __future__ import annotations

import pytest

from models.bundle import load_bundle
from models.translator import DEFAULT_BUNDLE, DecodeOptions, Translator

DOMAINS = ("general", "bible", "medical", "software-docs")


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator.from_bundle(DEFAULT_BUNDLE)


def test_default_bundle_verifies_and_fits_the_size_budget() -> None:
    bundle = load_bundle(DEFAULT_BUNDLE)  # checks every sha256 before reading weights
    m = bundle.manifest
    assert m["architecture"] == "transformer"
    assert m["languages"] == {"source": "en", "target": "de"}
    size = sum(p.stat().st_size for p in DEFAULT_BUNDLE.iterdir())
    assert size < 40 * 2**20, size
    for domain in DOMAINS:  # recorded by `ragmt eval --record`
        scores = m["eval"][f"test:{domain}"]
        assert scores["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert 0.0 < scores["bleu"] < 100.0
    assert m["training"]["steps"] > 1000


def test_default_bundle_translates_into_german(translator: Translator) -> None:
    src = [
        "The file could not be opened.",
        "Click the button to save the document.",
    ]
    out = translator.translate(src, DecodeOptions(beam_size=4))
    assert "Datei" in out[0], out
    assert "Dokument" in out[1] or "speichern" in out[1], out
    # Beam search and greedy agree on something as plain as this.
    assert "Datei" in translator.translate(src[:1], DecodeOptions(beam_size=1))[0]
