"""SIGTERM over real loopback: not ready at once, no new connections, the in-flight request
finishes with its answer, then the lifespan shuts down."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path

import httpx
import pytest
import uvicorn

from service.app import create_app
from service.server import DrainingServer
from service.settings import Settings
from tests.service.conftest import make_store
from tests.toy import toy_pairs

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_sigterm_drains_in_flight_requests(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    version = make_store(stores, "toy", toy_pairs(20, seed=2), activate=True)
    port = free_port()
    app = create_app(Settings(model_path=bundle, stores_dir=stores, beam_size=1))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = DrainingServer(config, app)
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
            server._captured_signals.clear()  # uvicorn would re-raise it in this test process
            assert service.draining
            await asyncio.sleep(0.5)  # the listener closes
            with pytest.raises(httpx.ConnectError):
                async with httpx.AsyncClient(base_url=base) as fresh:
                    await fresh.get("/readyz")
            assert not serving.done()  # still waiting for the in-flight request
        finally:
            service.engine._decode_lock.release()
        resp = await in_flight
    assert resp.status_code == 200, resp.text
    result = resp.json()["results"][0]
    assert (result["translation"], result["store_version"]) == ("rot baum", version)
    await asyncio.wait_for(serving, 20)
    assert all(task.done() for task in service.tasks)  # batcher and worker stopped
