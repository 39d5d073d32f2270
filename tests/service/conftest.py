"""What the service tests share: real stores, and the app running in-process with a client.

The tiny real bundle they serve (`bundle`) is built once per session in tests/conftest.py."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
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


@contextmanager
def ragmt_serve(work: Path, settings: dict[str, str]) -> Iterator[tuple[str, dict[str, str]]]:
    """A real `ragmt serve` process on a free loopback port with `settings` (RAGMT_*) on top
    of this environment, without Redis, ready; yields its base URL and environment. Its log is
    `work/server.log`; SIGTERM on exit."""
    port = free_port()
    env = {**os.environ, **settings, "RAGMT_PORT": str(port), "OMP_NUM_THREADS": "1"}
    env.pop("RAGMT_REDIS_URL", None)
    log = work / "server.log"
    code = "from service.cli import app; app(prog_name='ragmt')"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{base}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server never became ready"
            time.sleep(0.2)
        yield base, env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
