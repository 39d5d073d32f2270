"""The shared-state interfaces of `service.shared` over a real Redis server.

Every replica pointing at the same Redis and prefix sees the same active store versions,
translation cache, rate-limit budgets and build jobs. Keys (all under `<prefix>:`):

- `active`          hash domain -> version: the registry. No TTL.
- `events`          pub/sub channel: one JSON message per `set_active`.
- `cache:<sha256>`  translation JSON, SET with EX. The only keys with a TTL besides `rate:*`.
- `rate:<sha256>`   sorted set of hit times (sliding-window log), PEXPIRE one window.
- `jobs`            stream of job ids, consumer group `workers`.
- `job:<id>`        hash of the Job's fields, each JSON-encoded; no TTL.
- `jobkey:<dedup>`  the id of the current job for a dedup key; no TTL.

Eviction: only cache and rate-limit keys carry TTLs, so a Redis configured with
`maxmemory-policy volatile-lru` evicts translations and idle rate-limit windows (an evicted
window merely fails open), never registry or job state, which have no TTL. Deployments must
use `volatile-lru` (or `volatile-ttl`), never an `allkeys-*` policy.

Redis failures surface as `BackendUnavailable` (unreachable, timed out) or `BackendError`
(command refused), both `ServiceError`s with HTTP status 503. The registry's pub/sub reader
never raises: it logs, reconnects with backoff and, after every (re)connect, calls listeners
with domain "" ("reconcile everything"), because pub/sub drops messages while disconnected.
Unlike the in-process registry, `set_active` returns before listeners run: every replica,
the writer included, hears the change through pub/sub.

Jobs: a claimed job whose entry sits unacknowledged for `reclaim_idle_ms` is handed to the
next `claim`; `update` resets that clock, so a worker must report progress more often.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.errors import ServiceError
from service.shared import Backends, Job, Listener

log = logging.getLogger("ragmt.service.redis")

GROUP = "workers"
OP_TIMEOUT_S = 2.0  # one command; a hung Redis must not hang a translation request
RECLAIM_IDLE_MS = 600_000  # a claimed job untouched this long belongs to a dead worker
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.1, 5.0
PING_INTERVAL_S = 5.0  # pub/sub liveness: ping after this much silence...
PING_TIMEOUT_S = 5.0  # ...and reconnect if the pong has not come back after this long
POLL_S = 1.0

_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))
_FINISHED = (json.dumps("done"), json.dumps("failed"))


class BackendError(ServiceError):
    """Redis refused a command (wrong type, script error...): a bug or a misconfiguration."""

    status, code = 503, "backend_error"


class BackendUnavailable(BackendError):
    """Redis could not be reached or did not answer in time."""

    code = "backend_unavailable"


@contextmanager
def _redis_errors(op: str) -> Iterator[None]:
    """Turn redis-py exceptions into typed service errors naming the operation."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
        raise BackendUnavailable(f"Redis unavailable during {op} ({type(exc).__name__})") from exc
    except RedisError as exc:
        reason = (str(exc).split() or [type(exc).__name__])[0]  # the error code, e.g. WRONGTYPE
        raise BackendError(f"Redis rejected {op} ({reason})") from exc


