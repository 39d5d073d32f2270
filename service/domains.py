"""Per-domain retrieval stores: hot swap with leases, rollback, deletion, replica convergence.

Each domain serves one active store version. Activating a version loads and validates it
(manifest and checksums via `open_store`, languages, the model hash of dense stores, a smoke
query) in a worker thread, and only then flips the pointer; a failure leaves the old version
serving and is recorded. A per-domain lock serialises activations. Requests take a `Lease`
on the version they were admitted with; a replaced version is closed when its last lease
ends. The shared `Registry` holds the active version per domain and is the truth: an
activation is recorded there before any replica serves it (refused, nothing changed, while the
registry is unreachable), and a change listener, a periodic reconcile and a reconcile on start
make every replica, and the ACTIVE files on disk, converge on it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from index_builder import store as stores
from index_builder.edits import Edit
from index_builder.retrieval.base import Retriever
from index_builder.store import SIGNATURE, Store
from models.artifacts import MANIFEST
from models.bundle import LoadedBundle
from service.errors import ActivationFailed, Conflict, NotFound, ServiceError
from service.memory_edits import MemoryEdits, through_of
from service.metrics import Metrics
from service.settings import DOMAIN_RE, VERSION_RE
from service.shared import Registry

log = logging.getLogger("ragmt.service")

GENERAL_DOMAIN = "general"  # always known: without a store it is served without retrieval
SMOKE_QUERIES = 3
MAX_HISTORY = 32  # versions remembered for rollback, per domain


class RegistryUnavailable(ServiceError):
    status, code = 503, "registry_unavailable"


@dataclass(eq=False)
class LoadedStore:
    """One store version in memory, with the number of requests that still use it."""

    domain: str
    version: str
    store: Store | None
    retriever: Retriever | None
    uses_model: bool = False  # dense: searching runs the model's encoder
    loaded_at: float = field(default_factory=time.time)
    leases: int = 0
    retired: bool = False  # no longer active: closed when `leases` reaches 0
    closed: bool = False
    # The retriever over this version and the domain's live edits after its edits_through
    # (None: no edit applies), and the last edit of the log it reflects; swapped whole.
    overlay: tuple[Retriever | None, int] = (None, 0)
    # The rows of this version that hold pairs edits removed, by pair key (memory_edits)
    removed_rows: dict[str, frozenset[int]] = field(default_factory=dict)

    @property
    def manifest(self) -> dict[str, Any]:
        return self.store.manifest if self.store is not None else {}


class Lease:
    """A request's hold on a store version, from admission to its last decoding step."""

    def __init__(self, manager: DomainManager, loaded: LoadedStore) -> None:
        self._manager, self.store = manager, loaded
        self._released = False
        loaded.leases += 1
        # the memory as it is at admission, for the whole request
        self._edited, self.edits = loaded.overlay

    @property
    def version(self) -> str:
        return self.store.version

    @property
    def retriever(self) -> Retriever:
        assert self.store.retriever is not None, "a leased store is never closed"
        return self._edited if self._edited is not None else self.store.retriever

    def release(self) -> None:
        """Idempotent; the last release of a retired version closes it."""
        if self._released:
            return
        self._released = True
        self.store.leases -= 1
        if self.store.retired and self.store.leases == 0:
            self._manager._close(self.store)


@dataclass(frozen=True)
class Attempt:
    """The last activation attempt of a domain on this replica."""

    version: str
    at: float  # unix time
    ok: bool
    seconds: float
    error: str | None = None


@dataclass(eq=False)
class DomainState:
    name: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    active: LoadedStore | None = None
    retired: list[LoadedStore] = field(default_factory=list)  # replaced, still leased
    history: list[str] = field(default_factory=list)  # versions active before, oldest first
    last_attempt: Attempt | None = None


