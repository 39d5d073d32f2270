"""Live edits of a domain's memory: an append-only, verified log beside its store versions.

A translator's confirmed segment must be retrievable at once, without a rebuild. A store
version stays immutable (verified, versioned, rollback possible); the edits made since live in
``<stores>/<domain>/EDITS.jsonl``, one JSON object a line: its sequence number, the operation
(add, correct or delete a pair), the pair's texts, when and by whom, and the sha256 of the
rest of the line (with a signing key also its HMAC, as for store manifests). Replicas share the
stores directory, so the log is the truth they all read:

- an append holds an exclusive lock on the log, reads what other replicas appended, numbers its
  edit next, writes one line and fsyncs it before it returns;
- a line is read only once complete (a crash mid-append leaves a line without its newline,
  which the next append cuts off); a line whose checksum or signature fails is skipped, named
  in `EditLog.bad_lines`, and never applied;
- a version folded from a base and the log (`fold_pairs`) records ``edits_through``: the
  edits it holds. What a replica serves is a version plus the edits after its
  ``edits_through``, so rolling back to an older version keeps the translators' edits.

Pairs are named by `pair_key`, a hash of their texts, the same in every version.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import threading
import time
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from index_builder.corpus import Pair

EDITS = "EDITS.jsonl"
OPS = ("add", "correct", "delete")
MAX_CHARS = 4_000  # per side of a pair, as for a translation request's text
KEY_CHARS = 16


class EditError(ValueError):
    """An edit that cannot be made (bad text, unknown pair); the message says which."""


def pair_key(source: str, target: str) -> str:
    """A pair's name in every version and in the log: 16 hex digits of sha256 of its texts."""
    digest = hashlib.sha256(f"{source}\x1f{target}".encode()).hexdigest()
    return digest[:KEY_CHARS]


def clean_side(text: object, side: str) -> str:
    """The text of one side of a pair as stored (NFC, trimmed); EditError saying what is wrong."""
    if not isinstance(text, str):
        raise EditError(f"{side}: a string is required")
    text = unicodedata.normalize("NFC", text).strip()
    if not text:
        raise EditError(f"{side}: empty")
    if len(text) > MAX_CHARS:
        raise EditError(f"{side}: {len(text)} characters, at most {MAX_CHARS}")
    bad = next((c for c in text if unicodedata.category(c) == "Cc" and c != "\t"), None)
    if bad is not None:
        raise EditError(f"{side}: control character U+{ord(bad):04X} (one segment, one line)")
    return text


@dataclass(frozen=True)
class Edit:
    """One line of the log. `old_*`: the pair a correction replaced or a deletion removed."""

    seq: int
    op: str
    key: str
    source: str
    target: str
    at: float  # unix time
    by: str | None = None
    old: tuple[str, str] | None = None  # correct: the pair it replaced

    @property
    def old_key(self) -> str | None:
        return pair_key(*self.old) if self.old is not None else None

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq,
            "op": self.op,
            "key": self.key,
            "source": self.source,
            "target": self.target,
            "at": round(self.at, 3),
        }
        if self.by is not None:
            out["by"] = self.by
        if self.old is not None:
            out["old_source"], out["old_target"] = self.old
        return out

    @classmethod
    def of(cls, record: dict[str, Any]) -> Edit:
        op = record.get("op")
        if op not in OPS:
            raise ValueError(f"unknown op {str(op)[:20]!r}")
        seq = record.get("seq")
        if not isinstance(seq, int) or seq < 1:
            raise ValueError("seq must be a positive integer")
        source, target = record.get("source"), record.get("target")
        if not isinstance(source, str) or not isinstance(target, str):
            raise ValueError("source and target must be strings")
        if record.get("key") != pair_key(source, target):
            raise ValueError("key does not name the pair's texts")
        old = None
        if op == "correct":
            old = (record.get("old_source"), record.get("old_target"))
            if not all(isinstance(x, str) for x in old):
                raise ValueError("a correction names the pair it replaces")
        by = record.get("by")
        return cls(seq, op, record["key"], source, target, float(record.get("at", 0.0)), by, old)


