"""Results files: one self-describing JSON record per line, appended atomically.

A record says what produced a score (system label, bundle hash and architecture, decoding
options, store, data and test-file hashes, git commit) next to the score itself (BLEU, chrF,
their sacreBLEU signatures, sentences, mean gate, timings), so that a number in a report can be
traced without knowing how a file was named. `ragmt eval --results FILE` appends them and
`ragmt report` (`models.report`) builds tables from them.

Each record is written with one `write` of a whole line and fsynced, so a crash leaves at most
one torn last line; `append_record` and `read_records` refuse such a file instead of appending
after it or guessing what it said.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from models.artifacts import sha256_file

FORMAT = "ragmt-result/1"


class ResultsError(ValueError):
    """A results file cannot be read or appended to: torn last line, bad JSON, wrong format."""


def git_state(where: Path | None = None) -> dict[str, Any] | None:
    """The checkout's commit and whether tracked files differ from it; None outside git."""
    cwd = Path(where) if where is not None else Path(__file__).resolve().parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def store_info(version_dir: Path, label: str | None = None) -> dict[str, Any]:
    """What a record says of a store version directory: domain, method, version, manifest hash.

    `label` names the family of stores (e.g. the stores directory, "dense-own-r95") that a
    report tells apart where method alone does not (dense stores of two encoders).
    """
    manifest_file = Path(version_dir) / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    return {
        "domain": manifest.get("domain"),
        "method": manifest.get("method"),
        "version": manifest.get("version"),
        "manifest_sha256": sha256_file(manifest_file),
        "encoder_sha256": manifest.get("model_sha256"),
        "label": label,
    }


def data_info(data_dir: Path, domain: str, split: str, src: str, tgt: str) -> dict[str, Any]:
    """The prepared data a score was measured on: the manifest's and the split files' sha256."""
    root = Path(data_dir)
    manifest = root / "manifest.json"
    return {
        "dir": str(root),
        "manifest_sha256": sha256_file(manifest) if manifest.is_file() else None,
        "source_sha256": sha256_file(root / domain / f"{split}.{src}"),
        "reference_sha256": sha256_file(root / domain / f"{split}.{tgt}"),
    }


def eval_record(
    result: Mapping[str, Any],
    *,
    system: str,
    domain: str,
    split: str,
    bundle: Mapping[str, Any],
    decoding: Mapping[str, Any],
    store: Mapping[str, Any] | None,
    languages: tuple[str, str] | None = None,
    data: Mapping[str, Any] | None,
    git: Mapping[str, Any] | None,
    date: str | None = None,
) -> dict[str, Any]:
    """One record from one domain's entry of `models.evaluate.evaluate`'s result.

    `bundle`: path, sha256 (`bundle_sha256`) and architecture; `decoding`: beam, length_penalty,
    split_sentences, batch_size, neighbours_k (None without retrieval).
    """
    return {
        "format": FORMAT,
        "kind": "eval",
        "system": system,
        "domain": domain,
        "split": split,
        # the pair scored: a model may serve several (a many-to-English byte model)
        "languages": {"source": languages[0], "target": languages[1]} if languages else None,
        "bundle": dict(bundle),
        "decoding": dict(decoding),
        "store": dict(store) if store is not None else None,
        "data": dict(data) if data is not None else None,
        "git": dict(git) if git is not None else None,
        "signatures": {"bleu": result["bleu_signature"], "chrf": result["chrf_signature"]},
        "bleu": result["bleu"],
        "chrf": result["chrf"],
        "sentences": result["sentences"],
        "segments": result.get("segments"),
        "gate_mean": result.get("gate_mean"),
        "neighbours_per_sentence": result.get("neighbours_per_sentence"),
        "checks": result.get("checks"),  # loops and implausible lengths (models.output_checks)
        "timings": {
            "seconds": result.get("seconds"),
            "retrieval_seconds": result.get("retrieval_seconds"),
        },
        "date": date or datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "recovered_from": None,
    }


def eval_records(
    results: Mapping[str, Mapping[str, Any]],
    *,
    system: str,
    split: str,
    bundle: Mapping[str, Any],
    decoding: Mapping[str, Any],
    store_dirs: Mapping[str, Path],
    store_label: str | None,
    data_dir: Path,
    languages: tuple[str, str],
    git: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One record per domain of an `evaluate` result; `store_dirs`: each domain's store version
    directory where it retrieved (a domain absent from it read no store). `git`: the checkout's
    state when the evaluation started (`git_state()`; read now when not given) — a commit made
    while it ran did not produce its numbers."""
    git = git if git is not None else git_state()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return [
        eval_record(
            result,
            system=system,
            domain=domain,
            split=split,
            bundle=bundle,
            decoding=decoding,
            store=store_info(store_dirs[domain], store_label) if domain in store_dirs else None,
            data=data_info(data_dir, domain, split, *languages),
            languages=languages,
            git=git,
            date=date,
        )
        for domain, result in results.items()
    ]


def _check_tail(path: Path) -> None:
    """Refuse a file whose last line is torn (no final newline), naming the file and line."""
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb") as f:
        f.seek(size - 1)
        if f.read(1) != b"\n":
            lines = path.read_bytes().count(b"\n") + 1
            raise ResultsError(
                f"{path}: line {lines} is torn (no final newline; an interrupted append?): "
                "repair or remove that line before appending or reading"
            )


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """Append `record` as one JSON line with a single write, then fsync the file."""
    path = Path(path)
    if path.exists():
        _check_tail(path)
    line = (json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
        if written != len(line):  # a full disk: do not leave a torn line unreported
            raise ResultsError(f"{path}: wrote {written} of {len(line)} bytes of a record")
        os.fsync(fd)
    finally:
        os.close(fd)


def append_new_records(path: Path, records: list[Mapping[str, Any]]) -> int:
    """Append those of `records` that the file does not hold yet (compared without their git
    state), each stamped with the checkout's state read once before the first append makes it
    dirty; a script may so run again after every step. Returns how many were appended."""
    path = Path(path)

    def strip(r: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k != "git"}

    have = [strip(r) for r in read_records(path)] if path.exists() else []
    git = git_state()
    added = 0
    for record in records:
        if strip(record) not in have:
            append_record(path, {**record, "git": git})
            have.append(strip(record))
            added += 1
    return added


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of a results file, in order; ResultsError naming a bad line."""
    path = Path(path)
    _check_tail(path)
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}:{i}: not JSON ({e.msg})") from None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            raise ResultsError(f"{path}:{i}: not a {FORMAT} record")
        out.append(record)
    return out