def _digest(text: str) -> str:
    """Fixed-size key part: no client text or API key ever appears in a Redis key name."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RedisRegistry:
    """`Registry` over a Redis hash, with pub/sub change signals and a self-healing reader."""

    def __init__(self, client: aioredis.Redis, pubsub_client: aioredis.Redis, prefix: str):
        self._client = client
        self._pubsub_client = pubsub_client
        self._key = f"{prefix}:active"
        self._channel = f"{prefix}:events"
        self._listeners: list[Listener] = []
        self._task: asyncio.Task[None] | None = None
        self._failures = 0  # consecutive failed (re)connects: the backoff exponent
        self.connected = False  # pub/sub live: readiness probes may report it
        self.pubsub_client_name: str = pubsub_client.get_connection_kwargs()["client_name"]

    async def get_active(self, domain: str) -> str | None:
        with _redis_errors("registry get"):
            return await self._client.hget(self._key, domain)

    async def all_active(self) -> dict[str, str]:
        with _redis_errors("registry read"):
            return await self._client.hgetall(self._key)

    async def set_active(self, domain: str, version: str | None) -> None:
        if not domain:
            raise ValueError('domain "" is reserved for "reconcile everything"')
        message = json.dumps({"domain": domain, "version": version})
        with _redis_errors("registry write"):
            async with self._client.pipeline(transaction=True) as pipe:
                if version is None:
                    pipe.hdel(self._key, domain)
                else:
                    pipe.hset(self._key, domain, version)
                pipe.publish(self._channel, message)
                await pipe.execute()

    async def notify(self, domain: str) -> None:
        """A change signal without a change of version (the domain's memory was edited)."""
        if not domain:
            raise ValueError('domain "" is reserved for "reconcile everything"')
        with _redis_errors("registry notify"):
            version = await self._client.hget(self._key, domain)
            await self._client.publish(
                self._channel, json.dumps({"domain": domain, "version": version})
            )

    async def subscribe(self, listener: Listener) -> Callable[[], Awaitable[None]]:
        """The first call with domain "" (after the subscription is live) says: reconcile."""
        self._listeners.append(listener)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read_forever(), name=f"{self._channel} reader")

        async def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
            if not self._listeners:
                await self.close()

        return unsubscribe

    async def close(self) -> None:
        """Stop the reader task (listeners stay registered; `subscribe` restarts it)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        if task is not asyncio.current_task():  # a listener may unsubscribe itself
            await asyncio.wait([task])  # unlike `await task`, keeps our own cancellation

    async def _read_forever(self) -> None:
        """Subscribe, pump, and on any failure log, back off and start over; never raises."""
        while True:
            pubsub = self._pubsub_client.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                await self._pump(pubsub)
            except (RedisError, OSError, TimeoutError) as exc:
                if self.connected or self._failures == 0:
                    log.warning("registry pub/sub connection lost (%r); reconnecting", exc)
                else:
                    log.debug("registry pub/sub reconnect failed (%r)", exc)
                self._failures += 1
            except Exception:  # a bug here must not silently end change notifications
                log.exception("registry pub/sub reader failed; restarting it")
                self._failures += 1
            finally:
                self.connected = False
                with suppress(Exception):
                    await pubsub.aclose()
            # Jitter: replicas that lost Redis together do not reconnect in lockstep.
            delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2**self._failures)
            await asyncio.sleep(random.uniform(0.5, 1.0) * delay)

    async def _pump(self, pubsub: PubSub) -> None:
        """Deliver messages until the link fails; a silent link is detected by ping/pong."""
        loop = asyncio.get_running_loop()
        last_rx, ping_sent = loop.time(), None
        while True:
            msg = await pubsub.get_message(timeout=POLL_S)
            now = loop.time()
            if msg is None:
                if ping_sent is not None and now - ping_sent > PING_TIMEOUT_S:
                    raise RedisTimeoutError(f"no pong within {PING_TIMEOUT_S}s")
                if ping_sent is None and now - last_rx > PING_INTERVAL_S:
                    await pubsub.ping()
                    ping_sent = now
                continue
            last_rx, ping_sent = now, None
            if msg["type"] == "subscribe":  # first connect or reconnect: live from here on
                if self._failures:
                    log.info("registry pub/sub reconnected after %d attempts", self._failures)
                self.connected, self._failures = True, 0
                await self._notify("", None)
            elif msg["type"] == "message":
                await self._on_message(msg["data"])

    async def _on_message(self, data: str) -> None:
        try:
            event = json.loads(data)
            domain, version = event["domain"], event["version"]
        except (ValueError, KeyError, TypeError):
            log.warning("malformed registry event %.200r; reconciling everything", data)
            domain, version = "", None
        await self._notify(domain, version)

    async def _notify(self, domain: str, version: str | None) -> None:
        for listener in list(self._listeners):
            try:
                await listener(domain, version)
            except Exception:  # one bad listener must not stop the others or the reader
                log.exception("registry listener failed on (%r, %r)", domain, version)


class RedisCache:
    """`TranslationCache`: JSON strings under hashed keys, with SET EX."""

    def __init__(self, client: aioredis.Redis, prefix: str):
        self._client = client
        self._prefix = f"{prefix}:cache:"

    async def get(self, key: str) -> dict[str, Any] | None:
        with _redis_errors("cache get"):
            raw = await self._client.get(self._prefix + _digest(key))
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:  # a foreign or truncated value is a miss, not an error
            log.warning("cache entry for %s is not JSON; ignoring it", _digest(key)[:12])
            return None

    async def set(self, key: str, value: dict[str, Any], ttl_s: int) -> None:
        if int(ttl_s) <= 0:  # already expired: Redis refuses EX 0
            return
        with _redis_errors("cache set"):
            await self._client.set(self._prefix + _digest(key), json.dumps(value), ex=int(ttl_s))


# Sliding-window log: the sorted set holds the time (µs, Redis clock) of each allowed hit in
# the last window. Exact "at most `limit` in any `window_s`" (a fixed window lets 2x through
# across a boundary), an exact Retry-After (when the oldest counted hit leaves the window),
# one clock for all replicas. Cost: O(limit) memory per active key, fine for request limits.
_RATE_LUA = """
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
  return {1, 0}
