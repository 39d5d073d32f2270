"""What the service tests share: real stores, and the app running in-process with a client.

The tiny real bundle they serve (`bundle`) is built once per session in tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from index_builder.corpus import Pair
from index_builder.store import build_store, open_store, set_active


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
