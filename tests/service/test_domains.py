"""Hot swap of domain stores on real stores and the real tiny bundle: leases, failed
activation, rollback, deletion, readiness and replicas converging through the registry."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import httpx
import pytest

from index_builder.store import active_version, set_active
from service.app import create_app
from service.settings import Settings
from service.shared import memory_backends
from tests.service.conftest import make_store, running, store_pairs
from tests.toy import LEXICON, gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADMIN = {"Authorization": "Bearer admin-secret"}
DOMAIN = "toy"


def settings(bundle: Path, stores: Path, **extra) -> Settings:
    base = dict(
        model_path=bundle,
        stores_dir=stores,
        admin_key="admin-secret",
        cache_ttl_s=0,  # every request retrieves and decodes: the swap is exercised each time
        beam_size=1,
        batch_wait_ms=2,
        reconcile_interval_s=60,
    )
    return Settings(**(base | extra))


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, str, str]:
    """A domain with two real versions, A active and B built, of different corpora."""
    root = tmp_path / "stores"
    a = make_store(root, DOMAIN, toy_pairs(40, seed=11), activate=True)
    time.sleep(0.002)  # version ids sort by build time to the ms: B is strictly newer
    b = make_store(root, DOMAIN, toy_pairs(40, seed=12), method="idf-ngram")
    return root, a, b


async def translate(c: httpx.AsyncClient, texts: list[str], **extra) -> httpx.Response:
    body = {"texts": texts, "domain": DOMAIN, "return_neighbours": True, **extra}
    return await c.post("/v1/translate", json=body)


async def activate(c: httpx.AsyncClient, version: str) -> httpx.Response:
    return await c.post(f"/v1/domains/{DOMAIN}/activate", json={"version": version}, headers=ADMIN)


async def domain_info(c: httpx.AsyncClient) -> dict:
    resp = await c.get(f"/v1/domains/{DOMAIN}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def check_neighbours(result: dict, pairs: dict[str, list[tuple[str, str]]]) -> None:
    """Every neighbour is the pair with that id in the version the result names."""
    held = pairs[result["store_version"]]
    assert result["neighbours"], result
    for n in result["neighbours"]:
        assert held[n["pair_id"]] == (n["source"], n["target"])


async def test_hot_swap_while_requests_flow(bundle: Path, stores) -> None:
    root, a, b = stores
    pairs = {v: store_pairs(root, DOMAIN, v) for v in (a, b)}
    app = create_app(settings(bundle, root))
    words = sorted(LEXICON)
    async with running(app) as c:
        swapping = True
        responses: list[tuple[list[str], httpx.Response]] = []

        async def client(seed: int) -> None:
            rng = random.Random(seed)
            while swapping or len(responses) < 60:
                texts = [" ".join(rng.sample(words, rng.randint(1, 3))) for _ in range(2)]
                responses.append((texts, await translate(c, texts)))

        async def operator() -> None:
            nonlocal swapping
            for i in range(8):
                await asyncio.sleep(0.05)
                resp = await activate(c, b if i % 2 == 0 else a)
                assert resp.status_code == 200, resp.text
            swapping = False

        await asyncio.gather(operator(), *(client(s) for s in range(12)))
        info = await domain_info(c)

    assert len(responses) >= 60
    versions = set()
    for texts, resp in responses:
        assert resp.status_code == 200, resp.text
        results = resp.json()["results"]
        assert [r["translation"] for r in results] == [gloss(t) for t in texts]
        for r in results:
            assert r["store_version"] in (a, b) and r["domain"] == DOMAIN
            check_neighbours(r, pairs)
            versions.add(r["store_version"])
    assert versions == {a, b}  # both versions served while swapping
    # Eight swaps ended on A; every replaced version was released when its requests ended.
    assert info["active_version"] == a
    assert info["loaded"] == [{"version": a, "leases": 0, "active": True}]


async def test_request_keeps_its_version_until_its_last_decoding_step(bundle: Path, stores) -> None:
    root, a, b = stores
    app = create_app(settings(bundle, root))
    async with running(app) as c:
        engine = app.state.engine
        state = app.state.service.domains.state(DOMAIN)
        old = state.active
        engine._decode_lock.acquire()  # hold decoding: the request stays in flight
        try:
            pending = asyncio.create_task(translate(c, ["red house"]))
            while old.leases == 0:
                await asyncio.sleep(0.01)
            assert (await activate(c, b)).status_code == 200
            # Swapped, but the in-flight request still holds A: retired, not closed.
            assert state.active.version == b
            assert (old.retired, old.closed, old.leases) == (True, False, 1)
            info = await domain_info(c)
            assert {x["version"]: x["leases"] for x in info["loaded"]} == {a: 1, b: 0}
        finally:
            engine._decode_lock.release()
        resp = await pending
        assert resp.json()["results"][0]["store_version"] == a
        assert (old.closed, old.store, old.retriever) == (True, None, None)  # released
        after = await translate(c, ["red house"])
        assert after.json()["results"][0]["store_version"] == b


async def test_failed_activation_keeps_the_old_version(bundle: Path, stores) -> None:
    root, a, b = stores
    sources = root / DOMAIN / b / "sources.bin"
    data = bytearray(sources.read_bytes())
    data[0] ^= 0x01  # tampered: the checksum no longer matches
    sources.write_bytes(bytes(data))
    app = create_app(settings(bundle, root))
    async with running(app) as c:
        resp = await activate(c, b)
        assert resp.status_code == 422, resp.text
        err = resp.json()["error"]
        assert err["code"] == "activation_failed" and "checksum" in err["message"]
        assert (err["version"], err["serving"]) == (b, a)
        assert str(root) not in resp.text  # no server paths in client-visible errors
        info = await domain_info(c)
        assert (info["state"], info["active_version"]) == ("active", a)
        last = info["last_attempt"]
        assert (last["version"], last["ok"]) == (b, False) and "checksum" in last["error"]
        served = await translate(c, ["blue tree"])
        assert served.status_code == 200
        assert served.json()["results"][0]["store_version"] == a
        missing = await activate(c, "20990101T000000.000Z-deadbeef")
        assert missing.json()["error"]["code"] == "activation_failed"
        metrics = (await c.get("/metrics")).text
        assert 'ragmt_store_swap_failures_total{domain="toy"} 2.0' in metrics
    assert active_version(root, DOMAIN) == a  # the ACTIVE file never moved


async def test_activation_is_idempotent_and_rollback_walks_back(bundle: Path, stores) -> None:
    root, a, b = stores
    app = create_app(settings(bundle, root))
    async with running(app) as c:
        assert (await activate(c, b)).status_code == 200
        loaded = app.state.service.domains.state(DOMAIN).active
        again = await activate(c, b)
        assert again.status_code == 200 and again.json()["previous_version"] == a
        assert app.state.service.domains.state(DOMAIN).active is loaded  # not reloaded
        assert active_version(root, DOMAIN) == b
        resp = await c.post(f"/v1/domains/{DOMAIN}/rollback", headers=ADMIN)
        assert resp.status_code == 200, resp.text
        assert (resp.json()["active_version"], resp.json()["previous_version"]) == (a, None)
        assert active_version(root, DOMAIN) == a
        served = await translate(c, ["one two"])
        assert served.json()["results"][0]["store_version"] == a
        # Nothing was active before A (it is the oldest version): a clear 409.
        resp = await c.post(f"/v1/domains/{DOMAIN}/rollback", headers=ADMIN)
        assert resp.status_code == 409 and resp.json()["error"]["code"] == "conflict"


async def test_delete_refuses_the_active_version(bundle: Path, stores) -> None:
    root, a, b = stores
    app = create_app(settings(bundle, root))
    async with running(app) as c:
        url = f"/v1/domains/{DOMAIN}/versions"
        resp = await c.delete(f"{url}/{a}", headers=ADMIN)
        assert resp.status_code == 409 and "active" in resp.json()["error"]["message"]
        assert (root / DOMAIN / a).is_dir()
        resp = await c.delete(f"{url}/{b}", headers=ADMIN)
        assert resp.status_code == 200 and resp.json() == {"domain": DOMAIN, "deleted": b}
        assert not (root / DOMAIN / b).exists()
        assert sorted(p.name for p in (root / DOMAIN).iterdir()) == sorted([a, "ACTIVE"])
        assert (await domain_info(c))["versions"] == [a]
        resp = await c.delete(f"{url}/{b}", headers=ADMIN)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_version"
        resp = await c.delete(f"{url}/.hidden", headers=ADMIN)
        assert resp.status_code == 422


async def test_replicas_converge_through_the_registry(bundle: Path, stores) -> None:
    root, a, b = stores
    shared = memory_backends()
    one = create_app(settings(bundle, root), backends=shared)
    two = create_app(settings(bundle, root), backends=shared)
    async with running(one) as c1, running(two) as c2:
        assert (await activate(c1, b)).status_code == 200
        for _ in range(300):  # the listener reconciles replica two within moments
            if (await domain_info(c2))["active_version"] == b:
                break
            await asyncio.sleep(0.01)
        served = await translate(c2, ["green"])
        assert served.json()["results"][0]["store_version"] == b
        # A change the listener never heard of (pub/sub lost it): a reconnect's "" message
        # reconciles everything.
        shared.registry._active[DOMAIN] = a  # type: ignore[attr-defined]
        manager = two.state.service.domains
        await manager._on_change("", None)
        for _ in range(300):  # the disk follows the registry, right after the replica
            if manager.state(DOMAIN).active.version == a and active_version(root, DOMAIN) == a:
                break
            await asyncio.sleep(0.01)
        assert manager.state(DOMAIN).active.version == a
        assert active_version(root, DOMAIN) == a
        # A replica that starts later takes the registry's version, not a stale ACTIVE file's,
        # and mends the file.
        set_active(root, DOMAIN, b)
        three = create_app(settings(bundle, root), backends=shared)
        async with running(three) as c3:
            assert (await domain_info(c3))["active_version"] == a
            assert active_version(root, DOMAIN) == a


async def test_reconcile_applies_what_the_registry_says_once_it_has_the_lock(
    bundle: Path, stores
) -> None:
    """A reconcile queued behind an activation must not apply the registry's older value."""
    root, a, b = stores
    shared = memory_backends()
    app = create_app(settings(bundle, root), backends=shared)
    async with running(app):
        manager = app.state.service.domains
        state = manager.state(DOMAIN)
        assert state.active.version == a
        await state.lock.acquire()  # an activation in progress
        try:
            waiting = asyncio.create_task(manager.reconcile(DOMAIN))
            await asyncio.sleep(0.05)
            shared.registry._active[DOMAIN] = b  # type: ignore[attr-defined]
        finally:
            state.lock.release()
        await waiting
        assert state.active.version == b


async def test_readiness_waits_for_required_domains(bundle: Path, tmp_path: Path) -> None:
    root = tmp_path / "stores"
    version = make_store(root, DOMAIN, toy_pairs(30, seed=3))  # built, never activated
    app = create_app(settings(bundle, root, required_domains=[DOMAIN]))
    async with running(app) as c:
        resp = await c.get("/readyz")
        assert resp.status_code == 503 and DOMAIN in resp.json()["error"]["message"]
        info = await domain_info(c)
        assert (info["state"], info["versions"]) == ("inactive", [version])
        resp = await translate(c, ["one"])
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "domain_not_ready"
        assert (await activate(c, version)).status_code == 200
        assert (await c.get("/readyz")).status_code == 200
        listed = (await c.get("/v1/domains")).json()["domains"]
        assert [d["domain"] for d in listed] == ["general", DOMAIN]
        resp = await translate(c, ["one"], domain="nope")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_domain"
        app.state.service.draining = True
        assert (await c.get("/readyz")).status_code == 503
        resp = await translate(c, ["one"])
        assert resp.status_code == 503 and "draining" in resp.json()["error"]["message"]
