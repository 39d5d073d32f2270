"""Per-domain glossaries beside the domains' stores, shared by every replica through the disk.

A domain's glossary is one file, `<stores>/<domain>/glossary.json`: its terms, languages,
version and the sha256 of its content, checked on every read. It is written as the stores are
(a temporary file, fsynced, renamed into place), so a reader never sees half of one, and a
change is made under a lock file, so two replicas changing one glossary at once both count.
Another replica's change is seen within `check_s`: a lookup looks at the file's identity
(inode, size, mtime) at most that often, and reads it again only when it changed. A file that
fails its check is logged and the last good glossary served; writes refuse to merge into it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from models.glossary import Glossary, GlossaryError
from service.errors import Conflict

__all__ = ["FILE", "FORMAT", "GlossaryStore", "GlossaryUnreadable"]

log = logging.getLogger("ragmt.service")

FILE = "glossary.json"
LOCK = ".glossary.lock"
FORMAT = "ragmt-glossary/1"

Signature = tuple[int, int, int] | None  # (inode, size, mtime_ns) of the file; None: no file


class GlossaryUnreadable(Conflict):
    """The glossary file on disk fails its check: only a replace or a clear may write."""

    code = "glossary_unreadable"


@dataclass
class _Cached:
    glossary: Glossary | None
    signature: Signature
    checked: float


def _signature(path: Path) -> Signature:
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # no domain directory: no glossary
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read(path: Path) -> Glossary | None:
    """The glossary at `path` (None: no file), its format and sha256 checked."""
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GlossaryError(f"{path.name}: not JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise GlossaryError(f"{path.name}: not a {FORMAT} file")
    glossary = Glossary.from_json(data)
    if data.get("sha256") != glossary.sha256:
        raise GlossaryError(f"{path.name}: its sha256 does not match its content")
    return glossary


def _write(path: Path, glossary: Glossary | None) -> None:
    """Replace the file at `path` whole (None: remove it); durable once this returns."""
    if glossary is None or not glossary.terms:
        path.unlink(missing_ok=True)
    else:
        data = {
            "format": FORMAT,
            "domain": path.parent.name,
            "version": glossary.version,
            "sha256": glossary.sha256,
            "updated_at": time.time(),
            **glossary.to_json(),
        }
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".glossary-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, ensure_ascii=False, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


class GlossaryStore:
    """The glossaries of the domains under `stores_dir`; thread-safe. Reads are cached per
    domain and revalidated against the file at most every `check_s` seconds."""

    def __init__(
        self,
        stores_dir: Path,
        check_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(stores_dir)
        self.check_s = check_s
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    def path(self, domain: str) -> Path:
        return self.root / domain / FILE

    def get(self, domain: str) -> Glossary | None:
        """The domain's glossary (None: it has none); blocking, for a worker thread. Never
        raises for a bad file: the last good glossary is served and the problem logged."""
        now = self._clock()
        with self._lock:
            cached = self._cache.get(domain)
            if cached is not None and now - cached.checked < self.check_s:
                return cached.glossary
        path = self.path(domain)
        signature = _signature(path)
        if cached is not None and signature == cached.signature:
            cached.checked = now
            return cached.glossary
        try:
            glossary = _read(path)
        except (OSError, GlossaryError) as e:
            log.error("glossary of %s unreadable, serving the last good one: %s", domain, e)
            glossary = cached.glossary if cached is not None else None
        with self._lock:
            self._cache[domain] = _Cached(glossary, signature, now)
        return glossary

    async def current(self, domain: str) -> Glossary | None:
        """`get` from the event loop: from the cache while fresh, else in a worker thread."""
        cached = self._cache.get(domain)
        if cached is not None and self._clock() - cached.checked < self.check_s:
            return cached.glossary
        return await anyio.to_thread.run_sync(self.get, domain)

    def read(self, domain: str) -> Glossary | None:
        """The domain's glossary as on disk now; GlossaryUnreadable when it fails its check."""
        try:
            return _read(self.path(domain))
        except (OSError, GlossaryError) as e:
            raise GlossaryUnreadable(
                f"the glossary file of {domain} is unreadable ({e}); replace or clear it"
            ) from None

    @contextmanager
    def _locked(self, domain: str) -> Iterator[None]:
        """This process's lock, then the domain's lock file (other processes on the disk)."""
        directory = self.root / domain
        directory.mkdir(parents=True, exist_ok=True)
        with self._lock, open(directory / LOCK, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def update(
        self,
        domain: str,
        change: Callable[[Glossary | None], Glossary | None],
        fresh: bool = False,
    ) -> Glossary | None:
        """Apply `change` to the domain's glossary as on disk and write what it returns (an
        empty glossary or None removes the file); `fresh`: `change` ignores what is there,
        so an unreadable file may be replaced. Blocking, for a worker thread."""
        if not (self.root / domain).is_dir() and change(None) is None:
            return None  # nothing there, nothing to write: no directory made for it
        with self._locked(domain):
            try:
                current = self.read(domain)
            except GlossaryUnreadable:
                if not fresh:
                    raise
                current = None
            new = change(current)
            if new is not None and not new.terms:
                new = None
            path = self.path(domain)
            _write(path, new)
            self._cache[domain] = _Cached(new, _signature(path), self._clock())
            return new
