"""One-off: the hand-typed benchmark tables of docs/retrieval-benchmarks.md,
docs/retrieval-widths.md and docs/service-benchmarks.md as `models.results` records.

Each table is read from the reports as they stood at commit 164bc12, before they were
generated; every record's `recovered_from` names the report and the table, and what the
report does not say (the commit a run measured, the machine when not printed, a time column a
table left out) is null. The reports' own settings (the command, k, the run's date where
given) are kept.

    python experiments/convert_benchmark_reports.py --out experiments/results
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

from models.results import FORMAT, append_record

SOURCE = "164bc12"
EPYC = "AMD EPYC; 2 cores; torch 2.13.0+cpu ({} threads); no GPU"


def report_text(name: str) -> str:
    """The report as it stood before its tables were generated."""
    return subprocess.run(
        ["git", "show", f"{SOURCE}:docs/{name}"], capture_output=True, text=True, check=True
    ).stdout


def tables(text: str, header_start: str) -> list[tuple[int, list[dict[str, str]]]]:
    """Every Markdown table whose header line starts with `header_start`: (line number of the
    header, rows as {column: cell}). Lines that are not table rows (a recall sweep printed
    inside a table) are skipped; the table ends at a blank line or a code fence."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.startswith(header_start):
            continue
        head = [c.strip() for c in line.strip().strip("|").split("|")]
        rows = []
        for row in lines[i + 2 :]:
            if not row.strip() or row.startswith("```"):
                break
            if not row.startswith("|"):
                continue
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            rows.append(dict(zip(head, cells, strict=True)))
        out.append((i + 1, rows))
    return out


def num(cell: str) -> int | float | None:
    """A printed number: "-" or "" or "(exact)" is None, "1.83x" 1.83, "**0.964**" 0.964."""
    cell = cell.strip().strip("*").rstrip("x¹")
    if cell in ("", "-", "(exact)"):
        return None
    return int(cell) if re.fullmatch(r"-?\d+", cell) else float(cell)


def text(cell: str) -> str | None:
    return None if cell in ("", "-") else cell


def base(kind: str, recovered_from: str, **fields: Any) -> dict[str, Any]:
    return {"format": FORMAT, "kind": kind, "git": None, "machine": None, "date": None,
            "command": None, "recovered_from": recovered_from, **fields}  # fmt: skip


def widths_records() -> list[dict[str, Any]]:
    """docs/retrieval-widths.md: one table per domain, a record per configuration."""
    report = report_text("retrieval-widths.md")
    heading = re.compile(
        r"### (?P<domain>\S+): (?P<train>\d+) train pairs, (?P<dev>\d+) dev sentences, dev length "
        r"median (?P<median>\d+) tokens \(p10 (?P<p10>\d+), p90 (?P<p90>\d+)\)"
    )
    headings = list(heading.finditer(report))
    found = tables(report, "| method | widths |")
    assert len(headings) == len(found) == 2
    out = []
    for h, (_, rows) in zip(headings, found, strict=True):
        for row in rows:
            out.append(base(
                "retrieval-widths", f"docs/retrieval-widths.md: table '{h['domain']}'",
                command="python -m benchmarks.retrieval_widths --data /root/ragmt/data/en-de",
                domain=h["domain"], method=row["method"], widths=text(row["widths"]),
                corpus=text(row["corpus n-grams"]), k=10, train_pairs=int(h["train"]),
                dev_sentences=int(h["dev"]),
                dev_tokens={"median": int(h["median"]), "p10": int(h["p10"]), "p90": int(h["p90"])},
                items=num(row["items"]), neighbours_per_sentence=num(row["nbrs/sent"]),
                cover2=num(row["cover2"]), best_bleu=num(row["best BLEU"]), hit4=num(row["hit4"]),
                query_ms_per_sentence=num(row["query ms/sent"]), build_seconds=num(row["build s"]),
            ))  # fmt: skip
    return out


