"""What the service tests share: real stores, and the app running in-process with a client.

The tiny real bundle they serve (`bundle`) is built once per session in tests/conftest.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from index_builder.corpus import Pair
from index_builder.store import build_store, open_store, set_active
from service.server import DrainingServer, uvicorn_config


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_store(
    stores_dir: Path,
    domain: str,
    pairs: list[tuple[str, str]],
    method: str = "idf-sentence",
    activate: bool = False,
) -> str:
    """Build a real store version of `pairs` (optionally made ACTIVE); return its id."""
    path = build_store([Pair(s, t) for s, t in pairs], domain, method, stores_dir)
    if activate:
        set_active(stores_dir, domain, path.name)
    return path.name


def store_pairs(stores_dir: Path, domain: str, version: str) -> list[tuple[str, str]]:
    """The pairs a version holds, read back through the verified store."""
    pairs = open_store(stores_dir / domain / version).pairs
    return [(pairs.sources[i], pairs.targets[i]) for i in range(len(pairs))]


@asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, and an async client talking to it in-process."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ragmt.test") as c:
            yield c


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Uncaptured(list):
    """uvicorn re-raises the signals it handled once it has stopped: not in this test process."""

    def append(self, sig: int) -> None:
        pass


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[str]:
    """Serve `app` with uvicorn on a free loopback port; yields the base URL."""
    port = free_port()
    config = uvicorn_config(app, app.state.settings, port=port, log_level="warning")
    server = DrainingServer(config, app)
    server._captured_signals = Uncaptured()
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "server failed to start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
