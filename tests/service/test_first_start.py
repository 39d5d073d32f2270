"""A fresh stores directory: the first start builds the shipped general memory, and the
`general` domain is translated with it from the first request (issue 33)."""

from __future__ import annotations

from pathlib import Path

import pytest

from index_builder.memories import SHIPPED, shipped_memories
from service.app import create_app
from service.settings import Settings
from tests.service.conftest import running

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_the_first_start_serves_general_with_the_shipped_memory(
    bundle: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    settings = Settings(model_path=bundle, stores_dir=stores, install_memories=True)
    async with running(create_app(settings)) as c:
        info = (await c.get("/v1/domains/general")).json()
        assert info["active_version"], info
        body = {"texts": ["Cancel"], "return_neighbours": True}
        result = (await c.post("/v1/translate", json=body)).json()["results"][0]
    (memory,) = [m for m in shipped_memories(SHIPPED) if m.domain == "general"]
    assert result["store_version"] == info["active_version"]
    assert ("Cancel", "Abbrechen") in [(n["source"], n["target"]) for n in result["neighbours"]]
    assert memory.manifest["pairs"] > 100_000


async def test_a_stores_directory_that_cannot_take_it_is_served_as_it_is(
    bundle: Path, tmp_path: Path
) -> None:
    blocked = tmp_path / "stores"
    blocked.write_text("a file where the stores directory should be")
    settings = Settings(model_path=bundle, stores_dir=blocked, install_memories=True)
    async with running(create_app(settings)) as c:
        resp = await c.post("/v1/translate", json={"texts": ["red house"]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["results"][0]["store_version"] is None
