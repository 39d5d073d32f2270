"""The committed reports' tables are what `ragmt report` regenerates from the records: a
number edited by hand, or a record changed without regenerating, fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.report import MARKER, regenerate, spec_path

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
REPORTS = sorted(
    p for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")] if spec_path(p).is_file()
)


def test_the_reports_with_results_tables_have_specs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in REPORTS}
    assert {
        "README.md",
        "docs/semiparametric-en-de.md",
        "docs/baseline-en-de.md",
        "docs/retrieval-widths.md",
        "docs/retrieval-benchmarks.md",
        "docs/service-benchmarks.md",
        "docs/language-identification.md",
        "docs/decoding-speed.md",
        "docs/trustworthy-translations.md",
    } <= names
    for p in REPORTS:
        assert MARKER.search(p.read_text(encoding="utf-8")), f"{p}: no generated table"


@pytest.mark.parametrize("report", REPORTS, ids=lambda p: p.name)
def test_committed_tables_equal_what_ragmt_report_regenerates(report: Path) -> None:
    assert regenerate(report) == report.read_text(encoding="utf-8"), (
        f"{report.relative_to(ROOT)} is out of date: run `ragmt report {report.relative_to(ROOT)}`"
    )
