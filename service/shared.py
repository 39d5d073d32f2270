"""What replicas share: the interfaces, and their in-process implementations.

With `RAGMT_REDIS_URL` set, `service.redis_backend` provides the same interfaces over a real
Redis server; without it, these in-process classes serve a single replica. The app and the
worker only ever see the protocols, so both paths run the same code above this layer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Listener = Callable[[str, str | None], Awaitable[None]]  # (domain, version or None)


class Registry(Protocol):
    """The active store version of every domain, and a change signal."""

    async def get_active(self, domain: str) -> str | None: ...

    async def all_active(self) -> dict[str, str]: ...

    async def set_active(self, domain: str, version: str | None) -> None:
        """Record (None: clear) and notify every subscriber; idempotent."""

    async def subscribe(self, listener: Listener) -> Callable[[], Awaitable[None]]:
        """Call `listener` on every change; returns an async unsubscribe."""

    async def notify(self, domain: str) -> None:
        """Tell every subscriber that `domain` changed otherwise (its memory was edited)."""


class TranslationCache(Protocol):
    """Finished translations keyed by everything that determines them (model, store, text...)."""

    async def get(self, key: str) -> dict[str, Any] | None: ...

    async def set(self, key: str, value: dict[str, Any], ttl_s: int) -> None: ...


class RateLimiter(Protocol):
    """Fixed-budget limiter: at most `limit` hits of `key` per `window_s` seconds."""

    async def hit(self, key: str, limit: int, window_s: float) -> tuple[bool, float]:
        """(allowed, seconds until a hit would be allowed again: 0 when allowed)."""


@dataclass
class Job:
    """A store-build job: `spec` is JSON-serialisable; `state` queued|running|done|failed."""

    id: str
    spec: dict[str, Any]
    state: str = "queued"
    progress: float = 0.0
    message: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)


class JobQueue(Protocol):
    """Build jobs, consumed by `ragmt worker` (or in-process); idempotent on `dedup_key`."""

    async def submit(self, spec: dict[str, Any], dedup_key: str) -> Job:
        """Queue a job, or return the existing one with the same `dedup_key` (unless failed)."""

    async def get(self, job_id: str) -> Job | None: ...

    async def update(self, job_id: str, **fields: Any) -> None: ...

    async def claim(self, consumer: str, block_ms: int) -> Job | None:
        """Next queued job for this consumer, or None after `block_ms`."""

    async def ack(self, job_id: str) -> None: ...


class MemoryRegistry:
    """In-process `Registry` for a single replica."""

    def __init__(self) -> None:
        self._active: dict[str, str] = {}
        self._listeners: list[Listener] = []

    async def get_active(self, domain: str) -> str | None:
        return self._active.get(domain)

    async def all_active(self) -> dict[str, str]:
        return dict(self._active)

    async def set_active(self, domain: str, version: str | None) -> None:
        if version is None:
            self._active.pop(domain, None)
        else:
            self._active[domain] = version
        for listener in list(self._listeners):
            await listener(domain, version)

    async def notify(self, domain: str) -> None:
        for listener in list(self._listeners):
            await listener(domain, self._active.get(domain))

    async def subscribe(self, listener: Listener) -> Callable[[], Awaitable[None]]:
        self._listeners.append(listener)

        async def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe


class MemoryCache:
    """In-process `TranslationCache` with TTLs and a size bound (oldest entries go first)."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self._items: dict[str, tuple[float, dict[str, Any]]] = {}
        self._max = max_entries

    async def get(self, key: str) -> dict[str, Any] | None:
        item = self._items.get(key)
        if item is None:
            return None
        if item[0] < time.monotonic():
            self._items.pop(key, None)
            return None
        return item[1]

    async def set(self, key: str, value: dict[str, Any], ttl_s: int) -> None:
        self._items.pop(key, None)
        while len(self._items) >= self._max:
            self._items.pop(next(iter(self._items)))
        self._items[key] = (time.monotonic() + ttl_s, value)


class MemoryRateLimiter:
    """In-process `RateLimiter`: fixed windows per key."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[float, int]] = {}

    async def hit(self, key: str, limit: int, window_s: float) -> tuple[bool, float]:
        now = time.monotonic()
        start, count = self._windows.get(key, (now, 0))
        if now - start >= window_s:
            start, count = now, 0
        if count >= limit:
            return False, max(0.0, start + window_s - now)
        self._windows[key] = (start, count + 1)
        return True, 0.0


class MemoryJobQueue:
    """In-process `JobQueue`."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._by_key: dict[str, str] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()

    async def submit(self, spec: dict[str, Any], dedup_key: str) -> Job:
        existing = self._by_key.get(dedup_key)
        if existing is not None and self._jobs[existing].state != "failed":
            return self._jobs[existing]
        job = Job(id=uuid.uuid4().hex, spec=dict(spec))
        self._jobs[job.id] = job
        self._by_key[dedup_key] = job.id
        await self._queue.put(job.id)
        return job

    async def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    async def update(self, job_id: str, **fields: Any) -> None:
        job = self._jobs[job_id]
        for name, value in fields.items():
            setattr(job, name, value)
        job.updated_at = time.time()

    async def claim(self, consumer: str, block_ms: int) -> Job | None:
        try:
            job_id = await asyncio.wait_for(self._queue.get(), timeout=block_ms / 1000)
        except TimeoutError:
            return None
        return self._jobs[job_id]

    async def ack(self, job_id: str) -> None:
        return None


@dataclass
class Backends:
    """The shared state one replica uses; `close()` releases connections."""

    registry: Registry
    cache: TranslationCache
    limiter: RateLimiter
    jobs: JobQueue
    close: Callable[[], Awaitable[None]]
    kind: str  # "memory" | "redis"


def memory_backends() -> Backends:
    """Single-replica backends: nothing outside this process."""

    async def close() -> None:
        return None

    return Backends(
        MemoryRegistry(), MemoryCache(), MemoryRateLimiter(), MemoryJobQueue(), close, "memory"
    )
