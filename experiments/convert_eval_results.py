"""One-off: the raw per-run JSON of docs/semiparametric-eval/ as `models.results` records.

Those files kept their settings only in their names (`cstm-run12-l4+dense-own-r95-split-lp2.0-
store-medical-on-bible.json`). This reads each name's parts (system, run, checkpoint averaging,
store family and method, k, sentence splitting, length penalty, mismatched store, split) and
each file's scores into records; what neither says (bundle hash, data hashes, the commit that
produced it, the date, the batch size) is null, and `recovered_from` names the old file. It
also turns the decoding benchmark outputs that the reports cite (`memory_decode-*-session18-*`)
into "memory-decode" records.

    python experiments/convert_eval_results.py --eval docs/semiparametric-eval \
      --baseline docs/baseline-en-de-eval.json --out experiments/results/semiparametric-en-de.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from models.results import FORMAT, append_record

EVAL_K = 5  # the experiment script's neighbours per sentence; a name's -kN overrides it
NAME = re.compile(
    r"""^(?P<system>[^+]+?)                     # everything before '+'
        (?:\+(?P<store>.+?))?                  # store family: idf-ngram, dense-own-r95, ...
        (?:-k(?P<k>\d+))?(?:-np(?P<np>\d+))?
        (?P<split>-split)?(?:-lp(?P<lp>[0-9.]+?))?
        (?:-store-(?P<wrong>.+)-on-(?P<on>.+?))?
        (?:-(?P<kdomain>bible|medical|software-docs))?
        (?P<dev>-dev)?$""",
    re.X,
)


def parse_name(stem: str) -> dict[str, Any]:
    """What an old result file's name says about the run that wrote it."""
    if "+" not in stem:  # baseline[-split][-lpP][-dev], ft-baseline-D[-split-lpP], ft-cstm-D
        m = re.fullmatch(
            r"(?P<system>.+?)(?P<split>-split)?(?:-lp(?P<lp>[0-9.]+))?(?P<dev>-dev)?", stem
        )
        parts = {**m.groupdict(), "store": None, "k": None, "np": None, "wrong": None}
    else:
        m = NAME.match(stem)
        if m is None:
            raise ValueError(f"cannot read the name {stem!r}")
        parts = m.groupdict()
        if parts["store"] == "no-store":
            parts["store"] = None
        elif parts["np"]:
            parts["store"] += f"-np{parts['np']}"
    system = parts["system"]
    run = re.search(r"run(\d+b?)", system) or re.search(r"cstm(\d+b?)", system)
    if system.startswith("cstm-idf-ngram") or system.startswith("ft-cstm-"):
        run_name = "run2"  # session 6: the bundle of 018d407
    else:
        run_name = f"run{run.group(1)}" if run else None
    return {
        "system": system,
        "run": run_name,
        "averaging": "last 4 checkpoints" if system.endswith("-l4") else None,
        "store_label": parts["store"],
        "k": int(parts["k"]) if parts.get("k") else (EVAL_K if parts["store"] else None),
        "split_sentences": bool(parts["split"]),
        "length_penalty": float(parts["lp"]) if parts["lp"] else 1.0,
        "split": "dev" if parts["dev"] else "test",
        "mismatch_store": parts["wrong"],
    }


def _method(label: str) -> str:
    if label.startswith("merged-dense-idf"):
        return "dense-ngram+idf-ngram"
    for m in ("idf-sentence", "idf-ngram"):
        if label.startswith(m):
            return m
    if label.startswith("dense"):
        return "dense-ngram"
    raise ValueError(f"unknown store family {label!r}")


def _architecture(system: str) -> str:
    return "transformer" if system.startswith(("baseline", "ft-baseline")) else "semiparametric"


def committed_in(path: Path) -> str | None:
    """The commit that added the file: when it was reported, not what produced it."""
    out = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", str(path.resolve())],
        capture_output=True,
        text=True,
        cwd=path.parent,
    ).stdout.split()
    return out[-1] if out else None