class DomainManager:
    """The stores this replica serves; all methods run on the event loop."""

    def __init__(
        self,
        stores_dir: Path,
        registry: Registry,
        metrics: Metrics,
        domains: list[str] | None = None,
        reconcile_interval_s: float = 10.0,
        gpu: int | None = None,
        signing_key: bytes | None = None,
    ) -> None:
        self.stores_dir = Path(stores_dir)
        self.signing_key = signing_key  # set: a store must carry its HMAC signature
        self.gpu = gpu  # CUDA device index: dense stores search there too (None: CPU)
        self.registry = registry
        self.metrics = metrics
        self.configured = list(domains or [])  # empty: every domain directory found
        self.reconcile_interval_s = reconcile_interval_s
        self.edits = MemoryEdits(self.stores_dir, signing_key)
        self._version_info: dict[tuple[str, str], dict[str, Any]] = {}
        self.languages: set[tuple[str, str]] = set()  # of the loaded models; empty: no check
        # Loaded bundles by encoder identity (`bundle_sha256`): a dense store must be queried
        # with the very bundle it was built with, and only a loaded one may serve it.
        self.bundles: dict[str, LoadedBundle] = {}
        self._states: dict[str, DomainState] = {}
        # Loads get their own threads: under load, the default pool is full of requests'
        # retrieval and decoding, and a swap must not queue behind them.
        self._loader = anyio.CapacityLimiter(2)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._periodic: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Subscribe to changes, converge once, then keep converging periodically."""
        try:
            self._unsubscribe = await self.registry.subscribe(self._on_change)
        except Exception as e:  # the registry may be down; the periodic reconcile catches up
            log.warning("registry subscription failed: %s", e)
        await self.reconcile()
        self._periodic = asyncio.create_task(self._reconcile_forever())

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            try:
                await self._unsubscribe()
            except Exception as e:
                log.warning("registry unsubscribe failed: %s", e)
        tasks = [*self._tasks, *([self._periodic] if self._periodic else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request holds a lease (draining); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.leases() > 0:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_change(self, domain: str, version: str | None) -> None:
        # Called by the registry ("" after a reconnect: everything may have changed). Loading
        # can take seconds, so it runs in its own task and the registry's loop moves on.
        self._spawn(self._reconcile_quietly(domain or None, retry_failed=True))

    async def _reconcile_forever(self) -> None:
        while True:
            await asyncio.sleep(self.reconcile_interval_s)
            await self._reconcile_quietly(None, retry_failed=False)

    async def _reconcile_quietly(self, domain: str | None, retry_failed: bool) -> None:
        try:
            await self.reconcile(domain, retry_failed)
        except Exception:
            log.exception("reconcile failed")

    # --- what exists ----------------------------------------------------------------------

    def valid(self, domain: str) -> bool:
        return bool(DOMAIN_RE.fullmatch(domain))

    def known_domains(self) -> list[str]:
        """Configured domains, or general plus every domain directory in the stores dir."""
        if self.configured:
            return sorted(set(self.configured) | {GENERAL_DOMAIN})
        found = {GENERAL_DOMAIN, *self._states}
        if self.stores_dir.is_dir():
            dirs = (p.name for p in self.stores_dir.iterdir() if p.is_dir())
            found |= {name for name in dirs if self.valid(name)}
        return sorted(found)

    def is_known(self, domain: str) -> bool:
        return self.valid(domain) and (domain in self._states or domain in self.known_domains())

    def state(self, domain: str) -> DomainState:
        """The state of a known domain; unknown ones are a 404 naming the choices."""
        if not self.is_known(domain):
            known = ", ".join(self.known_domains())
            raise NotFound(f"unknown domain; available: {known}", code="unknown_domain")
        if domain not in self._states:
            self._states[domain] = DomainState(domain)
        return self._states[domain]

    def versions(self, domain: str) -> list[str]:
        return stores.list_versions(self.stores_dir, domain)

    def leases(self) -> int:
        held = 0
        for s in self._states.values():
            held += sum(x.leases for x in ([s.active] if s.active else []) + s.retired)
        return held

    def lease(self, domain: str) -> Lease | None:
        """A lease on the domain's active version, or None when it has none loaded."""
        active = self.state(domain).active
        return Lease(self, active) if active is not None else None

    # --- activation -----------------------------------------------------------------------

    def _safe(self, e: BaseException) -> str:
        """An error message without server paths (clients read it in /v1/domains)."""
        msg = str(e) or type(e).__name__
        for root in {str(self.stores_dir.resolve()), str(self.stores_dir)}:
            msg = msg.replace(root + os.sep, "").replace(root, "<stores>")
        return msg[:500]

    def _load(self, domain: str, version: str) -> LoadedStore:
        """Open, verify and smoke-test one version (blocking: runs in a worker thread)."""
        if not VERSION_RE.fullmatch(version):
            raise ValueError(f"invalid version id {version[:80]!r}")
        root = self.stores_dir / domain / version
        if not root.is_dir():
            raise FileNotFoundError(f"no version {version} of domain {domain}")
        store = stores.open_store(root, self.signing_key)
        m = store.manifest
        if m.get("domain") != domain:
            raise ValueError(f"a store of domain {m.get('domain')!r}, not {domain!r}")
        langs = (m.get("languages", {}).get("source"), m.get("languages", {}).get("target"))
        if self.languages and langs not in self.languages:
            raise ValueError(f"store languages {langs[0]}->{langs[1]} match no loaded model")
        bundle = None
        if m.get("model_sha256") is not None:  # dense: vectors of one specific bundle
            bundle = self.bundles.get(m["model_sha256"])
            if bundle is None:
                raise ValueError(
                    f"dense store built with model bundle {str(m['model_sha256'])[:12]}…, "
                    "which this service has not loaded (model hash)"
                )
        retriever = stores.load_retriever(store, bundle)
        if bundle is not None and self.gpu is not None and hasattr(retriever, "to_gpu"):
            retriever.to_gpu(self.gpu)  # dense search beside the model on the same GPU
        queries = [store.pairs.sources[i] for i in range(min(SMOKE_QUERIES, len(store.pairs)))]
        found = retriever.search(queries, k=1)
        if len(found) != len(queries) or not any(found):
            raise ValueError("smoke query returned no neighbours")
        for hits in found:
            for n in hits:
                if (
                    not 0 <= n.pair_id < len(store.pairs)
                    or n.source != store.pairs.sources[n.pair_id]
                ):
                    raise ValueError("smoke query returned a pair that is not in the store")
        loaded = LoadedStore(domain, version, store, retriever, uses_model=bundle is not None)
        self.edits.apply(loaded)  # served with the domain's live edits from the start
        return loaded

    async def _switch(self, state: DomainState, version: str, remember: bool = True) -> None:
        """Load `version` and make it active; the caller holds `state.lock`."""
        if state.active is not None and state.active.version == version:
            return
        start = time.perf_counter()
        loaded = await self._prepare(state, version)
        self._flip(state, loaded, start, remember)
        await self.edits.refresh(loaded)

    async def _prepare(self, state: DomainState, version: str) -> LoadedStore:
        """`version` loaded and verified, not yet serving (ActivationFailed, recorded, when it
        cannot be); the caller holds `state.lock`."""
        start = time.perf_counter()
        # A replaced version that requests still hold is verified and in memory: swapping
        # back to it (a quick rollback) takes it up again instead of loading a second copy.
        kept = next((x for x in state.retired if x.version == version and not x.closed), None)
        try:
            if kept is not None:
                state.retired.remove(kept)
                kept.retired = False
                loaded = kept
            else:
                loaded = await anyio.to_thread.run_sync(
                    self._load, state.name, version, limiter=self._loader
                )
        except Exception as e:
            seconds = time.perf_counter() - start
            msg = self._safe(e)
            state.last_attempt = Attempt(version, time.time(), False, seconds, msg)
            self.metrics.swap_failures.labels(state.name).inc()
            self.metrics.swap_seconds.labels(state.name, "failed").observe(seconds)
            serving = state.active.version if state.active else "nothing"
            log.error("activation of %s/%s failed: %s", state.name, version, msg)
            raise ActivationFailed(
                f"{state.name} {version}: {msg}; {serving} keeps serving",
                domain=state.name,
                version=version,
                serving=state.active.version if state.active else None,
            ) from None
        return loaded

    def _unprepare(self, state: DomainState, loaded: LoadedStore) -> None:
        """Drop a prepared version that will not serve after all (publishing it failed): a
        fresh load is closed, a replaced version still leased goes back to the retired."""
        self._retire(state, loaded)
        self._count(state)

    def _flip(
        self, state: DomainState, loaded: LoadedStore, start: float, remember: bool = True
    ) -> None:
        """Make a prepared version the one requests are admitted with."""
        old, state.active = state.active, loaded
        seconds = time.perf_counter() - start
        state.last_attempt = Attempt(loaded.version, time.time(), True, seconds)
        self.metrics.swap_seconds.labels(state.name, "ok").observe(seconds)
        if old is not None:
            if remember:
                state.history = [*state.history, old.version][-MAX_HISTORY:]
            self._retire(state, old)
        self._count(state)
        log.info("domain %s now serves %s (%.3f s)", state.name, loaded.version, seconds)

    def _retire(self, state: DomainState, old: LoadedStore) -> None:
        old.retired = True
        if old.leases == 0:
            self._close(old)
        else:
            state.retired.append(old)

    def _close(self, loaded: LoadedStore) -> None:
        """Drop the version's memory maps and indexes (the last lease has ended)."""
        loaded.store, loaded.retriever, loaded.closed = None, None, True
        state = self._states.get(loaded.domain)
        if state is not None:
            if loaded in state.retired:
                state.retired.remove(loaded)
            self._count(state)

    def _count(self, state: DomainState) -> None:
        n = len(state.retired) + (state.active is not None)
        self.metrics.loaded_versions.labels(state.name).set(n)

    async def _publish(self, state: DomainState, version: str, remember: bool = True) -> None:
        """Make `version` the domain's active version everywhere, or nowhere.

        The shared registry is the truth: a version is prepared (loaded, verified) here, then
        recorded in the registry, and only then served here and written to the ACTIVE file.
        While the registry cannot be reached an activation is refused with nothing changed,
        so no replica, and no disk, holds a version the others would later undo. (A write
        that reached the registry though its answer was lost is applied by the next
        reconcile, here and on the other replicas, ACTIVE file included.) The caller holds
        `state.lock`.
        """
        if state.active is not None and state.active.version == version:
            await self._record(state.name, version)
            return
        start = time.perf_counter()
        loaded = await self._prepare(state, version)
        try:
            await self._record(state.name, version)
        except RegistryUnavailable:
            self._unprepare(state, loaded)
            raise
        self._flip(state, loaded, start, remember)
        await self.edits.refresh(loaded)  # a version taken back from the retired: catch up
        await anyio.to_thread.run_sync(self._write_active, state.name, version)

    async def _record(self, domain: str, version: str) -> None:
        """Set the registry's version (which tells the other replicas); 503 while it is down."""
        try:
            await self.registry.set_active(domain, version)
        except Exception as e:
            serving = self._states[domain].active
            raise RegistryUnavailable(
                f"the shared registry is unavailable ({type(e).__name__}); nothing changed: "
                f"{serving.version if serving else 'no version'} keeps serving; retry when "
                "it is back"
            ) from None

    def _write_active(self, domain: str, version: str) -> None:
        """Point the ACTIVE file at `version` unless it already does (blocking). The version
        serving here was verified when it loaded: it is not read from disk again."""
        if self._file_active(domain) != version:
            active = self._states[domain].active
            opened = active.store if active is not None and active.version == version else None
            stores.set_active(
                self.stores_dir, domain, version, signing_key=self.signing_key, opened=opened
            )

    async def activate(self, domain: str, version: str) -> DomainState:
        """Load, validate and publish `version`, then serve it (see `_publish`); idempotent."""
        state = self.state(domain)
        async with state.lock:
            await self._publish(state, version)
        return state

    async def edit(
        self,
        domain: str,
        op: str,
        source: str,
        target: str,
        old: tuple[str, str] | None = None,
        by: str | None = None,
    ) -> tuple[Edit, str]:
        """Add, correct or delete one pair of the domain's memory, served here when this
        returns and signalled to the other replicas; (the edit, the version it applies to)."""
        state = self.state(domain)
        active = state.active
        if active is None:
            raise Conflict(
                f"domain {domain} has no active store version: its memory starts with a "
                "corpus upload (POST /v1/domains/{domain}/corpora)"
            )
        lease = Lease(self, active)  # the version stays loaded while the edit is applied
        try:
            done = await anyio.to_thread.run_sync(
                self.edits.write, active, op, source, target, old, by
            )
        finally:
            lease.release()
        current = state.active
        if current is not None and current is not active:  # swapped meanwhile
            await self.edits.refresh(current)
        try:
            await self.registry.notify(domain)
        except Exception as e:  # written and served here; the others read it on reconcile
            log.warning("edit %d of %s not signalled (%s)", done.seq, domain, e)
        return done, active.version

    async def rollback(self, domain: str) -> DomainState:
        """Return to the version active before the current one (walking back on repeats)."""
        state = self.state(domain)
        async with state.lock:
            if state.active is None:
                raise Conflict(f"domain {domain} has no active version to roll back from")
            target = state.history[-1] if state.history else self._older(domain, state)
            if target is None:
                raise Conflict(f"domain {domain} has no version before {state.active.version}")
            await self._publish(state, target, remember=False)
            if state.history and state.history[-1] == target:
                state.history.pop()
        return state

    def _older(self, domain: str, state: DomainState) -> str | None:
        """After a restart there is no history: the newest version built before the active."""
        assert state.active is not None
        older = [v for v in self.versions(domain) if v < state.active.version]
        return older[-1] if older else None

    async def delete(self, domain: str, version: str) -> None:
        """Delete an inactive version's directory; the active one (here, in the registry or
        in the ACTIVE file) is refused with 409."""
        state = self.state(domain)
        async with state.lock:
            if version not in self.versions(domain):
                raise NotFound(f"domain {domain} has no version {version}", code="unknown_version")
            active = {state.active.version if state.active else None}
            try:
                active.add(await self.registry.get_active(domain))
            except Exception as e:
                raise RegistryUnavailable(
                    f"cannot check the shared registry ({type(e).__name__}); nothing deleted"
                ) from None
            active.add(await anyio.to_thread.run_sync(self._file_active, domain))
            if version in active:
                raise Conflict(f"{domain} {version} is the active version; it cannot be deleted")
            await anyio.to_thread.run_sync(self._remove, domain, version)
            state.history = [v for v in state.history if v != version]

    def _file_active(self, domain: str) -> str | None:
        try:
            return stores.active_version(self.stores_dir, domain)
        except Exception:
            return None

    def _remove(self, domain: str, version: str) -> None:
        self._version_info.pop((domain, version), None)
        # Rename first: a reader (list_versions, a reconcile) never sees half a directory.
        doomed = self.stores_dir / domain / f".{version}.deleting-{uuid.uuid4().hex[:8]}"
        os.rename(self.stores_dir / domain / version, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    # --- convergence ----------------------------------------------------------------------

    async def _shared(self) -> dict[str, str] | None:
        """The registry's versions; None while it is unreachable."""
        try:
            return await self.registry.all_active()
        except Exception as e:
            log.warning("registry unavailable (%s); keeping to the ACTIVE files", e)
            return None

    async def desired(self, domain: str) -> tuple[str | None, bool]:
        """The version `domain` should serve, and whether the shared registry named it (else
        its ACTIVE file did, or nothing)."""
        shared = await self._shared()
        version = (shared or {}).get(domain)
        if version is not None:
            return version, True
        return await anyio.to_thread.run_sync(self._file_active, domain), False

    async def reconcile(self, domain: str | None = None, retry_failed: bool = True) -> None:
        """Load whatever differs from the desired versions; failures are recorded, not raised.

        The desired version is read under the domain's lock, so a reconcile that waited for
        an activation never applies what the registry said before it. The periodic pass
        does not retry a version whose last attempt failed here (it would re-verify a broken
        store every few seconds); a registry change or an explicit activation does.
        """
        if domain is not None:
            ours = self.valid(domain) and (not self.configured or domain in self.known_domains())
            names = [domain] if ours else []
        else:
            names = self.known_domains()
            if not self.configured:  # domains registered elsewhere, not yet on our disk list
                names = sorted({*names, *filter(self.valid, await self._shared() or {})})
        for name in names:
            state = self._states.get(name) or self._states.setdefault(name, DomainState(name))
            async with state.lock:
                version, shared = await self.desired(name)
                if version is None:
                    continue
                last = state.last_attempt
                if not retry_failed and last and not last.ok and last.version == version:
                    continue
                try:
                    await self._switch(state, version)
                except ActivationFailed:
                    continue  # recorded in state.last_attempt and the metrics
                try:  # edits made on other replicas (signalled, or found by the periodic pass)
                    await self.edits.refresh(state.active)
                except Exception as e:
                    log.warning("edits of %s not applied: %s", name, self._safe(e))
                if shared:  # the disk follows the registry (e.g. after a lost answer)
                    try:
                        await anyio.to_thread.run_sync(self._write_active, name, version)
                    except Exception as e:
                        log.warning("ACTIVE file of %s not updated: %s", name, self._safe(e))

    def missing(self, required: list[str]) -> list[str]:
        """The required domains without an active version loaded."""
        return [d for d in required if (s := self._states.get(d)) is None or s.active is None]

    def version_info(self, domain: str, version: str) -> dict[str, Any]:
        """A version's manifest facts and size on disk (read once: versions never change)."""
        key = (domain, version)
        if key not in self._version_info:
            root = self.stores_dir / domain / version
            try:
                m = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
                size = sum(f.stat().st_size for f in root.iterdir() if f.is_file())
            except (OSError, ValueError):
                m, size = {}, 0
            self._version_info[key] = {
                "version": version,
                "method": m.get("method"),
                "pairs": m.get("pairs"),
                "built_at": m.get("built_at"),
                "size_bytes": size,
                "edits_through": through_of(m),
                "folded_from": m.get("folded_from"),
                "signed": bool(m.get(SIGNATURE)),
            }
        return self._version_info[key]

    def describe(self, domain: str) -> dict[str, Any]:
        """What GET /v1/domains/{domain} reports."""
        state = self.state(domain)
        versions = self.versions(domain)
        active = state.active
        last = state.last_attempt
        if active is not None:
            status = "active"
        elif last is not None and not last.ok:
            status = "failed"
        else:
            status = "inactive" if versions else "empty"
        m = active.manifest if active is not None else {}
        return {
            "version_info": [self.version_info(domain, v) for v in versions],
            "edits": self.edits.info(domain, active),
            "domain": domain,
            "state": status,
            "active_version": active.version if active else None,
            "method": m.get("method"),
            "pairs": m.get("pairs"),
            "versions": versions,
            "previous_version": state.history[-1] if state.history else None,
            "loaded": [
                {"version": x.version, "leases": x.leases, "active": x is active}
                for x in ([active] if active else []) + state.retired
            ],
            "last_attempt": None
            if last is None
            else {
                "version": last.version,
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last.at)),
                "ok": last.ok,
                "seconds": round(last.seconds, 4),
                "error": last.error,
            },
        }
