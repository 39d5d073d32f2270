"""File translation jobs: a PO or XLIFF file translated in the background, on the replica that
accepted it, through the one engine call that translates.

A job translates its file's distinct lines (`Document.texts`) a chunk at a time through
`TranslationEngine.translate_batch`, one chunk in flight, and holds its next chunk back while
others' requests wait in the decoding queue: an interactive request waits for at most the
chunk being decoded, not behind the whole file, and a full queue makes the job wait, never
refuses others. Its state is kept in memory and written
to `<stores_dir>/.files/<id>/state.json` (atomically) after every chunk, so every replica
reads its progress; the translated file is written (fsynced, renamed into place) before the
state says done, so no reader ever gets half a file. A job whose replica stops reads failed:
on shutdown it is marked so at once, after a crash once its state is `STALE_S` old. Jobs are
removed `file_ttl_s` after they finish.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import anyio.to_thread

from models.segment import split_sentences
from service.documents import Document, DocumentError
from service.engine import BatchResult, TranslationEngine, TranslationRequest
from service.errors import NotReady, Overloaded, ServiceError

log = logging.getLogger("ragmt.service")

__all__ = ["FILES_DIR", "JOB_ID", "FileJob", "FileJobs"]

FILES_DIR = ".files"
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
CHUNK = 8  # texts per engine call: short enough that a request arriving meanwhile waits little
YIELD_S = 2.0  # how long a chunk waits, at most, for others' queued requests to be decoded
STALE_S = 600.0  # an unfinished job not updated this long: its replica stopped
HEARTBEAT_S = 60.0  # a queued job rewrites its state this often, so it never looks stale
FINISHED = ("done", "failed")


@dataclass
class FileJob:
    """A file translation job's state, as `state.json` holds it (`owner` never leaves it)."""

    id: str
    owner: str  # who may read it: the hashed identity of the key that sent it
    name: str  # the uploaded file's name, for the download (never a path here)
    format: str  # po, xliff-1.2, xliff-2.0
    media_type: str  # of the download
    domain: str
    source_lang: str
    target_lang: str
    model: str | None
    fuzzy: bool
    needs_review: bool
    units: int  # translatable units of the file
    untranslated: int  # of them, the units to fill
    texts: int  # distinct lines to translate for them
    state: str = "queued"
    done: int = 0  # lines translated
    translated: int = 0  # untranslated units whose lines are all translated
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    parse_s: float = 0.0
    translate_s: float | None = None  # from the first chunk to the written result
    models: list[str] = field(default_factory=list)
    store_versions: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileJob:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _write_json(path: Path, data: dict[str, Any], sync: bool = False) -> None:
    """Write `data` to `path` through a temporary file and a rename: readers see whole files."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".state-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".result-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def fit(text: str, max_chars: int, lang: str) -> list[str]:
    """`text` as pieces of at most `max_chars` characters (the engine's limit): its
    sentences, grouped; a sentence still too long is cut at spaces (or anywhere)."""
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    for sentence in split_sentences(text, lang):
        while len(sentence) > max_chars:
            cut = sentence.rfind(" ", 0, max_chars + 1)
            cut = cut if cut > 0 else max_chars
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if pieces and len(pieces[-1]) + 1 + len(sentence) <= max_chars:
            pieces[-1] += " " + sentence
        elif sentence:
            pieces.append(sentence)
    return pieces


@dataclass
class _Plan:
    """What a job sends to the engine: distinct `pieces`, and for each line of the file its
    pieces (`of_text`); `text_done[k]`/`unit_done[k]`: sorted, how many pieces must be
    translated before k lines / k units are."""

    pieces: list[str]
    of_text: list[list[int]]
    text_done: list[int]
    unit_done: list[int]

    @classmethod
    def of(cls, doc: Document, texts: list[str], max_chars: int, lang: str) -> _Plan:
        index: dict[str, int] = {}
        of_text = []
        for text in texts:
            of_text.append([index.setdefault(p, len(index)) for p in fit(text, max_chars, lang)])
        last = {t: max(ids) + 1 for t, ids in zip(texts, of_text, strict=True)}
        unit_done = []
        for unit in doc.todo:
            needs = [last[p] for c in unit.coded for p, tr in c.chunks() if tr]
            unit_done.append(max(needs, default=0))
        return cls(list(index), of_text, sorted(last.values()), sorted(unit_done))


class FileJobs:
    """This replica's file jobs, and the reading of every replica's from the shared disk."""

    def __init__(
        self,
        root: Path,
        engine: TranslationEngine,
        at_once: int,
        max_jobs: int,
        ttl_s: float,
        on_task: Callable[[asyncio.Task[None]], None] = lambda task: None,
        draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.root = root
        self.engine = engine
        self.max_jobs = max_jobs
        self.ttl_s = ttl_s
        self.on_task = on_task  # the app keeps the task, to cancel it on shutdown
        self.draining = draining  # the server is stopping: jobs end at their next chunk
        self.jobs: dict[str, FileJob] = {}
        self._at_once = at_once
        self._slots: asyncio.Semaphore | None = None

    def path(self, job_id: str) -> Path:
        assert JOB_ID.fullmatch(job_id), "job ids are checked before they become paths"
        return self.root / job_id

    def result_path(self, job_id: str) -> Path:
        return self.path(job_id) / "result"

    @property
    def active(self) -> int:
        return sum(1 for j in self.jobs.values() if j.state not in FINISHED)

    async def submit(self, doc: Document, job: FileJob) -> FileJob:
        """Record `job` and start translating `doc` for it; Overloaded when this replica
        already has `max_jobs` unfinished."""
        await anyio.to_thread.run_sync(self.sweep)
        if self.active >= self.max_jobs:
            raise Overloaded(
                f"{self.active} file jobs are unfinished on this replica (max_file_jobs="
                f"{self.max_jobs}); retry later",
                retry_after_s=10,
                limit="max_file_jobs",
                max=self.max_jobs,
            )
        await anyio.to_thread.run_sync(self.path(job.id).mkdir, 0o755, True)
        self.jobs[job.id] = job
        await self._save(job)
        task = asyncio.create_task(self._run(job, doc), name=f"file-job-{job.id}")
        self.on_task(task)
        return job

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(16)

    async def get(self, job_id: str) -> FileJob | None:
        """The job as this replica knows it, else as the shared disk does (a job whose state
        has not moved for `STALE_S` reads failed: the replica running it stopped)."""
        job = self.jobs.get(job_id)
        if job is not None:
            return job
        return await anyio.to_thread.run_sync(self._read, job_id)

    def _read(self, job_id: str) -> FileJob | None:
        try:
            job = FileJob.from_json(json.loads((self.path(job_id) / "state.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None
        if job.state not in FINISHED and time.time() - job.updated_at > STALE_S:
            job.state, job.error = "failed", "the replica translating this file stopped"
        return job

    async def _save(self, job: FileJob, sync: bool = False) -> None:
        job.updated_at = time.time()
        path = self.path(job.id) / "state.json"
        await anyio.to_thread.run_sync(_write_json, path, asdict(job), sync)

    def sweep(self) -> None:
        """Remove the jobs finished (or stale) more than `ttl_s` ago, here and on disk."""
        now = time.time()
        for job_id, job in list(self.jobs.items()):
            if job.state in FINISHED and now - job.updated_at > self.ttl_s:
                del self.jobs[job_id]
        if not self.root.is_dir():
            return
        for d in self.root.iterdir():
            if not JOB_ID.fullmatch(d.name) or d.name in self.jobs:
                continue
            job = self._read(d.name)
            if job is None:
                with contextlib.suppress(OSError):
                    if now - d.stat().st_mtime > self.ttl_s:
                        shutil.rmtree(d, ignore_errors=True)
            elif job.state in FINISHED and now - job.updated_at > self.ttl_s:
                shutil.rmtree(d, ignore_errors=True)

    async def _run(self, job: FileJob, doc: Document) -> None:
        try:
            await self._wait_for_slot(job)
            try:
                await self._translate(job, doc)
            finally:
                assert self._slots is not None
                self._slots.release()
        except asyncio.CancelledError:
            job.state, job.error = "failed", "the server stopped before the file was translated"
            job.finished_at = time.time()
            with contextlib.suppress(OSError):
                job.updated_at = time.time()
                _write_json(self.path(job.id) / "state.json", asdict(job))
            raise
        except Exception as e:
            if isinstance(e, ServiceError | DocumentError):
                message = e.message if isinstance(e, ServiceError) else str(e)
            else:
                log.exception("file job %s failed", job.id)
                message = "internal error"
            job.state, job.error, job.finished_at = "failed", message, time.time()
            with contextlib.suppress(OSError):
                await self._save(job, sync=True)

    async def _wait_for_slot(self, job: FileJob) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._at_once)
        while True:
            try:
                await asyncio.wait_for(self._slots.acquire(), HEARTBEAT_S)
                return
            except TimeoutError:
                await self._save(job)

    async def _translate(self, job: FileJob, doc: Document) -> None:
        job.state, job.started_at = "running", time.time()
        await self._save(job)
        limits = self.engine.limits
        texts = doc.texts()
        plan = _Plan.of(doc, texts, limits.max_chars, job.source_lang)
        out: list[str] = []
        size = max(1, min(CHUNK, limits.max_texts))
        for start in range(0, len(plan.pieces), size):
            if self.draining():  # its store leases would hold the drain up to its timeout
                raise NotReady("the server stopped before the file was translated")
            chunk = plan.pieces[start : start + size]
            result = await self._chunk(job, chunk)
            out += [r.translation for r in result.results]
            for r in result.results[:1]:
                if r.model not in job.models:
                    job.models.append(r.model)
                if r.store_version and r.store_version not in job.store_versions:
                    job.store_versions.append(r.store_version)
            job.done = bisect.bisect_right(plan.text_done, len(out))
            job.translated = bisect.bisect_right(plan.unit_done, len(out))
            await self._save(job)
        translations = {
            text: " ".join(out[i] for i in ids)
            for text, ids in zip(texts, plan.of_text, strict=True)
        }
        data = await anyio.to_thread.run_sync(doc.render, translations, job.needs_review)
        await anyio.to_thread.run_sync(_write_bytes, self.result_path(job.id), data)
        job.state, job.finished_at = "done", time.time()
        job.done, job.translated = len(texts), len(doc.todo)
        job.translate_s = round(job.finished_at - job.started_at, 3)
        await self._save(job, sync=True)

    async def _chunk(self, job: FileJob, texts: list[str]) -> BatchResult:
        """One engine call; a full decoding queue is waited out (interactive requests first)."""
        request = TranslationRequest(
            texts=texts,
            source_lang=job.source_lang,
            target_lang=job.target_lang,
            domain=job.domain,
            model=job.model,
        )
        polite = time.monotonic() + YIELD_S
        while self.engine.queued and time.monotonic() < polite:
            await asyncio.sleep(0.01)  # others' requests are waiting: they decode first, alone
        wait = 0.1
        while True:
            try:
                return await self.engine.translate_batch(request)
            except Overloaded:
                await asyncio.sleep(wait)
                wait = min(wait * 2, 2.0)
