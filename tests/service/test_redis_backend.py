"""The Redis backends against a real Redis (`redis_url`: a private redis-server of this run,
or else the one on 127.0.0.1:6379).

Each test uses its own random key prefix and deletes its keys afterwards; nothing here
flushes the server, which other suites and services may share. An outage is simulated with a
TCP proxy in front of Redis, so the server itself is never stopped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

from service.errors import ServiceError
from service.redis_backend import BackendError, BackendUnavailable, redis_backends
from service.shared import Backends

pytestmark = pytest.mark.system


async def _delete_keys(url: str, prefix: str) -> None:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test alone; its keys are deleted afterwards."""
    name = f"ragmt-test-{uuid.uuid4().hex[:12]}"
    yield name
    asyncio.run(_delete_keys(redis_url, name))


async def _eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


class Recorder:
    """A registry listener that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    async def __call__(self, domain: str, version: str | None) -> None:
        self.calls.append((domain, version))

    def reconciles(self) -> int:
        return self.calls.count(("", None))


async def _two(url: str, prefix: str, **kwargs: int) -> tuple[Backends, Backends]:
    """Two replicas sharing one Redis and prefix."""
    return await redis_backends(url, prefix, **kwargs), await redis_backends(url, prefix, **kwargs)


def _with_two(
    url: str, prefix: str, body: Callable[[Backends, Backends], Awaitable[None]], **kw: int
) -> None:
    async def main() -> None:
        a, b = await _two(url, prefix, **kw)
        try:
            await body(a, b)
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


# --- registry ---------------------------------------------------------------------------


def test_registry_set_get_all_and_second_replica_hears_it(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        heard = Recorder()
        unsubscribe = await b.registry.subscribe(heard)
        await _eventually(lambda: heard.reconciles() == 1)  # subscription live

        await a.registry.set_active("medical", "v2")
        await a.registry.set_active("legal", "v1")
        await a.registry.set_active("medical", "v3")
        assert await b.registry.get_active("medical") == "v3"
        assert await b.registry.get_active("unknown") is None
        assert await b.registry.all_active() == {"medical": "v3", "legal": "v1"}
        await _eventually(lambda: len(heard.calls) == 4)
        assert heard.calls == [("", None), ("medical", "v2"), ("legal", "v1"), ("medical", "v3")]

        await a.registry.set_active("legal", None)
        await _eventually(lambda: len(heard.calls) == 5)
        assert heard.calls[-1] == ("legal", None)
        assert await a.registry.all_active() == {"medical": "v3"}

        await unsubscribe()
        await a.registry.set_active("medical", "v4")
        await asyncio.sleep(0.2)
        assert len(heard.calls) == 5  # nothing after unsubscribing
        with pytest.raises(ValueError):
            await a.registry.set_active("", "v1")  # "" means "reconcile everything"

    _with_two(redis_url, prefix, body)


def test_failing_listener_does_not_stop_the_others(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        async def broken(domain: str, version: str | None) -> None:
            raise RuntimeError("listener bug")

        heard = Recorder()
        await b.registry.subscribe(broken)
        await b.registry.subscribe(heard)
        await _eventually(lambda: heard.reconciles() == 1)
        await a.registry.set_active("medical", "v1")
        await a.registry.set_active("medical", "v2")
        await _eventually(lambda: heard.calls[-1:] == [("medical", "v2")])

    _with_two(redis_url, prefix, body)


def test_killed_pubsub_connection_reconnects_and_reconciles(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        heard = Recorder()
        await b.registry.subscribe(heard)
        await _eventually(lambda: heard.reconciles() == 1)

        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            name = b.registry.pubsub_client_name  # type: ignore[attr-defined]
            ours = [c for c in await admin.client_list(_type="pubsub") if c["name"] == name]
            assert len(ours) == 1
            assert await admin.client_kill_filter(_id=ours[0]["id"], _type="pubsub") == 1
        finally:
            await admin.aclose()

        await _eventually(lambda: heard.reconciles() == 2)
        await a.registry.set_active("medical", "v9")  # and the new subscription works
        await _eventually(lambda: heard.calls[-1:] == [("medical", "v9")])
        assert b.registry.connected  # type: ignore[attr-defined]

    _with_two(redis_url, prefix, body)


class Proxy:
    """A TCP proxy to Redis that can be cut (every connection closed) and restored."""

    def __init__(self, upstream_url: str) -> None:
        self.upstream_port = urlsplit(upstream_url).port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._frozen: set[asyncio.StreamWriter] = set()

    def freeze(self) -> None:
        """Silently drop all traffic on the open connections (a partition: no FIN, no RST)."""
        self._frozen |= self._writers

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if dst in self._frozen:
                        continue
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


def test_outage_raises_typed_errors_and_reader_survives(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ragmt.service.redis")

    async def main() -> None:
        proxy = Proxy(redis_url)
        await proxy.start()
        backends = await redis_backends(f"redis://127.0.0.1:{proxy.port}/0", prefix)
        try:
            heard = Recorder()
            await backends.registry.subscribe(heard)
            await _eventually(lambda: heard.reconciles() == 1)

            await proxy.stop()  # Redis "goes away"
            with pytest.raises(BackendUnavailable, match="cache get") as err:
                await backends.cache.get("some text")
            assert isinstance(err.value, ServiceError) and err.value.status == 503
            with pytest.raises(BackendUnavailable, match="rate limit"):
                await backends.limiter.hit("client", 10, 1.0)
            await _eventually(lambda: "connection lost" in caplog.text)
            await asyncio.sleep(0.5)  # a few failed reconnects
            assert not backends.registry.connected  # type: ignore[attr-defined]

            await proxy.start()  # same port: Redis is back
            await _eventually(lambda: heard.reconciles() == 2, timeout_s=10)
            await backends.registry.set_active("medical", "v2")
            await _eventually(lambda: heard.calls[-1:] == [("medical", "v2")])
            assert await backends.cache.get("some text") is None  # pool recovered too
        finally:
            await backends.close()
            await proxy.stop()

    asyncio.run(main())


def test_silent_pubsub_link_is_detected_by_ping(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition sends no FIN: only the missing pong shows the subscription is dead."""
    for name in ("POLL_S", "PING_INTERVAL_S", "PING_TIMEOUT_S"):
        monkeypatch.setattr(f"service.redis_backend.{name}", 0.2)

    async def main() -> None:
        proxy = Proxy(redis_url)
        await proxy.start()
        behind = await redis_backends(f"redis://127.0.0.1:{proxy.port}/0", prefix)
        direct = await redis_backends(redis_url, prefix)
        try:
            heard = Recorder()
            await behind.registry.subscribe(heard)
            await _eventually(lambda: heard.reconciles() == 1)
            proxy.freeze()
            await direct.registry.set_active("medical", "v1")  # lost on the frozen link
            await _eventually(lambda: heard.reconciles() == 2)
            assert ("medical", "v1") not in heard.calls  # hence the reconcile
            await direct.registry.set_active("medical", "v2")
            await _eventually(lambda: heard.calls[-1:] == [("medical", "v2")])
        finally:
            await behind.close()
            await direct.close()
            await proxy.stop()

    asyncio.run(main())


