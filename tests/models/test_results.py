"""Results files: self-describing records, one atomic line each, torn files refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from models.results import (
    FORMAT,
    ResultsError,
    append_new_records,
    append_record,
    eval_record,
    eval_records,
    git_state,
    read_records,
)

pytestmark = pytest.mark.unit

SCORES = {
    "bleu": 41.2,
    "chrf": 62.07,
    "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
    "sentences": 1000,
    "seconds": 14.9,
    "retrieval_seconds": 0.3,
    "gate_mean": 0.5203,
}


def _record(bleu: float = 41.2) -> dict:
    return eval_record(
        {**SCORES, "bleu": bleu},
        system="run12",
        domain="medical",
        split="test",
        bundle={"path": "b", "sha256": "ab" * 32, "architecture": "semiparametric"},
        decoding={
            "beam": 4,
            "length_penalty": 2.0,
            "split_sentences": True,
            "batch_size": 32,
            "neighbours_k": 5,
        },  # fmt: skip
        store=None,
        data=None,
        git={"commit": "c" * 40, "dirty": False},
        date="2026-12-03T00:00:00+00:00",
    )


def test_a_record_carries_scores_signatures_and_settings() -> None:
    r = _record()
    assert r["format"] == FORMAT and r["kind"] == "eval"
    assert (r["bleu"], r["chrf"], r["sentences"], r["gate_mean"]) == (41.2, 62.07, 1000, 0.5203)
    assert r["signatures"]["bleu"].startswith("nrefs:1|case:mixed|eff:no")
    assert r["timings"] == {"seconds": 14.9, "retrieval_seconds": 0.3}
    assert r["decoding"]["length_penalty"] == 2.0 and r["store"] is None
    assert r["recovered_from"] is None


def test_append_writes_one_line_per_record_with_one_write_and_an_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sub" / "results.jsonl"
    writes, syncs = [], []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, b: writes.append(b) or real_write(fd, b))
    monkeypatch.setattr(os, "fsync", lambda fd: syncs.append(fd) or real_fsync(fd))
    append_record(path, _record(1.0))
    append_record(path, _record(2.0))
    assert len(writes) == 2 and len(syncs) == 2
    assert all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in writes)
    assert [r["bleu"] for r in read_records(path)] == [1.0, 2.0]
    assert [json.loads(x)["bleu"] for x in path.read_text().splitlines()] == [1.0, 2.0]


def test_new_records_are_appended_once_whatever_their_git_state(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    one, two = {"format": FORMAT, "kind": "x", "v": 1}, {"format": FORMAT, "kind": "x", "v": 2}
    assert append_new_records(path, [one, one]) == 1
    assert append_new_records(path, [{**one, "git": {"commit": "0" * 40}}, two]) == 1
    records = read_records(path)
    assert [r["v"] for r in records] == [1, 2]
    assert all("git" in r for r in records)


def test_a_torn_last_line_is_refused_for_appending_and_reading(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_record(path, _record())
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 2])  # an append cut short
    with pytest.raises(ResultsError, match="line 2 is torn"):
        append_record(path, _record())
    with pytest.raises(ResultsError, match="torn"):
        read_records(path)
    assert path.read_bytes() == whole + whole[: len(whole) // 2]  # nothing appended after it


def test_a_line_of_another_format_is_named(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_record(path, _record())
    with open(path, "a") as f:
        f.write('{"bleu": 3}\n')
    with pytest.raises(ResultsError, match=r"results.jsonl:2: not a ragmt-result/1 record"):
        read_records(path)


def test_git_state_is_none_outside_a_checkout_and_tells_a_dirty_tree(tmp_path: Path) -> None:
    assert git_state(tmp_path) is None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    for cmd in (["init", "-q"], ["add", "f"], ["commit", "-q", "-m", "x"]):
        if cmd[0] == "add":
            (tmp_path / "f").write_text("a")
        subprocess.run(["git", *cmd], cwd=tmp_path, check=True, env=env)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    assert git_state(tmp_path) == {"commit": head, "dirty": False}
    (tmp_path / "f").write_text("b")
    assert git_state(tmp_path) == {"commit": head, "dirty": True}


def test_records_name_the_commit_the_evaluation_started_at(tmp_path: Path) -> None:
    """A commit made while an evaluation runs did not produce its numbers: the state read
    at the start is the one recorded."""
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    for lang in ("en", "de"):
        (data / "toy" / f"test.{lang}").write_text("one\n", encoding="utf-8")
    started = {"commit": "a" * 40, "dirty": True}
    (record,) = eval_records(
        {"toy": SCORES},
        system="s",
        split="test",
        bundle={"path": "b", "sha256": None, "architecture": "transformer"},
        decoding={"beam": 4},
        store_dirs={},
        store_label=None,
        data_dir=data,
        languages=("en", "de"),
        git=started,
    )
    assert record["git"] == started and record["data"]["manifest_sha256"] is None