def eval_records(path: Path, stem: str | None = None) -> list[dict[str, Any]]:
    """The records of one old file; `stem`: the name to read, if not the file's own."""
    name = parse_name(stem or path.name.removesuffix(".json"))
    commit = committed_in(path)
    records = []
    for domain, r in json.loads(path.read_text(encoding="utf-8")).items():
        store = None
        if name["store_label"] is None and "store" in r:
            if not name["system"].startswith("ft-cstm"):
                raise ValueError(f"{path.name}: a store, but its name says none")
            name["store_label"] = "idf-ngram"  # the script's TRAIN_METHOD stores
            name["k"] = EVAL_K
        if name["store_label"] is not None:
            label = r["store"]
            store_domain = label.split("@")[0]
            version = " + ".join(s.split("@", 1)[1] for s in label.split(" + "))
            store = {
                "domain": store_domain,
                "method": _method(name["store_label"]),
                "version": version,
                "manifest_sha256": None,
                "encoder_sha256": None,
                "label": name["store_label"],
            }
            if name["mismatch_store"] not in (None, store_domain):
                raise ValueError(f"{path.name}: name says store {name['mismatch_store']}")
        records.append(
            {
                "format": FORMAT,
                "kind": "eval",
                "system": name["system"],
                "domain": domain,
                "split": name["split"],
                "bundle": {
                    "path": None,
                    "sha256": None,
                    "architecture": _architecture(name["system"]),
                },
                "decoding": {
                    "beam": 4,
                    "length_penalty": name["length_penalty"],
                    "split_sentences": name["split_sentences"],
                    "batch_size": None,
                    "neighbours_k": name["k"],
                },
                "store": store,
                "data": None,
                "git": None,
                "signatures": {"bleu": r["bleu_signature"], "chrf": r["chrf_signature"]},
                "bleu": r["bleu"],
                "chrf": r["chrf"],
                "sentences": r["sentences"],
                "segments": r.get("segments"),
                "gate_mean": r.get("gate_mean"),
                "neighbours_per_sentence": r.get("neighbours_per_sentence"),
                "timings": {
                    "seconds": r.get("seconds"),
                    "retrieval_seconds": r.get("retrieval_seconds"),
                },
                "date": None,
                "recovered_from": path.name,
                "recovered": {
                    "run": name["run"],
                    "averaging": name["averaging"],
                    "committed_in": commit,
                    "rescored_from_hyps": bool(r.get("rescored_from_hyps")),
                },
            }
        )
    return records


RATIO = re.compile(
    r"ratio (?P<path>.+?) / baseline: batch-1 p50 (?P<p50>[0-9.]+)x, p95 (?P<p95>[0-9.]+)x"
)
BATCH = re.compile(r"ratio batch-32 time: (?P<b32>[0-9.]+)x")
HEADER_STORE = re.compile(
    r"store \S*/stores/(?P<label>[^/]+)/(?P<domain>[^/]+)/(?P<version>\S+) \((?P<method>[^)]+)\)"
)


def decode_records(path: Path, system: str) -> list[dict[str, Any]]:
    """One record per measured path of a `benchmarks.memory_decode` output."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[1]
    store = HEADER_STORE.search(header).groupdict()
    lp = re.search(r"length penalty ([0-9.]+)", header)
    commit = committed_in(path)
    out = []
    for i, line in enumerate(lines):
        m = RATIO.match(line)
        if not m or m["path"].startswith("memory model decoding"):
            continue
        b32 = BATCH.match(lines[i + 1])
        out.append(
            {
                "format": FORMAT,
                "kind": "memory-decode",
                "system": system,
                "domain": store["domain"],
                "split": "test",
                "machine": lines[0].removeprefix("machine: ").split(";")[0],
                "path": m["path"],
                "decoding": {
                    "beam": 4,
                    "length_penalty": float(lp.group(1)) if lp else 1.0,
                    "split_sentences": "sentences split (both)" in header,
                    "neighbours_k": int(re.search(r"k=(\d+)", header).group(1)),
                },
                "store": {
                    "domain": store["domain"],
                    "method": store["method"],
                    "version": store["version"],
                    "label": store["label"],
                },
                "p50_ratio": float(m["p50"]),
                "p95_ratio": float(m["p95"]),
                "batch32_time_ratio": float(b32["b32"]),
                "git": None,
                "date": None,
                "recovered_from": path.name,
                "recovered": {"committed_in": commit},
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval", type=Path, required=True, help="folder of the old JSON files")
    ap.add_argument("--baseline", type=Path, required=True, help="the baseline's first eval JSON")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--decode-out", type=Path, required=True)
    ap.add_argument(
        "--decode-system", default="cstm-run12-l4", help="bundle benchmarked in -session18-"
    )
    args = ap.parse_args()
    for out in (args.out, args.decode_out):
        if out.exists():
            raise SystemExit(f"{out} exists: this conversion is done once")
    records = eval_records(args.baseline, "baseline")
    for path in sorted(args.eval.glob("*.json")):
        if path.name == "baseline.json":  # a copy of --baseline
            if json.loads(path.read_text()) != json.loads(args.baseline.read_text()):
                raise SystemExit(f"{path} differs from {args.baseline}")
            continue
        records += eval_records(path)
    for r in records:
        append_record(args.out, r)
    decode = []
    for path in sorted(args.eval.glob("memory_decode-*-session18-*.txt")):
        decode += decode_records(path, args.decode_system)
    for r in decode:
        append_record(args.decode_out, r)
    print(f"{len(records)} eval records -> {args.out}; {len(decode)} decode -> {args.decode_out}")


if __name__ == "__main__":
    main()