RB = "docs/retrieval-benchmarks.md"
SWEEP = re.compile(
    r"^\s*(?:- |recall sweep, )(?P<domain>\S+) w(?P<w>\d+) (?P<index>\S+) (?P<search>\S+): "
    r"recall@10 (?P<recall>[\d.]+), (?P<us>\d+) us/query vector$",
    re.M,
)
SUBSET_COMMAND = (
    "for dom in bible software-docs; do env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python -m "
    "benchmarks.retrieval --data /root/ragmt/data/en-de --stores /tmp/bench/stores-small "
    "--model models/baseline_bundle --domains $dom --limit 5000 --latency-sentences 50 "
    "--batch-sentences 128 --flat-sentences 16 --approx "
    "'HNSW32:efSearch=128;IVF256,PQ64x4fs,RFlat:nprobe=32,k_factor_rf=16' & done; wait"
)
FULL_COMMAND = (
    "python -m benchmarks.retrieval --data /root/ragmt/data/en-de --stores /tmp/stores-full "
    "--model models/baseline_bundle"
)
IDF_COMMAND = (
    "OMP_NUM_THREADS=1 python -m benchmarks.retrieval --data /root/ragmt/data/en-de --stores {} "
    "--domains bible,software-docs --methods idf-sentence,idf-ngram --approx '' "
    "--latency-sentences 300 --batch-sentences 256"
)
DENSE_COMMAND = (
    "OMP_NUM_THREADS=1 python -m benchmarks.retrieval --data /root/ragmt/data/en-de --stores "
    "/tmp/bench/stores-dense6 --model models/baseline_bundle --domains bible --methods "
    "idf-ngram,dense-ngram --approx '{}' --latency-sentences 200 --batch-sentences 256 "
    "--flat-sentences 16"
)


def _store_row(row: dict[str, str]) -> dict[str, Any]:
    """The measured columns of benchmarks/retrieval.py's table, those a table has."""
    names = {"pairs": "pairs", "items": "items", "build s": "build_seconds",
             "pairs/s": "pairs_per_second", "items/s": "items_per_second",
             "disk MiB": "disk_mib", "load s": "load_seconds", "RSS +MiB": "rss_mib",
             "recall@10": "recall_at_10", "b1 p50 ms": "b1_p50_ms", "b1 p95 ms": "b1_p95_ms",
             "b32 ms/sent": "b32_ms_per_sentence", "encode p50 ms": "encode_p50_ms"}  # fmt: skip
    return {field: num(row[col]) if col in row else None for col, field in names.items()}


def _benchmark_table(rows, table, threads, settings, command, date, searches):
    out = []
    for row in rows:
        if row["method"].startswith("ratio "):
            name = row["method"].removeprefix("ratio ").removesuffix(" / idf-ngram").split(" ")
            method, index = name[0], name[1] if len(name) > 1 else None
            match = [r for r in out if (r["domain"], r["method"], r["index"])
                     == (row["domain"], method, index)]  # fmt: skip
            assert len(match) == 1, row
            match[0]["ratio_to_idf_ngram"] = {
                "b1_p50": num(row["b1 p50 ms"]),
                "b32": num(row["b32 ms/sent"]),
            }
            continue
        index = text(row["index"])
        out.append(base(
            "retrieval-benchmark", f"{RB}: table '{table}'", machine=EPYC.format(threads),
            date=date, command=command, settings=settings, domain=row["domain"],
            method=row["method"], index=index, search=searches.get(index),
            **_store_row(row), ratio_to_idf_ngram=None,
        ))  # fmt: skip
    return out


def _sweep(part: str, table: str, threads: int, command: str, date: str | None) -> list[dict]:
    return [
        base(
            "retrieval-recall-sweep",
            f"{RB}: table '{table}'",
            machine=EPYC.format(threads),
            date=date,
            command=command,
            k=10,
            domain=m["domain"],
            width=int(m["w"]),
            index=m["index"],
            search=m["search"],
            recall_at_10=float(m["recall"]),
            us_per_query_vector=int(m["us"]),
        )  # fmt: skip
        for m in SWEEP.finditer(part)
    ]


