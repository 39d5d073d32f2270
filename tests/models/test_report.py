"""`ragmt report`: tables between markers rebuilt from records, as a spec says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from models.report import ReportError, regenerate, update
from models.results import FORMAT, append_record

pytestmark = pytest.mark.unit


def _rec(system: str, domain: str, bleu: float, store: str | None = None, lp: float = 2.0) -> dict:
    return {
        "format": FORMAT,
        "kind": "eval",
        "system": system,
        "domain": domain,
        "split": "test",
        "decoding": {"length_penalty": lp},
        "store": {"domain": store, "label": "idf"} if store else None,
        "bleu": bleu,
        "signatures": {"bleu": "sig-b", "chrf": "sig-c"},
    }


RECORDS = [
    _rec("base", "a", 10.0),
    _rec("base", "b", 20.0),
    _rec("base", "a", 11.0, lp=3.0),
    _rec("mem", "a", 15.5, store="a"),
    _rec("mem", "b", 27.25, store="b"),
    _rec("mem", "a", 9.0, store="b"),  # a wrong domain's store
]
SPEC = {
    "where": {"decoding.length_penalty": 2.0},
    "corner": "system",
    "columns": {"field": "domain", "values": ["a", "b"]},
    "rows": [
        {"label": "baseline", "where": {"system": "base"}},
        {"label": "memory", "where": {"system": "mem", "store.domain": {"same_as": "domain"}},
         "bold": True},
        {"label": "memory − baseline", "where": {"system": "mem",
         "store.domain": {"same_as": "domain"}}, "minus": {"system": "base"}},
        {"label": "wrong store", "where": {"system": "mem"}, "cells": {"a": {"store.domain": "b"}},
         "absent": ["b"]},
    ],
    "signatures": True,
}  # fmt: skip
WANT = """| system | a | b |
|---|---:|---:|
| baseline | 10.00 | 20.00 |
| **memory** | **15.50** | **27.25** |
| memory − baseline | +5.50 | +7.25 |
| wrong store | 9.00 | - |

BLEU: `sig-b`

chrF: `sig-c`
"""


def _report(tmp_path: Path, spec: dict, records: list[dict] = RECORDS) -> Path:
    for r in records:
        append_record(tmp_path / "r.jsonl", r)
    (tmp_path / "rep.tables.json").write_text(
        json.dumps({"results": ["r.jsonl"], "tables": {"main": spec}})
    )
    report = tmp_path / "rep.md"
    report.write_text(
        "# Results\n\nText.\n\n<!-- table: main -->\nstale\n<!-- /table -->\n\nEnd.\n"
    )
    return report


def test_tables_are_rebuilt_from_records_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    report = _report(tmp_path, SPEC)
    assert update(report) is True
    text = report.read_text()
    assert (
        text == f"# Results\n\nText.\n\n<!-- table: main -->\n\n{WANT}\n<!-- /table -->\n\nEnd.\n"
    )
    assert update(report) is False and report.read_text() == text


def test_a_hand_edited_number_is_out_of_date(tmp_path: Path) -> None:
    report = _report(tmp_path, SPEC)
    update(report)
    report.write_text(report.read_text().replace("27.25", "28.25"))
    assert update(report, check=True) is True
    assert "28.25" in report.read_text()  # check changes nothing
    assert "27.25" in regenerate(report)


def test_range_over_several_records(tmp_path: Path) -> None:
    spec = {"aggregate": "range", "format": "{:.1f}x", "columns": [{"label": "x"}],
            "rows": [{"label": "mem", "where": {"system": "mem"}}]}  # fmt: skip
    assert "| mem | 9.0x–27.2x (3) |" in regenerate(_report(tmp_path, spec))


def test_a_range_whose_ends_agree_as_shown_is_one_value(tmp_path: Path) -> None:
    spec = {"aggregate": "range", "metric": "decoding.length_penalty", "format": "{:.1f}",
            "columns": [{"label": "x"}],
            "rows": [{"label": "mem", "where": {"system": "mem"}}]}  # fmt: skip
    assert "| mem | 2.0 (3) |" in regenerate(_report(tmp_path, spec))


def test_scale_shows_a_fraction_in_percent_and_a_row_may_keep_its_own(tmp_path: Path) -> None:
    records = [{**_rec("base", "a", 0.9866), "seconds": 12.5}]
    spec = {"scale": 100, "format": "{:.1f}", "columns": [{"label": "a"}],
            "rows": [{"label": "accuracy", "where": {"system": "base"}},
                     {"label": "seconds", "where": {"system": "base"}, "metric": "seconds",
                      "scale": 1}]}  # fmt: skip
    text = regenerate(_report(tmp_path, spec, records))
    assert "| accuracy | 98.7 |" in text and "| seconds | 12.5 |" in text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"rows": [{"label": "r", "where": {"system": "mem"}}]}, "3 records match"),
        ({"rows": [{"label": "r", "where": {"system": "nobody"}}]}, "no record matches"),
        ({"rows": [{"label": "r", "wher": {"system": "base"}}]}, r"unknown keys \['wher'\]"),
        ({"rows": [{"label": "r"}], "colour": 1}, r"unknown keys \['colour'\]"),
    ],
)
def test_an_ambiguous_missing_or_misspelt_cell_is_an_error(
    tmp_path: Path, spec: dict, message: str
) -> None:
    with pytest.raises(ReportError, match=message):
        regenerate(_report(tmp_path, {"columns": [{"label": "x"}], **spec}))


def test_a_marker_without_a_spec_and_a_spec_without_a_marker_are_errors(tmp_path: Path) -> None:
    report = _report(tmp_path, SPEC)
    report.write_text(report.read_text() + "<!-- table: other -->\n<!-- /table -->\n")
    with pytest.raises(ReportError, match="'other' has no spec"):
        regenerate(report)
    report.write_text("no markers\n")
    with pytest.raises(ReportError, match=r"no marker for the specified tables \['main'\]"):
        regenerate(report)


def test_rows_over_several_fields_one_per_record_with_text_columns(tmp_path: Path) -> None:
    spec = {"corner": "system", "where": {"decoding.length_penalty": 2.0},
            "rows": {"fields": ["system", "store.domain"]},
            "columns": [{"label": "store", "metric": "store.domain", "format": "{}"},
                        {"label": "domain", "metric": "domain", "format": "{}"},
                        {"label": "BLEU", "metric": "bleu", "format": "{:.1f}"}]}  # fmt: skip
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with pytest.raises(ReportError, match="2 records match"):  # (base, null) is two records
        regenerate(_report(tmp_path / "a", spec))
    spec["rows"] = {"fields": ["system", "domain", "store.domain"]}
    assert (
        regenerate(_report(tmp_path / "b", spec))
        .split("<!-- table: main -->\n\n")[1]
        .startswith(
            "| system | store | domain | BLEU |\n|---|---:|---:|---:|\n"
            "| base | - | a | 10.0 |\n| base | - | b | 20.0 |\n| mem | a | a | 15.5 |\n"
            "| mem | b | b | 27.2 |\n| mem | b | a | 9.0 |\n"
        )
    )