end
local freeing = redis.call('ZRANGE', KEYS[1], count - limit, count - limit, 'WITHSCORES')
return {0, tonumber(freeing[2]) + window - now}
"""


class RedisRateLimiter:
    """`RateLimiter`: atomic sliding-window log in one Lua script (see `_RATE_LUA`)."""

    def __init__(self, client: aioredis.Redis, prefix: str):
        self._prefix = f"{prefix}:rate:"
        self._script = client.register_script(_RATE_LUA)

    async def hit(self, key: str, limit: int, window_s: float) -> tuple[bool, float]:
        if limit <= 0:
            return False, float(window_s)
        window_us = max(1, round(window_s * 1_000_000))
        args = [limit, window_us, uuid.uuid4().hex]  # member: unique per hit
        with _redis_errors("rate limit"):
            allowed, retry_us = await self._script(keys=[self._prefix + _digest(key)], args=args)
        return bool(allowed), max(0, int(retry_us)) / 1_000_000


# Atomic SET NX on the dedup key, extended: a key pointing at a failed (or vanished) job is
# replaced. Job hash and stream entry are written in the same step, so no replica ever sees a
# dedup key whose job is not yet stored and queued. Returns {id, created, existing hash}.
_SUBMIT_LUA = """
local job_prefix = ARGV[1]
local existing = redis.call('GET', KEYS[1])
if existing then
  local fields = redis.call('HGETALL', job_prefix .. existing)
  local state = redis.call('HGET', job_prefix .. existing, 'state')
  if state and state ~= ARGV[2] then return {existing, 0, fields} end
end
local id = ARGV[3]
redis.call('SET', KEYS[1], id)
redis.call('HSET', job_prefix .. id, unpack(ARGV, 4))
local entry = redis.call('XADD', KEYS[2], '*', 'id', id)
redis.call('HSET', job_prefix .. id, '_entry', entry)
return {id, 1, {}}
"""

# Update fields of an existing job and, as a heartbeat, reset the idle time of its stream
# entry (XCLAIM to the same consumer), so a long build that reports progress is not reclaimed.
_UPDATE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local entry = redis.call('HGET', KEYS[1], '_entry')
local consumer = redis.call('HGET', KEYS[1], '_consumer')
if entry and consumer then
  redis.pcall('XCLAIM', KEYS[2], ARGV[1], consumer, 0, entry, 'JUSTID')
end
return 1
"""


