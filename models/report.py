"""`ragmt report`: rewrite a Markdown report's tables from results files (`models.results`).

A report marks each generated table::

    <!-- table: NAME -->
    ...replaced on every run...
    <!-- /table -->

and `<report>.tables.json` beside it says which results files to read and what each table
shows. A cell is one record (or a range over several) picked by filters that the table, its
row and its column each add to, so a number in the report is never typed by hand::

    {"results": ["../experiments/results/x.jsonl"],          # relative to the spec file
     "tables": {"NAME": {
        "where": {"split": "test", "decoding.length_penalty": 2.0},   # dotted paths
        "metric": "bleu", "format": "{:.2f}", "corner": "store",
        "columns": {"field": "domain", "values": ["general", "medical"]},
        "rows": [{"label": "IDF n-gram", "where": {"store.label": "idf-ngram"}},
                 {"label": "Δ", "where": {...}, "minus": {...},    # cell minus another record
                  "minus_cells": {"medical": {...}}},                  # per column, too
                 {"label": "wrong store", "where": {...},
                  "cells": {"general": {"store.domain": "medical"}},   # per-column filters
                  "absent": ["medical"]}]}}}                          # "-", on purpose

Rows (or columns) may also be {"fields": ["domain", "method", "index"]}: one per distinct
combination of those fields among the table's records, in file order (null kept, shown "-"),
labelled by the first; a column {"label": "index", "metric": "index", "format": "{}"} then
shows another field of the row's record as text, so a benchmark's table is one row per record.
"scale" (table, row or column) multiplies a number before it is formatted: 100 shows a
fraction in percent.

A filter value is matched for equality, or is {"same_as": "other.path"} or {"in": [...]}.
A cell that matches no record is an error unless its column is listed in `absent`; one that
matches several is an error unless the table sets "aggregate": "range". Regenerating twice
changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from models.results import read_records

MARKER = re.compile(
    r"(<!-- table: (?P<name>[A-Za-z0-9_.-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL
)
_TABLE_KEYS = {
    "where", "metric", "format", "delta_format", "corner", "columns", "rows", "aggregate",
    "signatures", "note", "scale",
}  # fmt: skip
_ROW_KEYS = {
    "label", "where", "cells", "absent", "minus", "minus_cells", "bold", "metric", "format",
    "scale",
}  # fmt: skip
Record = dict[str, Any]


class ReportError(ValueError):
    """A spec or a report is inconsistent with the results: names the table and the cell."""


def spec_path(report: Path) -> Path:
    """`docs/x.md` -> `docs/x.tables.json`."""
    return report.with_name(report.stem + ".tables.json")


def _get(record: Mapping[str, Any], path: str) -> Any:
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _matches(record: Record, where: Mapping[str, Any]) -> bool:
    for path, want in where.items():
        have = _get(record, path)
        if isinstance(want, Mapping) and "same_as" in want:
            if have != _get(record, want["same_as"]):
                return False
        elif isinstance(want, Mapping) and "in" in want:
            if have not in want["in"]:
                return False
        elif have != want or isinstance(have, bool) != isinstance(want, bool):
            return False
    return True


def _axis(spec: Any, records: Sequence[Record], where: Mapping[str, Any]) -> list[dict]:
    """Rows or columns: a list as given, {"field", "values"?} expanded (values default: the
    field's values among the table's records, in file order), or {"fields"}: one per distinct
    combination of several fields, in file order."""
    if isinstance(spec, list):
        for entry in spec:
            unknown = set(entry) - _ROW_KEYS
            if unknown:
                raise ReportError(f"unknown keys {sorted(unknown)} in {entry.get('label')!r}")
        return spec
    if "fields" in spec:
        fields = spec["fields"]
        combos = (tuple(_get(r, f) for f in fields) for r in records if _matches(r, where))
        return [
            {
                "label": "-" if c[0] is None else str(c[0]),
                "where": dict(zip(fields, c, strict=True)),
            }
            for c in dict.fromkeys(combos)
        ]
    field = spec["field"]
    values = spec.get("values")
    if values is None:
        seen = (_get(r, field) for r in records if _matches(r, where))
        values = list(dict.fromkeys(v for v in seen if v is not None))
    return [{"label": str(v), "where": {field: v}} for v in values]


def _pick(records: Sequence[Record], where: Mapping[str, Any]) -> list[Record]:
    return [r for r in records if _matches(r, where)]


def _render_table(name: str, spec: Mapping[str, Any], records: Sequence[Record]) -> str:
    unknown = set(spec) - _TABLE_KEYS
    if unknown:
        raise ReportError(f"table {name}: unknown keys {sorted(unknown)}")
    base = dict(spec.get("where", {}))
    columns = _axis(spec["columns"], records, base)
    rows = _axis(spec["rows"], records, base)
    aggregate = spec.get("aggregate")
    head = [spec.get("corner", ""), *(c["label"] for c in columns)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(columns)]
    shown: list[Record] = []
    for row in rows:
        cells = []
        for col in columns:
            label = col["label"]
            if label in row.get("absent", ()):
                cells.append("-")
                continue
            where = {**base, **col.get("where", {}), **row.get("where", {})}
            where |= row.get("cells", {}).get(label, {})
            metric = row.get("metric") or col.get("metric") or spec.get("metric", "bleu")
            fmt = row.get("format") or col.get("format") or spec.get("format", "{:.2f}")
            # e.g. 100: a fraction shown in percent
            scale = row.get("scale") or col.get("scale") or spec.get("scale", 1)
            found = _pick(records, where)
            where_text = json.dumps(where, ensure_ascii=False)
            if not found:
                raise ReportError(f"table {name}, row {row['label']!r}, column {label!r}: "
                                  f"no record matches {where_text}")  # fmt: skip
            if len(found) > 1 and aggregate != "range":
                raise ReportError(
                    f"table {name}, row {row['label']!r}, column {label!r}: {len(found)} "
                    f"records match {where_text} (make the filters narrower)"
                )
            shown += found
            values = [_get(r, metric) for r in found]
            if "minus" in row:
                other_where = {**base, **col.get("where", {}), **row["minus"]}
                other_where |= row.get("minus_cells", {}).get(label, {})
                other = _pick(records, other_where)
                if len(other) != 1:
                    raise ReportError(
                        f"table {name}, row {row['label']!r}, column {label!r}: "
                        f"{len(other)} records match the subtrahend "
                        f"{json.dumps(other_where, ensure_ascii=False)}"
                    )
                shown += other
                values = [v - _get(other[0], metric) for v in values]
                fmt = row.get("format") or spec.get("delta_format", "{:+.2f}")
            if scale != 1:
                values = [None if v is None else v * scale for v in values]
            if any(v is None for v in values):
                text = "-"
            elif len(values) > 1:  # a range, or one value where all agree as shown
                low, high = fmt.format(min(values)), fmt.format(max(values))
                text = f"{low} ({len(values)})" if low == high else f"{low}–{high} ({len(values)})"
            else:
                text = fmt.format(values[0])
            cells.append(f"**{text}**" if row.get("bold") and text != "-" else text)
        label = f"**{row['label']}**" if row.get("bold") else row["label"]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    out = "\n".join(lines) + "\n"
    if spec.get("note"):
        out += "\n" + spec["note"] + "\n"
    if spec.get("signatures"):
        out += _signatures(name, shown)
    return out


def _signatures(name: str, shown: Sequence[Record]) -> str:
    """The sacreBLEU signatures of every record a table shows, once each."""
    out = ""
    for metric, title in (("bleu", "BLEU"), ("chrf", "chrF")):
        sigs = list(dict.fromkeys(_get(r, f"signatures.{metric}") for r in shown))
        sigs = [s for s in sigs if s is not None]
        if sigs:
            out += f"\n{title}: " + ", ".join(f"`{s}`" for s in sigs) + "\n"
    if not out:
        raise ReportError(f"table {name}: signatures asked for, but its records have none")
    return out


def load_spec(path: Path) -> tuple[dict[str, Any], list[Record]]:
    """A report's table spec and every record of the results files it names."""
    if not path.is_file():
        raise ReportError(f"{path}: no table spec beside the report")
    spec = json.loads(path.read_text(encoding="utf-8"))
    records: list[Record] = []
    for name in spec.get("results", []):
        records += read_records(path.parent / name)
    return spec, records


def regenerate(report: Path, spec_file: Path | None = None) -> str:
    """The report's text with every marked table rebuilt from its spec and the records."""
    spec, records = load_spec(spec_file or spec_path(report))
    tables = spec.get("tables", {})
    text = report.read_text(encoding="utf-8")
    used: set[str] = set()

    def render(m: re.Match[str]) -> str:
        name = m["name"]
        if name not in tables:
            raise ReportError(f"{report}: table {name!r} has no spec in {spec_file or 'spec'}")
        used.add(name)
        return m.group(1) + "\n" + _render_table(name, tables[name], records) + "\n" + m.group(4)

    new = MARKER.sub(render, text)
    unused = sorted(set(tables) - used)
    if unused:
        raise ReportError(f"{report}: no marker for the specified tables {unused}")
    return new


def update(report: Path, check: bool = False) -> bool:
    """Rewrite the report's tables (or with `check` only compare); True if they differed."""
    new = regenerate(report)
    changed = new != report.read_text(encoding="utf-8")
    if changed and not check:
        report.write_text(new, encoding="utf-8")
    return changed