def _pair(cell: str) -> tuple[float, float, float | None]:
    """ "3.52 → 3.12 (1.13x)" -> (3.52, 3.12, 1.13)."""
    m = re.fullmatch(r"([\d.]+) → ([\d.]+)(?: \(([\d.]+)x\))?", cell)
    return float(m[1]), float(m[2]), float(m[3]) if m[3] else None


def retrieval_records() -> list[dict[str, Any]]:
    """docs/retrieval-benchmarks.md: the store tables, recall sweeps and re-measurements."""
    report = report_text("retrieval-benchmarks.md")
    subset_part, full_part = report.split("## Reading (5,000-pair subsets only)")
    full_part = full_part.split("## IDF n-gram search with exact pruning")[0]
    ((_, subset),) = tables(subset_part, "| domain | method | index |")
    ((_, full),) = tables(full_part, "| domain | method | index |")
    faiss = {"faiss": "1.15.1", "k": 10, "queries": "dev"}
    out = _benchmark_table(
        subset, "first 5,000 pairs", 1,
        {**faiss, "faiss_threads": 1, "limit": 5000, "latency_sentences": 50,
         "batch_sentences": 128, "flat_sentences": 16}, SUBSET_COMMAND, None,
        {"HNSW32": "efSearch=128", "IVF256,PQ64x4fs,RFlat": "nprobe=32,k_factor_rf=16"},
    )  # fmt: skip
    out += _sweep(subset_part, "first 5,000 pairs: recall sweep", 1, SUBSET_COMMAND, None)
    date = "2026-12-01T05:07+00:00"
    out += _benchmark_table(
        full, "full size", 2, {**faiss, "faiss_threads": 2}, FULL_COMMAND, date, {}
    )
    out += _sweep(full_part, "full size: recall sweep", 2, FULL_COMMAND, date)

    ((_, pruned),) = tables(report, "| domain | method | pairs | items |")
    for row in pruned:
        out.append(base(
            "retrieval-benchmark", f"{RB}: table 'exact pruning'",
            command=IDF_COMMAND.format("/tmp/bench/stores-full2"), domain=row["domain"],
            method=row["method"], index=None, search=None, **_store_row(row),
            ratio_to_idf_ngram=None,
        ))  # fmt: skip

    ((_, side),) = tables(report, "| domain | b1 p50 ms old → new |")
    for row in side:
        p50, p95, b32 = (_pair(row[c]) for c in ("b1 p50 ms old → new", "b1 p95 ms", "b32 ms/sent"))
        out.append(base(
            "retrieval-side-by-side", f"{RB}: table 'seeds and batched row search'",
            domain=row["domain"], method="idf-ngram", queries=300,
            old={"b1_p50_ms": p50[0], "b1_p95_ms": p95[0], "b32_ms_per_sentence": b32[0]},
            new={"b1_p50_ms": p50[1], "b1_p95_ms": p95[1], "b32_ms_per_sentence": b32[1]},
            speedup={"b1_p50": p50[2], "b32": b32[2]}, identical=row["identical"],
        ))  # fmt: skip

    ((_, idle),) = tables(report, "| code | bible idf-ngram b1 p50 / p95 ms |")
    for row in idle:
        code, run = re.fullmatch(r"(\S+), run (\d)", row["code"]).groups()
        bible = [float(x) for x in row["bible idf-ngram b1 p50 / p95 ms"].split(" / ")]
        docs = [float(x) for x in row["software-docs b1 p50 / p95 ms"].split(" / ")]
        for domain, (p50, p95), b32 in (("bible", bible, num(row["b32 ms/sent"])),
                                        ("software-docs", docs, None)):  # fmt: skip
            out.append(base(
                "retrieval-benchmark", f"{RB}: table 'idle re-measurement'",
                command=IDF_COMMAND.format("/tmp/bench/stores-full3"),
                code=code, run=int(run), domain=domain, method="idf-ngram", index=None,
                search=None, b1_p50_ms=p50, b1_p95_ms=p95, b32_ms_per_sentence=b32,
            ))  # fmt: skip

    ((_, dense),) = tables(report, "| index (search) |")
    for row in dense:
        m = re.fullmatch(r"(?P<index>\S+)(?: \((?P<search>[^)]*)\))?(?P<note>¹)?",
                         row["index (search)"])  # fmt: skip
        approx = (
            "HNSW32:efSearch=128;IVF1024,PQ64x4fs,RFlat:nprobe=32,k_factor_rf=16"
            if m["note"]
            else "IVF1024,PQ64x4fs,RFlat:nprobe=64,k_factor_rf=16"
        )
        search = m["search"].replace(", ", ",") if m["search"] else None
        out.append(base(
            "retrieval-benchmark", f"{RB}: table 'dense n-gram on bible'",
            command=DENSE_COMMAND.format(approx), domain="bible", method="dense-ngram",
            index=m["index"], search=search, **_store_row(row), ratio_to_idf_ngram=None,
        ))  # fmt: skip
    return out


