"""What the whole suite shares: the test tiers, a Redis, and the tiny real bundle.

Tiers, as Sockeye splits its tests (`python -m pytest -m unit` runs one):
  unit         one function or class; no server, no training beyond a few steps
  integration  several parts together in-process: a toy model trained, a store built, the
               app run through httpx's ASGI transport or the CLI through typer's runner
  system       real processes: the `ragmt` command, uvicorn over loopback, redis-server,
               the deployment scripts, the README's quick start
A module names its tier in `pytestmark`; a test of another tier in it carries its own tier
marker, which replaces the module's. A test left without a tier, or given two at one level,
stops the collection.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.redis_server import (
    MISSING,
    SHARED_PORT,
    RedisServer,
    answers,
    free_port,
    has_redis_server,
    url_of,
)

# A server started by a test (in-process or a child process) builds no shipped memory into its
# stores directory unless the test asks for one (tests/index_builder/test_memories.py does).
os.environ.setdefault("RAGMT_INSTALL_MEMORIES", "0")
from tests.toy_bundle import build_memory_bundle, build_toy_bundle

# One thread: the test machine is small and shared, and more threads only contend.
torch.set_num_threads(1)

TIERS = ("unit", "integration", "system")


def _declared_tier(item: pytest.Item) -> tuple[str | None, str | None]:
    """(tier, problem): the tier named nearest the test (the test, its class, its module)."""
    for node in reversed(item.listchain()):
        names = sorted({m.name for m in node.own_markers if m.name in TIERS})
        if len(names) > 1:
            return None, f"{' and '.join(names)} on {node.nodeid or 'the session'}"
        if names:
            return names[0], None
    return None, "no tier marker"


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is checked
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers, problems = {}, []
    for item in items:
        tier, problem = _declared_tier(item)
        if problem:
            problems.append(f"  {item.nodeid}: {problem}")
        tiers[item] = tier
    if problems:
        raise pytest.UsageError(
            "each test needs exactly one tier marker (pytest.mark.unit, .integration or "
            ".system), from `pytestmark` in its module or on the test itself:\n"
            + "\n".join(problems)
        )
    # `-m` reads every marker up the chain: keep the tier on the test alone, so that a test
    # whose own tier replaces its module's is selected by its own tier only.
    for item in items:
        for node in item.listchain()[:-1]:
            node.own_markers[:] = [m for m in node.own_markers if m.name not in TIERS]
        if not any(m.name in TIERS for m in item.own_markers):
            item.add_marker(tiers[item])


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis for the tests that need one: a private redis-server on a free loopback port
    (never one that other programs share); without the binary, the Redis answering on
    127.0.0.1:6379, where every test keeps to its own key prefix; else the test is skipped."""
    if has_redis_server():
        server = RedisServer(free_port())
        server.start()
        try:
            yield server.url
        finally:
            server.stop()
    elif answers(SHARED_PORT):
        yield url_of(SHARED_PORT)
    else:
        pytest.skip(MISSING)


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of a verified en->de bundle named "toy-en-de" (about 6 s to build), shared by
    every test that serves, translates with or encodes through a real model."""
    return build_toy_bundle(tmp_path_factory.mktemp("service-bundle"))


@pytest.fixture(scope="session")
def memory_bundle(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`bundle` warm-started into a semi-parametric bundle "toy-memory" (memory untrained)."""
    return build_memory_bundle(bundle, tmp_path_factory.mktemp("memory-bundle") / "toy-memory")