def _canonical(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def encode_line(edit: Edit, signing_key: bytes | None) -> bytes:
    record = edit.record()
    body = _canonical(record)
    record["sha256"] = hashlib.sha256(body).hexdigest()
    if signing_key is not None:
        record["hmac"] = hmac.new(signing_key, body, hashlib.sha256).hexdigest()
    return _canonical(record) + b"\n"


def decode_line(line: bytes, signing_key: bytes | None) -> Edit:
    """One complete line back into its edit; ValueError saying why it cannot be trusted."""
    record = json.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    checksum, signature = record.pop("sha256", None), record.pop("hmac", None)
    body = _canonical(record)
    if checksum != hashlib.sha256(body).hexdigest():
        raise ValueError("checksum mismatch")
    if signing_key is not None:
        expected = hmac.new(signing_key, body, hashlib.sha256).hexdigest()
        if not isinstance(signature, str) or not hmac.compare_digest(signature, expected):
            raise ValueError("unsigned or badly signed, and signed edits are required")
    return Edit.of(record)


@dataclass(frozen=True)
class AddedPair:
    """A pair the edits put into the memory, and the edit that did."""

    key: str
    source: str
    target: str
    seq: int
    at: float
    by: str | None


@dataclass(frozen=True)
class EditState:
    """What a run of edits does to a version: pairs added, and base pairs removed (by key,
    with their texts, which is how a version finds them)."""

    through: int  # the last edit applied
    added: tuple[AddedPair, ...] = ()  # in the order they were made
    removed: tuple[tuple[str, str, str], ...] = ()  # (key, source, target)

    @classmethod
    def of(cls, edits: Iterable[Edit], after: int = 0) -> EditState:
        added: dict[str, AddedPair] = {}
        removed: dict[str, tuple[str, str, str]] = {}
        last = after
        for e in edits:
            if e.seq <= after:
                continue
            last = max(last, e.seq)
            if e.op in ("correct", "delete"):
                source, target = e.old if e.old is not None else (e.source, e.target)
                gone = pair_key(source, target)
                added.pop(gone, None)
                # the version may hold the pair too (a corpus that had it): it goes as well
                removed[gone] = (gone, source, target)
            if e.op in ("add", "correct"):
                # A pair removed and added again stays removed from the version and is served
                # as the edit (one copy, with the edit's provenance).
                added.pop(e.key, None)  # re-added: it moves to the end
                added[e.key] = AddedPair(e.key, e.source, e.target, e.seq, e.at, e.by)
        return cls(last, tuple(added.values()), tuple(removed.values()))


@dataclass
class EditLog:
    """A domain's edit log as this process has read it (thread-safe; reads only what is new)."""

    path: Path
    signing_key: bytes | None = None
    edits: list[Edit] = field(default_factory=list)
    bad_lines: list[str] = field(default_factory=list)  # "line N: why"
    _offset: int = 0
    _lines: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def seq(self) -> int:
        return self.edits[-1].seq if self.edits else 0

    def refresh(self) -> bool:
        """Read the lines appended since the last call; True when there were any."""
        with self._lock:
            try:
                with open(self.path, "rb") as f:
                    return self._read_from(f)
            except (FileNotFoundError, NotADirectoryError):
                return False

    def _read_from(self, f: Any) -> bool:
        size = os.fstat(f.fileno()).st_size
        if size < self._offset:  # replaced by a shorter log: read it all again
            self.edits, self.bad_lines, self._offset, self._lines = [], [], 0, 0
        if size == self._offset:
            return False
        f.seek(self._offset)
        chunk = f.read(size - self._offset)
        end = chunk.rfind(b"\n") + 1  # complete lines only
        before = len(self.edits)
        for raw in chunk[:end].splitlines():
            self._lines += 1
            if not raw.strip():
                continue
            try:
                edit = decode_line(raw, self.signing_key)
                if edit.seq <= self.seq:
                    raise ValueError(f"seq {edit.seq} after seq {self.seq}")
            except (ValueError, TypeError, KeyError) as e:
                self.bad_lines = [*self.bad_lines, f"line {self._lines}: {e}"][-20:]
                continue
            self.edits.append(edit)
        self._offset += end
        return len(self.edits) > before

    def append(
        self,
        op: str,
        source: str,
        target: str,
        by: str | None = None,
        old: tuple[str, str] | None = None,
    ) -> Edit:
        """Number and write one edit under the log's file lock (fsynced before returning)."""
        if op not in OPS:
            raise EditError(f"unknown operation {op!r}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            with os.fdopen(fd, "r+b") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                try:
                    self._read_from(f)
                    size = os.fstat(f.fileno()).st_size
                    if size > self._offset:  # a torn line of a crashed append: cut it
                        f.truncate(self._offset)
                    edit = Edit(
                        self.seq + 1, op, pair_key(source, target), source, target,
                        time.time(), by, old if op == "correct" else None,
                    )  # fmt: skip
                    f.seek(self._offset)
                    line = encode_line(edit, self.signing_key)
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                    self._offset += len(line)
                    self._lines += 1
                    self.edits.append(edit)
                finally:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return edit

    def state(self, after: int = 0) -> EditState:
        """The edits after seq `after` (a version's ``edits_through``), folded."""
        with self._lock:
            edits = list(self.edits)
        return EditState.of(edits, after)


def log_path(stores_dir: Path, domain: str) -> Path:
    return Path(stores_dir) / domain / EDITS


def fold_pairs(
    sources: Sequence[str], targets: Sequence[str], state: EditState, origin: str = "edit"
) -> list[Pair]:
    """A version's pairs with `state` applied: removed pairs left out, added pairs last."""
    gone = {(s, t) for _, s, t in state.removed}
    added = {(a.source, a.target) for a in state.added}
    out = [
        Pair(s, t)
        for s, t in zip(sources, targets, strict=True)
        if (s, t) not in gone and (s, t) not in added
    ]
    out += [Pair(a.source, a.target, origin=origin) for a in state.added]
    return out