SB = "docs/service-benchmarks.md"
SERVICE_COMMAND = (
    "python -m benchmarks.service --model models/baseline_bundle --data /root/ragmt/data/en-de"
)


def service_records() -> list[dict[str, Any]]:
    """docs/service-benchmarks.md: each run's cells, activations and memory samples."""
    report = report_text("service-benchmarks.md")
    run2, run1 = report.split("## Run 1:")
    out = []
    for run, part, date in (("run 2", run2, "2026-12-01T04:53+00:00"),
                            ("run 1", run1, "2026-12-01T04:40+00:00")):  # fmt: skip
        common = {"machine": EPYC.format(2), "date": date, "command": SERVICE_COMMAND}
        ((_, cells),) = tables(part, "| retrieval | cache |")
        for row in cells:
            out.append(base(
                "service-benchmark", f"{SB}: table '{run}: cells'", **common,
                retrieval=None if row["retrieval"].startswith("none") else row["retrieval"],
                cache=row["cache"], concurrency=num(row["conc."]), requests=num(row["requests"]),
                requests_per_second=num(row["req/s"]), p50_ms=num(row["p50 ms"]),
                p95_ms=num(row["p95 ms"]), retrieval_p50_ms=num(row["retrieval ms p50"]),
                texts_per_batch=num(row["texts/batch"]),
                rps_vs_no_retrieval=num(row["req/s vs no retrieval"]),
                rps_vs_miss=num(row["req/s vs miss"]),
                rps_vs_concurrency_1=num(row["req/s vs conc. 1"]),
                unexpected=num(row["unexpected"]),
            ))  # fmt: skip
        ((_, acts),) = tables(part, "| version | method |")
        for row in acts:
            out.append(base(
                "service-activation", f"{SB}: table '{run}: activation'", **common,
                version=row["version"], method=row["method"], activations=num(row["activations"]),
                first_server_s=num(row["first s"]), server_p50_s=num(row["server p50 s"]),
                server_p95_s=num(row["server p95 s"]), client_p50_s=num(row["client p50 s"]),
                client_p95_s=num(row["client p95 s"]),
            ))  # fmt: skip
        start = int(re.search(r"VmRSS at start (\d+)", part)[1])
        ((_, memory),) = tables(part, "| after activations |")
        for row in memory:
            out.append(base(
                "service-memory", f"{SB}: table '{run}: memory'", **common,
                after_activations=num(row["after activations"]), vmrss_mib=num(row["VmRSS"]),
                rssanon_mib=num(row["RssAnon"]), rssfile_mib=num(row["RssFile"]),
                vmrss_start_mib=start,
            ))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = ap.parse_args()
    for name, records in (
        ("retrieval-widths", widths_records()),
        ("retrieval-benchmarks", retrieval_records()),
        ("service-benchmarks", service_records()),
    ):
        path = args.out / f"{name}.jsonl"
        if path.exists():
            raise SystemExit(f"{path} exists: this converter runs once")
        for record in records:
            append_record(path, record)
        print(f"{path}: {len(records)} records")


if __name__ == "__main__":
    main()