def _job_to_hash(job: Job) -> dict[str, str]:
    return {name: json.dumps(getattr(job, name)) for name in _JOB_FIELDS}


def _job_from_hash(fields: dict[str, str]) -> Job:
    return Job(**{name: json.loads(fields[name]) for name in _JOB_FIELDS if name in fields})


def _pairs(flat: list[str]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


class RedisJobQueue:
    """`JobQueue` over a stream with a consumer group; dead workers' jobs are reclaimed."""

    def __init__(
        self,
        client: aioredis.Redis,
        blocking_client: aioredis.Redis,
        prefix: str,
        reclaim_idle_ms: int = RECLAIM_IDLE_MS,
    ):
        self._client = client
        self._blocking = blocking_client  # no socket timeout: XREADGROUP BLOCK waits on it
        self._stream = f"{prefix}:jobs"
        self._job_prefix = f"{prefix}:job:"
        self._key_prefix = f"{prefix}:jobkey:"
        self._reclaim_idle_ms = reclaim_idle_ms
        self._submit = client.register_script(_SUBMIT_LUA)
        self._update = client.register_script(_UPDATE_LUA)

    async def ensure_group(self) -> None:
        """Create the stream and its group if missing (also after a Redis restart lost them)."""
        with _redis_errors("job group create"):
            try:
                await self._client.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def submit(self, spec: dict[str, Any], dedup_key: str) -> Job:
        job = Job(id=uuid.uuid4().hex, spec=dict(spec))
        fields = [x for item in _job_to_hash(job).items() for x in item]
        keys = [self._key_prefix + dedup_key, self._stream]
        with _redis_errors("job submit"):
            job_id, created, existing = await self._submit(
                keys=keys, args=[self._job_prefix, json.dumps("failed"), job.id, *fields]
            )
        return job if created else _job_from_hash(_pairs(existing))

    async def get(self, job_id: str) -> Job | None:
        with _redis_errors("job read"):
            fields = await self._client.hgetall(self._job_prefix + job_id)
        return _job_from_hash(fields) if fields else None

    async def update(self, job_id: str, **fields: Any) -> None:
        """Set fields (KeyError if no such job); doubles as the claimant's heartbeat."""
        unknown = sorted(name for name in fields if name not in _JOB_FIELDS or name == "id")
        if unknown:
            raise ValueError(f"cannot update job field(s): {', '.join(unknown)}")
        values = {**fields, "updated_at": time.time()}
        flat = [x for name, value in values.items() for x in (name, json.dumps(value))]
        with _redis_errors("job update"):
            found = await self._update(
                keys=[self._job_prefix + job_id, self._stream], args=[GROUP, *flat]
            )
        if not found:
            raise KeyError(job_id)

    async def claim(self, consumer: str, block_ms: int) -> Job | None:
        """A job abandoned by a dead consumer first, else the next new one; None on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, block_ms) / 1000
        while True:
            job = await self._reclaim(consumer)
            if job is not None:
                return job
            wait_ms = int((deadline - loop.time()) * 1000)
            if block_ms > 0 and wait_ms <= 0:
                return None
            entries = await self._read_new(consumer, wait_ms if block_ms > 0 else None)
            if not entries:
                return None
            entry_id, values = entries[0]
            job = await self._deliver(entry_id, values.get("id", ""), consumer)
            if job is not None:
                return job
            if loop.time() >= deadline:
                return None

    async def ack(self, job_id: str) -> None:
        """Acknowledge and drop the stream entry: the job hash keeps the record."""
        with _redis_errors("job ack"):
            entry = await self._client.hget(self._job_prefix + job_id, "_entry")
            if entry is not None:
                await self._ack_entry(entry)

    async def _ack_entry(self, entry_id: str) -> None:
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.xack(self._stream, GROUP, entry_id)
            pipe.xdel(self._stream, entry_id)
            await pipe.execute()

    async def _read_new(self, consumer: str, block_ms: int | None) -> list[Any]:
        """At most one new entry; `block_ms` None: do not wait (BLOCK 0 would wait forever)."""
        timeout = OP_TIMEOUT_S + (block_ms or 0) / 1000
        streams = {self._stream: ">"}
        read = self._blocking.xreadgroup
        with _redis_errors("job claim"):
            try:
                reply = await asyncio.wait_for(
                    read(GROUP, consumer, streams, count=1, block=block_ms), timeout
                )
            except ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                await self.ensure_group()  # Redis restarted without persistence
                reply = await asyncio.wait_for(
                    read(GROUP, consumer, streams, count=1, block=block_ms), timeout
                )
        return reply[0][1] if reply else []

    async def _reclaim(self, consumer: str) -> Job | None:
        start = "0-0"
        while True:
            with _redis_errors("job reclaim"):
                try:
                    reply = await self._client.xautoclaim(
                        self._stream, GROUP, consumer, self._reclaim_idle_ms, start, count=1
                    )
                except ResponseError as exc:
                    if "NOGROUP" not in str(exc):
                        raise
                    reply = ["0-0", []]  # no group yet: nothing to reclaim
            start, entries = reply[0], reply[1]
            for entry_id, values in entries:
                job_id = (values or {}).get("id", "")
                log.info("job %s reclaimed by %s from an idle consumer", job_id, consumer)
                job = await self._deliver(entry_id, job_id, consumer)
                if job is not None:
                    return job
            if start == "0-0":
                return None

    async def _deliver(self, entry_id: str, job_id: str, consumer: str) -> Job | None:
        """Record the claimant; drop entries whose job is gone or already finished."""
        key = self._job_prefix + job_id
        with _redis_errors("job claim"):
            fields = await self._client.hgetall(key) if job_id else {}
            if not fields or fields.get("state") in _FINISHED:
                await self._ack_entry(entry_id)  # e.g. a worker died between done and ack
                return None
            await self._client.hset(key, "_consumer", consumer)
        return _job_from_hash(fields)


def _redacted(url: str) -> str:
    """host:port/db for messages: never the password."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or 6379}{parts.path}"


async def redis_backends(
    url: str,
    prefix: str = "ragmt",
    *,
    reclaim_idle_ms: int = RECLAIM_IDLE_MS,
) -> Backends:
    """Connect (fail fast with `BackendUnavailable` if Redis does not answer) and build."""
    name = f"{prefix}:{uuid.uuid4().hex[:8]}"  # CLIENT LIST shows which replica is which
    common: dict[str, Any] = dict(
        decode_responses=True, socket_connect_timeout=OP_TIMEOUT_S, socket_keepalive=True
    )
    # One retry on a fresh connection rides over a Redis restart (stale pooled sockets)
    # without turning an outage into seconds of waiting per request.
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.02), 1)
    client = aioredis.Redis.from_url(
        url, socket_timeout=OP_TIMEOUT_S, retry=retry, client_name=f"{name}:ops", **common
    )
    blocking = aioredis.Redis.from_url(
        url, socket_timeout=None, retry=retry, client_name=f"{name}:claim", **common
    )
    # The registry reader owns reconnection (it must reconcile after each), so no retries.
    pubsub = aioredis.Redis.from_url(
        url, socket_timeout=None, retry=Retry(NoBackoff(), 0), client_name=f"{name}:sub", **common
    )
    clients = (client, blocking, pubsub)
    registry = RedisRegistry(client, pubsub, prefix)
    jobs = RedisJobQueue(client, blocking, prefix, reclaim_idle_ms)

    async def close() -> None:
        await registry.close()
        for c in clients:
            await c.aclose()

    try:
        with _redis_errors(f"connect to {_redacted(url)}"):
            await client.ping()
        await jobs.ensure_group()
    except BackendError:
        await close()
        raise
    backends = Backends(
        registry, RedisCache(client, prefix), RedisRateLimiter(client, prefix), jobs, close, "redis"
    )
    return backends
