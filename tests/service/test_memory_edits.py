"""A domain's memory edited live through the API: an added pair is retrieved by the next
translation with its provenance, corrections and deletions take effect at once, edits survive
a restart and a rollback, keys without edit scope are refused, a fold makes a version that
holds them, and a second replica on a real Redis serves an edit within a second."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from index_builder.edits import log_path, pair_key
from service.app import create_app
from service.settings import Settings
from tests.redis_server import RedisServer, free_port, has_redis_server
from tests.service.conftest import make_store, running, store_pairs
from tests.toy import toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADMIN = {"X-Admin-Key": "adm"}
NEW = ("frobnicate the widget", "das widget frobnizieren")


def settings(bundle: Path, stores: Path, **extra) -> Settings:
    base = dict(
        model_path=bundle,
        stores_dir=stores,
        admin_key="adm",
        beam_size=1,
        reconcile_interval_s=0.5,
        install_memories=False,
    )
    return Settings(**(base | extra))


async def neighbours(c: httpx.AsyncClient, text: str, headers: dict | None = None) -> dict:
    body = {"texts": [text], "domain": "toy", "return_neighbours": True}
    resp = await c.post("/v1/translate", json=body, headers=headers or {})
    assert resp.status_code == 200, resp.text
    return resp.json()["results"][0]


def stores_with_toy(tmp_path: Path, method: str = "idf-ngram") -> tuple[Path, str]:
    stores = tmp_path / "stores"
    version = make_store(stores, "toy", toy_pairs(40, seed=5), method=method, activate=True)
    return stores, version


async def test_add_correct_delete_are_served_at_once(bundle: Path, tmp_path: Path) -> None:
    stores, version = stores_with_toy(tmp_path)
    app = create_app(settings(bundle, stores))
    async with running(app) as c:
        before = await neighbours(c, NEW[0])
        assert all(n["origin"] == "store" for n in before["neighbours"])
        assert "edit_seq" not in before

        resp = await c.post(
            "/v1/domains/toy/memory", json={"source": NEW[0], "target": NEW[1]}, headers=ADMIN
        )
        assert resp.status_code == 201, resp.text
        edit = resp.json()["edit"]
        assert (edit["seq"], edit["op"], edit["by"]) == (1, "add", "admin")
        assert edit["key"] == pair_key(*NEW) and resp.json()["store_version"] == version

        after = await neighbours(c, NEW[0])
        top = after["neighbours"][0]
        assert (top["source"], top["target"], top["origin"]) == (*NEW, "edit")
        assert top["edit"]["seq"] == 1 and top["pair_id"] == -1 and top["key"] == edit["key"]
        assert after["edit_seq"] == 1 and after["store_version"] == version

        # correct it: the old pair is gone, the new one retrieved
        fixed = (NEW[0], "das widget frobnizieren!")
        resp = await c.put(
            f"/v1/domains/toy/memory/{edit['key']}",
            json={"source": fixed[0], "target": fixed[1]},
            headers=ADMIN,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["edit"]["old_key"] == edit["key"]
        got = [(n["source"], n["target"]) for n in (await neighbours(c, NEW[0]))["neighbours"]]
        assert fixed in got and NEW not in got

        # delete a pair of the version itself, named by the key a neighbour carries
        hit = (await neighbours(c, "red blue green"))["neighbours"][0]
        assert hit["origin"] == "store"
        resp = await c.delete(f"/v1/domains/toy/memory/{hit['key']}", headers=ADMIN)
        assert resp.status_code == 200, resp.text
        again = (await neighbours(c, "red blue green"))["neighbours"]
        assert hit["key"] not in [n["key"] for n in again]

        # what the domain reports, and the search
        info = (await c.get("/v1/domains/toy")).json()["edits"]
        assert info | {"last_at": None} == {
            "seq": 3,
            "folded_through": 0,
            "pending": 3,
            "added": 1,
            "removed": 2,
            "last_at": None,
            "bad_lines": [],
        }
        found = (await c.get("/v1/domains/toy/memory", params={"q": NEW[0]})).json()
        assert found["pairs"][0]["target"] == fixed[1] and found["pairs"][0]["origin"] == "edit"
        recent = (await c.get("/v1/domains/toy/memory")).json()["edits"]
        assert [e["seq"] for e in recent] == [3, 2, 1]

    # a restart serves the same memory
    app = create_app(settings(bundle, stores))
    async with running(app) as c:
        got = [(n["source"], n["target"]) for n in (await neighbours(c, NEW[0]))["neighbours"]]
        assert got[0] == fixed


async def test_bad_edits_are_refused_and_nothing_is_written(bundle: Path, tmp_path: Path) -> None:
    stores, _ = stores_with_toy(tmp_path)
    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            [
                {"name": "reader", "key": "k-read", "translate": ["toy"], "neighbours": ["toy"]},
                {
                    "name": "anna",
                    "key": "k-edit",
                    "translate": ["toy"],
                    "neighbours": ["toy"],
                    "edit": ["toy"],
                },
            ]
        )
    )
    app = create_app(settings(bundle, stores, api_keys_file=keys))
    pair = {"source": NEW[0], "target": NEW[1]}
    async with running(app) as c:
        resp = await c.post("/v1/domains/toy/memory", json=pair)
        assert resp.status_code == 401, resp.text
        resp = await c.post("/v1/domains/toy/memory", json=pair, headers={"X-API-Key": "k-read"})
        assert resp.status_code == 403 and "edit" in resp.json()["error"]["message"]
        for body, why in [
            ({"source": " ", "target": "x"}, "source: empty"),
            ({"source": "a\x07b", "target": "x"}, "U+0007"),
        ]:
            resp = await c.post("/v1/domains/toy/memory", json=body, headers=ADMIN)
            assert resp.status_code == 422 and why in resp.text, resp.text
        resp = await c.delete(f"/v1/domains/toy/memory/{'0' * 16}", headers=ADMIN)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_pair"
        resp = await c.post("/v1/domains/nope/memory", json=pair, headers=ADMIN)
        assert resp.status_code == 404
        assert not log_path(stores, "toy").exists()  # nothing was written

        # a key with edit scope may, and is named as the author
        resp = await c.post("/v1/domains/toy/memory", json=pair, headers={"X-API-Key": "k-edit"})
        assert resp.status_code == 201 and resp.json()["edit"]["by"] == "anna"


async def test_rollback_keeps_edits_and_fold_builds_a_version_with_them(
    bundle: Path, tmp_path: Path
) -> None:
    stores, first = stores_with_toy(tmp_path)
    second = make_store(stores, "toy", toy_pairs(40, seed=6), method="idf-ngram")
    app = create_app(settings(bundle, stores))
    async with running(app) as c:
        resp = await c.post(
            "/v1/domains/toy/memory", json={"source": NEW[0], "target": NEW[1]}, headers=ADMIN
        )
        assert resp.status_code == 201
        for version in (second, first):  # activate another version, then go back
            resp = await c.post(
                "/v1/domains/toy/activate", json={"version": version}, headers=ADMIN
            )
            assert resp.status_code == 200, resp.text
            top = (await neighbours(c, NEW[0]))["neighbours"][0]
            assert (top["source"], top["origin"]) == (NEW[0], "edit")

        resp = await c.post("/v1/domains/toy/memory/fold", headers=ADMIN)
        assert resp.status_code == 202, resp.text
        job = resp.json()
        for _ in range(200):
            job = (await c.get(f"/v1/jobs/{job['id']}", headers=ADMIN)).json()
            if job["state"] in ("done", "failed"):
                break
            await asyncio.sleep(0.05)
        assert job["state"] == "done", job
        folded = job["result"]["version"]
        pairs = store_pairs(stores, "toy", folded)
        assert pairs[-1] == NEW and len(pairs) == len(store_pairs(stores, "toy", first)) + 1
        resp = await c.post("/v1/domains/toy/activate", json={"version": folded}, headers=ADMIN)
        assert resp.status_code == 200
        result = await neighbours(c, NEW[0])
        top = result["neighbours"][0]
        # served from the version now: the edit is folded, nothing pending
        assert (top["source"], top["origin"]) == (NEW[0], "store")
        domain = (await c.get("/v1/domains/toy")).json()
        info = domain["edits"]
        assert (info["seq"], info["folded_through"], info["pending"]) == (1, 1, 0)
        details = {v["version"]: v for v in domain["version_info"]}
        assert [v["version"] for v in domain["version_info"]] == domain["versions"]
        assert details[folded]["edits_through"] == 1 and details[folded]["folded_from"] == first
        assert details[folded]["pairs"] == details[first]["pairs"] + 1
        assert details[first]["size_bytes"] > 0 and details[first]["method"] == "idf-ngram"
        resp = await c.post("/v1/domains/toy/memory/fold", headers=ADMIN)
        assert resp.status_code == 409


@pytest.mark.system
async def test_an_edit_reaches_a_second_replica_within_a_second(
    bundle: Path, tmp_path: Path
) -> None:
    if not has_redis_server():
        pytest.skip("needs redis-server (Debian package redis-server)")
    server = RedisServer(free_port())
    server.start()
    try:
        stores, _ = stores_with_toy(tmp_path)
        s = settings(
            bundle, stores, redis_url=server.url, redis_prefix="edits", reconcile_interval_s=30
        )
        one, two = create_app(s), create_app(s)
        async with running(one) as c1, running(two) as c2:
            assert two.state.service.backends.kind == "redis"
            waits = []
            for i in range(5):
                pair = {"source": f"frobnicate widget number {i}", "target": f"widget {i}"}
                resp = await c1.post("/v1/domains/toy/memory", json=pair, headers=ADMIN)
                assert resp.status_code == 201, resp.text
                start = time.monotonic()
                while True:
                    found = (await neighbours(c2, pair["source"]))["neighbours"]
                    if found and found[0]["target"] == pair["target"]:
                        break
                    assert time.monotonic() - start < 1.0, "not on the second replica in 1 s"
                    await asyncio.sleep(0.01)
                waits.append(time.monotonic() - start)
            assert max(waits) < 1.0
    finally:
        server.stop()


async def test_edits_are_folded_and_activated_at_the_mark(bundle: Path, tmp_path: Path) -> None:
    stores, first = stores_with_toy(tmp_path)
    app = create_app(settings(bundle, stores, fold_edits_at=2))
    async with running(app) as c:
        for i in range(3):
            pair = {"source": f"frobnicate gadget {i}", "target": f"gadget {i} frobnizieren"}
            resp = await c.post("/v1/domains/toy/memory", json=pair, headers=ADMIN)
            assert resp.status_code == 201, resp.text
        for _ in range(200):  # the second edit queued the fold; it activates when built
            domain = (await c.get("/v1/domains/toy")).json()
            if domain["active_version"] != first:
                break
            await asyncio.sleep(0.05)
        folded = domain["active_version"]
        assert folded != first
        info = {v["version"]: v for v in domain["version_info"]}[folded]
        assert (info["edits_through"], info["folded_from"]) == (2, first)
        assert domain["edits"] | {"last_at": None} == {
            "seq": 3, "folded_through": 2, "pending": 1, "added": 1, "removed": 0,
            "last_at": None, "bad_lines": [],
        }  # fmt: skip
        got = {(n["source"], n["origin"]) for n in (await neighbours(c, "frobnicate gadget 0"))[
            "neighbours"
        ]}  # fmt: skip
        assert ("frobnicate gadget 0", "store") in got  # folded: a row of the version now
        got = [(n["source"], n["origin"]) for n in (await neighbours(c, "frobnicate gadget 2"))[
            "neighbours"
        ]]  # fmt: skip
        assert got[0] == ("frobnicate gadget 2", "edit")  # after the mark: still an edit
