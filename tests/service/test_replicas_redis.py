"""Two replicas sharing a real Redis (a private redis-server on a free loopback port, so it
can be killed mid-test): activation spreads within a second, rate limits and build jobs are
shared, and both keep translating through a Redis outage and reconcile when it is back."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from index_builder.store import active_version
from service.app import create_app
from service.settings import Settings
from tests.redis_server import RedisServer, free_port, has_redis_server
from tests.service.conftest import make_store, running
from tests.toy import toy_pairs

pytestmark = [pytest.mark.system, pytest.mark.anyio]

ADMIN = {"X-Admin-Key": "adm"}
# Keys that polling for a version spends: a rate budget belongs to a configured key only.
POLL_KEYS = [f"poll-{i}" for i in range(200)]
_polls = itertools.count()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A server of this test alone: it is stopped and started again mid-test."""
    if not has_redis_server():
        pytest.skip("needs redis-server (Debian package redis-server): it stops it mid-test")
    server = RedisServer(free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def settings(bundle: Path, stores: Path, url: str, **extra) -> Settings:
    base = dict(
        model_path=bundle,
        stores_dir=stores,
        redis_url=url,
        redis_prefix="ragmt-test",
        admin_key="adm",
        beam_size=1,
        reconcile_interval_s=0.5,
    )
    return Settings(**(base | extra))


async def serves(c: httpx.AsyncClient, version: str, within_s: float) -> float:
    """Seconds until `c` translates with `version` in domain toy (fails after `within_s`)."""
    start = time.monotonic()
    while True:
        # A key of its own per poll: polling must not spend a rate-limit budget a test sets.
        key = {"X-API-Key": POLL_KEYS[next(_polls) % len(POLL_KEYS)]}
        resp = await c.post("/v1/translate", json={"texts": ["red"], "domain": "toy"}, headers=key)
        assert resp.status_code == 200, resp.text
        if resp.json()["results"][0]["store_version"] == version:
            return time.monotonic() - start
        assert time.monotonic() - start < within_s, f"still not on {version}"
        await asyncio.sleep(0.02)


async def test_replicas_share_state_and_ride_out_an_outage(
    bundle: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
    stores = tmp_path / "stores"
    a = make_store(stores, "toy", toy_pairs(30, seed=31), activate=True)
    b = make_store(stores, "toy", toy_pairs(30, seed=32))
    keys = ["outage", *POLL_KEYS]
    s = settings(bundle, stores, redis_server.url, rate_limit=5, rate_window_s=60, api_keys=keys)
    one, two = create_app(s), create_app(s)
    async with running(one) as c1, running(two) as c2:
        assert one.state.service.backends.kind == "redis"
        await serves(c2, a, 1)
        resp = await c1.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        assert await serves(c2, b, 1.0) < 1.0  # the other replica within a second

        # Redis goes away: both keep translating with the stores they hold, and the shared
        # rate limiter fails open (more than the limit of 5 from one key all pass).
        redis_server.stop()
        for c in (c1, c2, c1, c2, c1, c2):
            resp = await c.post(
                "/v1/translate",
                json={"texts": ["one"], "domain": "toy"},
                headers={"X-API-Key": "outage"},
            )
            assert resp.status_code == 200, resp.text
            assert resp.json()["results"][0]["store_version"] == b

        # Back (empty: no persistence). Activating A on one reaches the other after the
        # pub/sub reader's reconnect, or the periodic reconcile at the latest.
        redis_server.start()
        deadline = time.monotonic() + 15
        while True:
            resp = await c1.post("/v1/domains/toy/activate", json={"version": a}, headers=ADMIN)
            if resp.status_code == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)  # the client's pool may still hold dead connections
        assert resp.status_code == 200, resp.text
        await serves(c2, a, 15)


async def test_activation_during_an_outage_is_refused_and_nothing_is_undone(
    bundle: Path, tmp_path: Path
) -> None:
    """A persistent Redis (as compose deploys it) goes away: an activation is refused with
    nothing changed, not served here and undone when Redis returns; afterwards the replicas,
    the registry and the ACTIVE file agree."""
    if not has_redis_server():
        pytest.skip("needs redis-server (Debian package redis-server): it stops it mid-test")
    server = RedisServer(free_port(), data_dir=tmp_path / "redis")
    server.start()
    stores = tmp_path / "stores"
    a = make_store(stores, "toy", toy_pairs(30, seed=33), activate=True)
    b = make_store(stores, "toy", toy_pairs(30, seed=34))
    s = settings(bundle, stores, server.url)
    one, two = create_app(s), create_app(s)
    try:
        async with running(one) as c1, running(two) as c2:
            resp = await c1.post("/v1/domains/toy/activate", json={"version": a}, headers=ADMIN)
            assert resp.status_code == 200, resp.text  # recorded in the persistent registry
            server.stop()
            resp = await c1.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
            assert resp.status_code == 503, resp.text
            err = resp.json()["error"]
            assert err["code"] == "registry_unavailable" and "nothing changed" in err["message"]
            assert active_version(stores, "toy") == a
            for c in (c1, c2):  # both keep serving the version they had
                await serves(c, a, 0.5)
            server.start()
            await asyncio.sleep(2.5)  # reconciles run every 0.5 s: nothing may flip back
            for c in (c1, c2):
                await serves(c, a, 0.5)
                info = (await c.get("/v1/domains/toy", headers={"X-API-Key": "x"})).json()
                assert info["active_version"] == a
            assert active_version(stores, "toy") == a
            deadline = time.monotonic() + 15
            while True:  # the client's pool may still hold dead connections at first
                resp = await c1.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
                if resp.status_code == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert resp.status_code == 200, resp.text
            await serves(c2, b, 2)
            assert active_version(stores, "toy") == b
    finally:
        server.stop()


async def test_rate_limit_and_jobs_are_shared(
    bundle: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
    stores = tmp_path / "stores"
    keys = ["shared", "x", "y"]
    s = settings(bundle, stores, redis_server.url, rate_limit=3, rate_window_s=60, api_keys=keys)
    one, two = create_app(s), create_app(s)
    async with running(one) as c1, running(two) as c2:
        body = {"texts": ["one"]}
        codes = [
            (await c.post("/v1/translate", json=body, headers={"X-API-Key": "shared"})).status_code
            for c in (c1, c2, c1, c2)
        ]
        assert codes == [200, 200, 200, 429]  # one budget across both replicas
        corpus = "".join(f"{x}\t{y}\n" for x, y in toy_pairs(20, seed=4)).encode()
        files = {"file": ("c.tsv", corpus)}
        resp = await c1.post("/v1/domains/news/corpora", files=files, headers=ADMIN)
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["id"]
        again = await c2.post("/v1/domains/news/corpora", files=files, headers=ADMIN)
        assert again.json()["id"] == job_id  # idempotent across replicas
        for _ in range(300):
            job = (await c2.get(f"/v1/jobs/{job_id}", headers=ADMIN)).json()
            if job["state"] in ("done", "failed"):
                break
            await asyncio.sleep(0.05)
        assert job["state"] == "done", job
        version = job["result"]["version"]
        resp = await c2.post("/v1/domains/news/activate", json={"version": version}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        for _ in range(50):  # the other replica follows within a second
            translated = await c1.post(
                "/v1/translate",
                json={"texts": ["two"], "domain": "news"},
                headers={"X-API-Key": "x"},
            )
            if translated.status_code == 200:
                break
            await asyncio.sleep(0.02)
        assert translated.status_code == 200, translated.text
        assert translated.json()["results"][0]["store_version"] == version
        # One translation cache for both: what one replica decoded, the other serves.
        body = {"texts": ["three four"], "domain": "news", "return_neighbours": True}
        first = await c1.post("/v1/translate", json=body, headers={"X-API-Key": "y"})
        second = await c2.post("/v1/translate", json=body, headers={"X-API-Key": "y"})
        assert first.json()["timings"]["cache_hits"] == 0
        assert second.json()["timings"]["cache_hits"] == 1
        assert second.json()["results"] == first.json()["results"]


def start_replica(bundle: Path, stores: Path, url: str, port: int, log: Path) -> subprocess.Popen:
    """`ragmt serve` as a separate process, configured only by RAGMT_* variables; its log
    goes to a file (a pipe nobody reads could fill up and stall it)."""
    env = {
        **os.environ,
        "RAGMT_MODEL_PATH": str(bundle),
        "RAGMT_STORES_DIR": str(stores),
        "RAGMT_REDIS_URL": url,
        "RAGMT_REDIS_PREFIX": "ragmt-procs",
        "RAGMT_ADMIN_KEY": "adm",
        "RAGMT_BEAM_SIZE": "1",
        "RAGMT_PORT": str(port),
        "RAGMT_REQUIRED_DOMAINS": "toy",
        "OMP_NUM_THREADS": "1",
    }
    code = "from service.server import serve; serve()"
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=out
        )


async def test_two_server_processes_share_the_active_version(
    bundle: Path, tmp_path: Path, redis_server: RedisServer
) -> None:
    stores = tmp_path / "stores"
    a = make_store(stores, "toy", toy_pairs(30, seed=61), activate=True)
    time.sleep(0.002)
    b = make_store(stores, "toy", toy_pairs(30, seed=62))
    ports = [free_port(), free_port()]
    logs = [tmp_path / f"replica-{port}.log" for port in ports]
    procs = [
        start_replica(bundle, stores, redis_server.url, port, log)
        for port, log in zip(ports, logs, strict=True)
    ]
    try:
        clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{p}") for p in ports]
        for c, proc, log in zip(clients, procs, logs, strict=True):
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, log.read_text()[-2000:]
                try:
                    if (await c.get("/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "replica never became ready"
                await asyncio.sleep(0.2)
        c1, c2 = clients
        await serves(c2, a, 1)
        resp = await c1.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        assert await serves(c2, b, 1.0) < 1.0
        for c in clients:
            await c.aclose()
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc, log in zip(procs, logs, strict=True):
            # uvicorn finishes its shutdown, then re-raises SIGTERM so the exit says why.
            assert proc.wait(30) in (0, -signal.SIGTERM)
            assert "Application shutdown complete" in log.read_text()
