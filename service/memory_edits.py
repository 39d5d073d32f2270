"""Live edits of a domain's memory on a running service (`index_builder.edits` is the format).

An edit is appended to the domain's log on the shared stores directory, applied to this
replica's active version before the request returns (the next translation retrieves it), and
signalled through the shared registry, on which every other replica re-reads the log and
applies it too; the periodic reconcile does the same, so a lost signal costs seconds, not the
edit. A version and the edits after its ``edits_through`` form what a replica serves; the
retriever over both (`EditedRetriever`) is built in a worker thread and swapped in whole, so a
request sees one state of the memory from admission to its last decoding step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from index_builder.edits import Edit, EditError, EditLog, clean_side, log_path, pair_key
from index_builder.retrieval.overlay import (
    DenseCache,
    EditedRetriever,
    rows_of,
    scores_added,
)
from service.errors import Conflict, InvalidInput, NotFound

if TYPE_CHECKING:
    from service.domains import LoadedStore

log = logging.getLogger("ragmt.service")

EDITS_THROUGH = "edits_through"  # manifest key of a folded version: the edits it holds


def through_of(manifest: dict[str, Any]) -> int:
    value = manifest.get(EDITS_THROUGH, 0)
    return value if isinstance(value, int) and value >= 0 else 0


class MemoryEdits:
    """The edit logs of every domain this replica serves, and their overlays."""

    def __init__(self, stores_dir: Path, signing_key: bytes | None = None) -> None:
        self.stores_dir = Path(stores_dir)
        self.signing_key = signing_key
        self._logs: dict[str, EditLog] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._dense_cache: dict[str, DenseCache] = {}  # added pairs' vectors, per domain

    def log(self, domain: str) -> EditLog:
        with self._guard:
            if domain not in self._logs:
                self._logs[domain] = EditLog(log_path(self.stores_dir, domain), self.signing_key)
                self._locks[domain] = threading.Lock()
            return self._logs[domain]

    # --- applying ---------------------------------------------------------------------------

    def apply(self, loaded: LoadedStore) -> None:
        """Read the domain's log and give `loaded` the retriever over it and the edits after
        its ``edits_through`` (blocking: a worker thread). Nothing to do when it is current."""
        log_ = self.log(loaded.domain)
        log_.refresh()
        with self._locks[loaded.domain]:
            if loaded.retriever is None or loaded.overlay[1] == log_.seq:
                return
            state = log_.state(after=through_of(loaded.manifest))
            if not state.added and not state.removed:
                loaded.overlay = (None, log_.seq)
                return
            removed = frozenset(i for k, _, _ in state.removed for i in self._rows(loaded, k))
            cache = self._dense_cache.setdefault(loaded.domain, {})
            edited = EditedRetriever(loaded.retriever, state, removed, cache)
            loaded.overlay = (edited, log_.seq)

    def _rows(self, loaded: LoadedStore, key: str) -> frozenset[int]:
        """The version's rows of a pair that edits removed, found once per version (the
        version never changes): a new removal scans it, the earlier ones are remembered."""
        rows = loaded.removed_rows
        if key not in rows:
            state = self.log(loaded.domain).state(after=through_of(loaded.manifest))
            todo = [r for r in state.removed if r[0] not in rows]
            assert loaded.store is not None
            rows.update(rows_of(loaded.store.pairs, todo))
        return rows.get(key, frozenset())

    async def refresh(self, loaded: LoadedStore | None) -> None:
        if loaded is not None and not loaded.closed:
            await anyio.to_thread.run_sync(self.apply, loaded)

    # --- editing ----------------------------------------------------------------------------

    def _holds(self, loaded: LoadedStore, source: str, target: str) -> bool:
        """Whether the memory served (version plus edits) holds the pair."""
        edited = loaded.overlay[0]
        if isinstance(edited, EditedRetriever):
            key = pair_key(source, target)
            if any(a.key == key for a in edited.added):
                return True
            if any(k == key for k, _, _ in edited.state.removed):
                return False
        assert loaded.store is not None
        key = pair_key(source, target)
        found = rows_of(loaded.store.pairs, [(key, source, target)])[key]
        loaded.removed_rows[key] = found  # about to be removed: the next overlay reuses it
        return bool(found)

    def write(
        self,
        loaded: LoadedStore,
        op: str,
        source: str,
        target: str,
        old: tuple[str, str] | None = None,
        by: str | None = None,
    ) -> Edit:
        """Check, append and apply one edit here (blocking). The memory must hold the pair a
        correction or deletion names; an addition of a pair it holds changes nothing."""
        try:
            source, target = clean_side(source, "source"), clean_side(target, "target")
            if old is not None:
                old = (clean_side(old[0], "old source"), clean_side(old[1], "old target"))
        except EditError as e:
            raise InvalidInput(str(e)) from None
        if op in ("add", "correct") and loaded.retriever is not None:
            if not scores_added(loaded.retriever):
                raise Conflict(
                    f"domain {loaded.domain}'s version {loaded.version} is a "
                    f"{loaded.manifest.get('method')} store, which takes no live additions "
                    "(upload a corpus to rebuild it)"
                )
        self.apply(loaded)  # the newest state, so the checks below see other replicas' edits
        gone = old if op == "correct" else (source, target) if op == "delete" else None
        if gone is not None and not self._holds(loaded, *gone):
            raise NotFound(
                f"domain {loaded.domain}'s memory holds no such pair", code="unknown_pair"
            )
        try:
            edit = self.log(loaded.domain).append(op, source, target, by, old)
        except EditError as e:
            raise InvalidInput(str(e)) from None
        self.apply(loaded)
        log.info("domain %s: edit %d (%s %s)", loaded.domain, edit.seq, op, edit.key)
        return edit

    def find(self, domain: str, key: str) -> tuple[str, str] | None:
        """The texts of the pair named `key` when an edit of the log names it."""
        for e in reversed(self.log(domain).edits):
            if e.key == key:
                return e.source, e.target
            if e.old is not None and e.old_key == key:
                return e.old
        return None

    def texts_of(self, loaded: LoadedStore, key: str) -> tuple[str, str] | None:
        """The texts of the pair named `key`: an edit's, else a row of the version (a scan:
        blocking, tenths of a second for 100,000 pairs)."""
        found = self.find(loaded.domain, key)
        if found is not None:
            return found
        assert loaded.store is not None
        pairs = loaded.store.pairs
        for i in range(len(pairs)):
            source, target = pairs.sources[i], pairs.targets[i]
            if pair_key(source, target) == key:
                return source, target
        return None

    def edit_of(self, domain: str, seq: int) -> Edit | None:
        """The edit numbered `seq` (provenance of a neighbour an edit added)."""
        edits = self.log(domain).edits
        i = seq - 1
        if 0 <= i < len(edits) and edits[i].seq == seq:
            return edits[i]
        return next((e for e in edits if e.seq == seq), None)

    def info(self, domain: str, loaded: LoadedStore | None) -> dict[str, Any]:
        """What GET /v1/domains/{domain} says of the live edits."""
        log_ = self.log(domain)
        base = through_of(loaded.manifest) if loaded is not None else 0
        state = log_.state(after=base)
        last = log_.edits[-1].at if log_.edits else None
        return {
            "seq": log_.seq,
            "folded_through": base,
            "pending": max(0, log_.seq - base),
            "added": len(state.added),
            "removed": len(state.removed),
            "last_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last)) if last else None,
            "bad_lines": list(log_.bad_lines),
        }


# --- folding -------------------------------------------------------------------------------

FOLD_POLL_S = 0.5
FOLD_WAIT_S = 3600.0


def fold_spec(loaded: LoadedStore, through: int) -> tuple[dict[str, Any], str]:
    """The worker job that folds the edits up to `through` into a new version of `loaded`'s
    (method, parameters and languages its own), and its dedup key: replicas asking for the
    same fold get the same job."""
    m = loaded.manifest
    langs = m.get("languages") or {}
    spec = {
        "domain": loaded.domain,
        "method": m.get("method"),
        "params": m.get("params") or {},
        "format": "fold",
        "files": [],
        "base": loaded.version,
        "through": through,
        "source_lang": langs.get("source"),
        "target_lang": langs.get("target"),
    }
    return spec, f"{loaded.domain}:fold:{loaded.version}:{through}"


async def activate_when_built(manager: Any, jobs: Any, job_id: str, domain: str, base: str) -> None:
    """Activate a fold's version once its job is done, if the domain still serves `base` (an
    operator's activation meanwhile wins); gives up on failure or after FOLD_WAIT_S."""
    waited = 0.0
    while waited < FOLD_WAIT_S:
        job = await jobs.get(job_id)
        if job is None or job.state == "failed":
            log.warning("fold of %s (job %s) did not build: %s", domain, job_id,
                        job.error if job else "job gone")  # fmt: skip
            return
        if job.state == "done":
            active = manager.state(domain).active
            version = job.result.get("version")
            if active is None or active.version != base or not isinstance(version, str):
                return
            await manager.activate(domain, version)
            log.info("domain %s: edits folded into %s, now active", domain, version)
            return
        await asyncio.sleep(FOLD_POLL_S)
        waited += FOLD_POLL_S
