"""The service over real loopback (uvicorn in this process): a hot swap under many concurrent
clients, and SIGTERM (not ready at once, no new connections, the in-flight request finishes
with its answer, then the lifespan shuts down)."""

from __future__ import annotations

import asyncio
import random
import signal
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from service.app import create_app
from service.server import DrainingServer
from service.settings import Settings
from tests.service.conftest import Uncaptured, free_port, make_store, serving, store_pairs
from tests.toy import LEXICON, gloss, toy_pairs

pytestmark = [pytest.mark.system, pytest.mark.anyio]


async def test_hot_swap_over_loopback_with_many_clients(bundle: Path, tmp_path: Path) -> None:
    """200 concurrent clients while the domain flips 20 times between two versions: every
    response 2xx, with a version it names and neighbours from that version."""
    stores = tmp_path / "stores"
    a = make_store(stores, "toy", toy_pairs(40, seed=51), activate=True)
    time.sleep(0.002)
    b = make_store(stores, "toy", toy_pairs(40, seed=52), method="idf-ngram")
    pairs = {v: store_pairs(stores, "toy", v) for v in (a, b)}
    settings = Settings(
        model_path=bundle,
        stores_dir=stores,
        admin_key="adm",
        beam_size=1,
        cache_ttl_s=0,
        queue_size=512,
        batch_size=64,
    )
    app = create_app(settings)
    words = sorted(LEXICON)
    results: list[tuple[str, httpx.Response]] = []
    swapping = True
    # Idle connections expire on the client before uvicorn's 5 s keep-alive timeout closes them
    # on the server: otherwise a reused connection can race the server's close (ReadError).
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256, keepalive_expiry=2.0)
    async with (
        serving(app) as base,
        httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as c,
    ):

        async def client(seed: int) -> None:
            rng = random.Random(seed)
            first = True
            while swapping or first:
                first = False
                text = " ".join(rng.sample(words, rng.randint(1, 3)))
                body = {"texts": [text], "domain": "toy", "return_neighbours": True}
                results.append((text, await c.post("/v1/translate", json=body)))
                await asyncio.sleep(0.5)  # think time: 200 clients, not a CPU benchmark

        async def operator() -> None:
            nonlocal swapping
            for i in range(20):
                await asyncio.sleep(0.03)
                version = b if i % 2 == 0 else a
                resp = await c.post(
                    "/v1/domains/toy/activate",
                    json={"version": version},
                    headers={"X-Admin-Key": "adm"},
                )
                assert resp.status_code == 200, resp.text
            swapping = False

        await asyncio.gather(operator(), *(client(i) for i in range(200)))
        info = (await c.get("/v1/domains/toy")).json()
    assert len(results) >= 200
    seen = set()
    for text, resp in results:
        assert resp.status_code == 200, resp.text
        r = resp.json()["results"][0]
        assert r["translation"] == gloss(text)
        seen.add(r["store_version"])
        held = pairs[r["store_version"]]
        assert all(held[n["pair_id"]] == (n["source"], n["target"]) for n in r["neighbours"])
    assert seen == {a, b}
    assert info["loaded"] == [{"version": a, "leases": 0, "active": True}]


async def test_sigterm_drains_in_flight_requests(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    version = make_store(stores, "toy", toy_pairs(20, seed=2), activate=True)
    port = free_port()
    app = create_app(Settings(model_path=bundle, stores_dir=stores, beam_size=1))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = DrainingServer(config, app)
    server._captured_signals = Uncaptured()
    serving = asyncio.create_task(server.serve())
    base = f"http://127.0.0.1:{port}"
    while not server.started:
        await asyncio.sleep(0.02)
    service = app.state.service
    async with httpx.AsyncClient(base_url=base, timeout=30) as c:
        assert (await c.get("/readyz")).status_code == 200
        service.engine._decode_lock.acquire()  # the next request stays in flight
        try:
            body = {"texts": ["red tree"], "domain": "toy"}
            in_flight = asyncio.create_task(c.post("/v1/translate", json=body))
            while service.domains.leases() == 0:
                await asyncio.sleep(0.01)
            server.handle_exit(signal.SIGTERM, None)
            assert service.draining
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(base_url=base) as fresh:  # answered, not refused
                assert (await fresh.get("/readyz")).status_code == 503
                refused = await fresh.post("/v1/translate", json=body)
                assert refused.status_code == 503 and "draining" in refused.text
                assert "retry-after" in refused.headers
            assert not serving.done()  # still waiting for the in-flight request
        finally:
            service.engine._decode_lock.release()
        resp = await in_flight
    assert resp.status_code == 200, resp.text
    result = resp.json()["results"][0]
    assert (result["translation"], result["store_version"]) == ("rot baum", version)
    await asyncio.wait_for(serving, 20)
    assert all(task.done() for task in service.tasks)  # batcher and worker stopped


async def test_sigterm_stops_within_the_drain_timeout(bundle: Path, tmp_path: Path) -> None:
    """A request that outlives RAGMT_DRAIN_TIMEOUT_S is cut when it is up: the stop does not
    wait for it (it once took 45 s with a 30 s limit)."""
    port = free_port()
    settings = Settings(model_path=bundle, stores_dir=tmp_path, beam_size=1, drain_timeout_s=1.0)
    app = create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = DrainingServer(config, app)
    server._captured_signals = Uncaptured()
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    service = app.state.service
    lock = service.engine._decode_lock
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        lock.acquire()  # decoding never finishes while the test holds this
        try:
            stuck = asyncio.create_task(c.post("/v1/translate", json={"texts": ["red tree"]}))
            while service.engine.queued == 0 and not lock.locked():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            start = time.monotonic()
            server.handle_exit(signal.SIGTERM, None)
            while not stuck.done() and time.monotonic() - start < 10:
                await asyncio.sleep(0.02)
            cut_after = time.monotonic() - start
        finally:
            lock.release()  # the decoding step in progress may now end; the stop follows
        await asyncio.wait_for(serving, 20)
    assert 0.9 <= cut_after < 3.0, cut_after
    with pytest.raises(httpx.HTTPError):  # its connection closed without an answer
        (await stuck).raise_for_status()