@pytest.mark.unit
def test_unreachable_redis_fails_fast_with_a_clear_error() -> None:
    with pytest.raises(BackendUnavailable, match=r"connect to 127\.0\.0\.1:1/0"):
        asyncio.run(redis_backends("redis://:secret@127.0.0.1:1/0", "ragmt-test-none"))


def test_refused_command_is_a_backend_error(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        admin = aioredis.Redis.from_url(redis_url)
        await admin.set(f"{prefix}:active", "not a hash")
        await admin.aclose()
        with pytest.raises(BackendError, match="WRONGTYPE") as err:
            await a.registry.get_active("medical")
        assert not isinstance(err.value, BackendUnavailable)

    _with_two(redis_url, prefix, body)


# --- cache and expiry -------------------------------------------------------------------


def test_cache_round_trip_and_ttl_expiry(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        value = {"translation": "Grüße, «Welt»", "store_version": "v2", "score": 0.1 + 0.2}
        await a.cache.set("model|v2|Greetings, world", value, ttl_s=1)
        assert await b.cache.get("model|v2|Greetings, world") == value
        assert await b.cache.get("model|v3|Greetings, world") is None
        await a.cache.set("expired", value, ttl_s=0)
        assert await a.cache.get("expired") is None
        await asyncio.sleep(1.3)
        assert await b.cache.get("model|v2|Greetings, world") is None

    _with_two(redis_url, prefix, body)


def test_only_cache_and_rate_keys_carry_ttls(redis_url: str, prefix: str) -> None:
    """volatile-lru must be able to evict the cache and never the registry or jobs."""

    async def body(a: Backends, b: Backends) -> None:
        await a.registry.set_active("medical", "v1")
        job = await a.jobs.submit({"domain": "medical"}, "medical:abc")
        await a.jobs.update(job.id, progress=0.5)
        await a.cache.set("k", {"translation": "x"}, ttl_s=60)
        await a.limiter.hit("client", 5, 60.0)
        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            ttls = {k: await admin.ttl(k) async for k in admin.scan_iter(match=f"{prefix}:*")}
        finally:
            await admin.aclose()
        kinds = {key.split(":")[1] for key in ttls}
        assert kinds == {"active", "cache", "rate", "jobs", "job", "jobkey"}
        for key, ttl in ttls.items():
            expiring = key.split(":")[1] in ("cache", "rate")
            assert (0 < ttl <= 60) if expiring else ttl == -1, (key, ttl)
        assert "client" not in " ".join(ttls) and ":k" not in " ".join(ttls)  # hashed names

    _with_two(redis_url, prefix, body)


# --- rate limiting ----------------------------------------------------------------------


def test_rate_limit_is_exact_across_two_replicas(redis_url: str, prefix: str) -> None:
    limit, window = 7, 2.0

    async def body(a: Backends, b: Backends) -> None:
        start = time.monotonic()
        results = await asyncio.gather(
            *(x.limiter.hit("api-key-1", limit, window) for _ in range(20) for x in (a, b))
        )
        elapsed = time.monotonic() - start
        allowed = [retry for ok, retry in results if ok]
        denied = [retry for ok, retry in results if not ok]
        assert len(allowed) == limit and set(allowed) == {0.0}
        assert len(denied) == 40 - limit
        assert all(window - elapsed - 0.05 <= r <= window for r in denied), denied

        assert (await a.limiter.hit("api-key-2", limit, window))[0]  # keys are independent
        ok, retry = await b.limiter.hit("api-key-1", limit, window)
        assert not ok and retry <= max(denied)
        await asyncio.sleep(retry + 0.05)
        assert (await a.limiter.hit("api-key-1", limit, window))[0]

    _with_two(redis_url, prefix, body)


def test_rate_limit_window_slides(redis_url: str, prefix: str) -> None:
    """Hits leave the window one by one: no fresh budget at a fixed boundary."""

    async def body(a: Backends, b: Backends) -> None:
        assert (await a.limiter.hit("k", 2, 1.0))[0]
        await asyncio.sleep(0.5)
        assert (await b.limiter.hit("k", 2, 1.0))[0]
        ok, retry = await a.limiter.hit("k", 2, 1.0)
        assert not ok and 0.2 < retry <= 0.5  # when the first hit leaves the window
        await asyncio.sleep(retry + 0.05)
        assert (await b.limiter.hit("k", 2, 1.0))[0]  # the first hit's slot
        ok, retry = await a.limiter.hit("k", 2, 1.0)
        assert not ok and 0.2 < retry <= 0.5  # the second hit still counts
        assert await a.limiter.hit("k", 0, 1.0) == (False, 1.0)

    _with_two(redis_url, prefix, body)


# --- jobs -------------------------------------------------------------------------------


async def _pending(url: str, prefix: str) -> int:
    admin = aioredis.Redis.from_url(url)
    try:
        return (await admin.xpending(f"{prefix}:jobs", "workers"))["pending"]
    finally:
        await admin.aclose()


def test_job_round_trips_exactly(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        spec = {"domain": "médical", "corpus": "a\tb\n", "sizes": [1, 2.5, None, True], "x": {}}
        submitted = await a.jobs.submit(spec, "medical:abc")
        assert await b.jobs.get(submitted.id) == submitted
        before = time.time()
        result = {"version": "v3", "pairs": 35_000, "ratio": 1 / 3}
        await a.jobs.update(
            submitted.id, state="running", progress=0.1 + 0.2, message='"quoted"', result=result
        )
        got = await b.jobs.get(submitted.id)
        assert got is not None and before <= got.updated_at <= time.time()
        expected = dataclasses.replace(
            submitted,
            state="running",
            progress=0.1 + 0.2,
            message='"quoted"',
            result=result,
            updated_at=got.updated_at,
        )
        assert got == expected
        assert await a.jobs.get("no-such-job") is None
        with pytest.raises(ValueError, match="bogus"):
            await a.jobs.update(submitted.id, bogus=1)
        with pytest.raises(ValueError, match="id"):
            await a.jobs.update(submitted.id, id="other")
        with pytest.raises(KeyError):
            await a.jobs.update("no-such-job", progress=1.0)

    _with_two(redis_url, prefix, body)


def test_job_submit_is_idempotent_and_claim_ack(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        spec = {"domain": "medical", "corpus_sha256": "abc"}
        first, second = await asyncio.gather(
            a.jobs.submit(spec, "medical:abc"), b.jobs.submit(spec, "medical:abc")
        )
        assert first == second
        other = await b.jobs.submit({"domain": "legal"}, "legal:def")
        assert other.id != first.id

        claimed = await a.jobs.claim("worker-1", block_ms=1000)
        assert claimed == first
        assert await b.jobs.claim("worker-2", block_ms=1000) == other
        assert await b.jobs.claim("worker-2", block_ms=200) is None  # empty; none idle
        assert await _pending(redis_url, prefix) == 2

        await a.jobs.update(first.id, state="done", result={"version": "v1"})
        await a.jobs.ack(first.id)
        assert await _pending(redis_url, prefix) == 1
        again = await b.jobs.submit(spec, "medical:abc")  # done: not built twice
        assert again.id == first.id and again.state == "done"

    _with_two(redis_url, prefix, body)


def test_blocked_claim_wakes_on_submit(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        waiting = asyncio.create_task(a.jobs.claim("worker-1", block_ms=5000))
        await asyncio.sleep(0.2)
        job = await b.jobs.submit({"domain": "medical"}, "medical:abc")
        claimed = await asyncio.wait_for(waiting, 3)
        assert claimed is not None and claimed.id == job.id
        assert await a.jobs.claim("worker-1", block_ms=0) is None  # non-blocking when 0

    _with_two(redis_url, prefix, body)


def test_jobs_of_dead_consumers_are_reclaimed(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        job = await a.jobs.submit({"domain": "medical"}, "medical:abc")
        assert (await a.jobs.claim("dies", block_ms=500)) == job  # and never acks
        assert await b.jobs.claim("survivor", block_ms=100) is None  # not idle long enough
        await asyncio.sleep(0.6)
        reclaimed = await b.jobs.claim("survivor", block_ms=100)
        assert reclaimed is not None and reclaimed.id == job.id
        await b.jobs.ack(job.id)
        assert await _pending(redis_url, prefix) == 0

        # A worker that reports progress keeps its job: update() is its heartbeat.
        slow = await a.jobs.submit({"domain": "legal"}, "legal:def")
        assert (await a.jobs.claim("slow", block_ms=500)) == slow
        await asyncio.sleep(0.35)
        await a.jobs.update(slow.id, progress=0.5)
        await asyncio.sleep(0.3)  # 0.65 s since the claim, 0.3 s since the heartbeat
        assert await b.jobs.claim("thief", block_ms=0) is None
        await asyncio.sleep(0.45)
        stolen = await b.jobs.claim("thief", block_ms=0)
        assert stolen is not None and stolen.id == slow.id and stolen.progress == 0.5
        await b.jobs.ack(slow.id)

        # Finished but never acked (died in between): dropped, not built again.
        done = await a.jobs.submit({"domain": "news"}, "news:ghi")
        assert (await a.jobs.claim("dies", block_ms=500)) == done
        await a.jobs.update(done.id, state="done")
        await asyncio.sleep(0.6)
        assert await b.jobs.claim("survivor", block_ms=0) is None
        assert await _pending(redis_url, prefix) == 0

    _with_two(redis_url, prefix, body, reclaim_idle_ms=500)


def test_failed_job_may_be_resubmitted(redis_url: str, prefix: str) -> None:
    async def body(a: Backends, b: Backends) -> None:
        failed = await a.jobs.submit({"domain": "medical"}, "medical:abc")
        await a.jobs.update(failed.id, state="failed", error="corpus is empty")
        retry = await b.jobs.submit({"domain": "medical"}, "medical:abc")
        assert retry.id != failed.id and retry.state == "queued" and retry.error is None
        assert (await a.jobs.submit({"domain": "medical"}, "medical:abc")).id == retry.id
        old = await a.jobs.get(failed.id)
        assert old is not None and old.state == "failed" and old.error == "corpus is empty"
        # The failed job's stream entry is skipped: the worker gets the new one.
        assert (await b.jobs.claim("worker-1", block_ms=500)) == retry
        assert await b.jobs.claim("worker-1", block_ms=0) is None

    _with_two(redis_url, prefix, body)


# --- lifecycle --------------------------------------------------------------------------


def test_close_leaves_no_tasks_or_connections(redis_url: str, prefix: str) -> None:
    async def main() -> None:
        backends = await redis_backends(redis_url, prefix)
        heard = Recorder()
        await backends.registry.subscribe(heard)
        await _eventually(lambda: heard.reconciles() == 1)
        await backends.jobs.claim("worker-1", block_ms=100)
        start = time.monotonic()
        await asyncio.wait_for(backends.close(), 10)
        assert time.monotonic() - start < 2  # the reader stops at once, it is not waited out
        assert asyncio.all_tasks() == {asyncio.current_task()}
        admin = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            await asyncio.sleep(0.1)  # the server notices closed sockets asynchronously
            names = [c["name"] for c in await admin.client_list()]
        finally:
            await admin.aclose()
        assert not [n for n in names if n.startswith(f"{prefix}:")]

    asyncio.run(main())
