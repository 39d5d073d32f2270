"""Load and abuse: translation cache keys, rate limits, the bounded decoding queue, limits on
input, and the metrics that report them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from models.translator import DecodeOptions
from service.app import create_app
from service.result_cache import ResultCache
from service.settings import Settings
from tests.service.conftest import make_store, running
from tests.toy import gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADMIN = {"X-Admin-Key": "adm"}


def settings(bundle: Path, stores: Path, **extra) -> Settings:
    base = dict(model_path=bundle, stores_dir=stores, admin_key="adm", beam_size=1)
    return Settings(**(base | extra))


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Path, str, str]:
    root = tmp_path / "stores"
    a = make_store(root, "toy", toy_pairs(30, seed=21), activate=True)
    b = make_store(root, "toy", toy_pairs(30, seed=22))
    return root, a, b


async def test_cache_key_includes_the_store_version(bundle: Path, stores) -> None:
    root, a, b = stores
    app = create_app(settings(bundle, root, cache_ttl_s=600))
    body = {"texts": ["red house", "two"], "domain": "toy", "return_neighbours": True}
    async with running(app) as c:

        async def served() -> tuple[str, int, list]:
            resp = await c.post("/v1/translate", json=body)
            assert resp.status_code == 200, resp.text
            r = resp.json()
            assert [x["translation"] for x in r["results"]] == ["rot haus", "zwei"]
            return r["results"][0]["store_version"], r["timings"]["cache_hits"], r["results"]

        first = await served()
        assert first[:2] == (a, 0)
        again = await served()
        assert again == (a, 2, first[2])  # cached, neighbours included
        await c.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
        assert (await served())[:2] == (b, 0)  # a new version is a new key: no stale entry
        assert (await served())[:2] == (b, 2)
        await c.post("/v1/domains/toy/activate", json={"version": a}, headers=ADMIN)
        assert (await served())[:2] == (a, 2)
        metrics = (await c.get("/metrics")).text
        assert 'ragmt_cache_lookups_total{result="hit"} 6.0' in metrics
        assert 'ragmt_cache_lookups_total{result="miss"} 4.0' in metrics
        assert "ragmt_cache_hit_ratio 0.6" in metrics

        model = app.state.engine.models[0]
        one = DecodeOptions(beam_size=1)
        pair = ("en", "de")

        def key_of(version, domain, options, text, pair=pair, weights=model.weights_sha256):
            return ResultCache.key(weights, pair, version, domain, options, text)

        key = key_of(a, "toy", one, "red house")
        assert key == key_of(a, "toy", one, "red house")
        for other in (
            key_of(b, "toy", one, "red house"),
            key_of(None, "toy", one, "red house"),
            key_of(a, "general", one, "red house"),
            key_of(a, "toy", DecodeOptions(beam_size=2), "red house"),
            key_of(a, "toy", DecodeOptions(beam_size=1, neighbours_k=3), "red house"),
            key_of(a, "toy", DecodeOptions(beam_size=1, split_sentences=False), "red house"),
            key_of(a, "toy", one, "red house "),
            key_of(a, "toy", one, "red house", pair=("en", "fr")),
            key_of(a, "toy", one, "red house", weights="0" * 64),
        ):
            assert other != key


async def test_rate_limit_is_429_with_retry_after(bundle: Path, tmp_path: Path) -> None:
    s = settings(bundle, tmp_path, rate_limit=3, rate_window_s=30, api_keys="k1,k2")
    app = create_app(s)
    body = {"texts": ["one"]}
    async with running(app) as c:
        k1, k2 = {"X-API-Key": "k1"}, {"X-API-Key": "k2"}
        for _ in range(3):
            assert (await c.post("/v1/translate", json=body, headers=k1)).status_code == 200
        resp = await c.post("/v1/translate", json=body, headers=k1)
        assert resp.status_code == 429, resp.text
        err = resp.json()["error"]
        assert (err["code"], err["limit"], err["max"]) == ("rate_limited", "rate_limit", 3)
        assert 1 <= int(resp.headers["retry-after"]) <= 30 and err["retry_after"] >= 1
        lt = {"q": "one", "source": "en", "target": "de", "api_key": "k1"}
        resp = await c.post("/translate", json=lt)  # the same key's budget on LibreTranslate
        assert resp.status_code == 429 and "retry-after" in resp.headers
        assert (await c.post("/v1/translate", json=body, headers=k2)).status_code == 200
        metrics = (await c.get("/metrics", headers=ADMIN)).text
        assert 'ragmt_rejections_total{reason="rate_limited"} 2.0' in metrics
        assert "k1" not in metrics and "127.0.0.1" not in metrics


async def test_made_up_keys_buy_no_budget_when_keys_are_not_required(
    bundle: Path, tmp_path: Path
) -> None:
    # No API keys configured: any key is accepted unchecked, so the budget is the client's
    # address, whatever key each request names.
    app = create_app(settings(bundle, tmp_path, rate_limit=3, rate_window_s=30))
    body = {"texts": ["one"]}
    async with running(app) as c:
        codes = [
            (
                await c.post("/v1/translate", json=body, headers={"X-API-Key": f"made-up-{i}"})
            ).status_code
            for i in range(5)
        ]
        assert codes == [200, 200, 200, 429, 429]
        lt = {"q": "one", "source": "en", "target": "de", "api_key": "another"}
        assert (await c.post("/translate", json=lt)).status_code == 429


async def test_full_queue_is_refused_at_once(bundle: Path, tmp_path: Path) -> None:
    s = settings(
        bundle, tmp_path, max_texts=4, queue_size=4, batch_size=4, batch_wait_ms=0, cache_ttl_s=0
    )
    app = create_app(s)
    four = {"texts": ["one", "two", "three", "four"]}
    async with running(app) as c:
        engine = app.state.engine
        engine._decode_lock.acquire()  # decoding stalls: the queue fills up
        try:
            first = asyncio.create_task(c.post("/v1/translate", json=four))
            while engine.queued or not engine._decode_lock.locked():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the first batch is now stuck in decoding
            second = asyncio.create_task(c.post("/v1/translate", json=four))
            while engine.queued < 4:
                await asyncio.sleep(0.01)
            start = time.monotonic()
            resp = await c.post("/v1/translate", json={"texts": ["five"]})
            assert time.monotonic() - start < 2  # answered while decoding is still stuck
            assert resp.status_code == 503, resp.text
            err = resp.json()["error"]
            assert (err["code"], err["limit"], err["max"]) == ("overloaded", "queue_size", 4)
            assert resp.headers["retry-after"] == "1"
            depth = (await c.get("/metrics")).text
            assert "ragmt_queue_depth 4.0" in depth
        finally:
            engine._decode_lock.release()
        for task in (first, second):  # nothing admitted was lost
            done = await task
            assert done.status_code == 200
            assert [r["translation"] for r in done.json()["results"]] == [
                gloss(t) for t in four["texts"]
            ]
        metrics = (await c.get("/metrics")).text
        assert 'ragmt_rejections_total{reason="queue_full"} 1.0' in metrics


async def test_a_request_within_the_limits_is_served_however_many_sentences_it_holds(
    bundle: Path, tmp_path: Path
) -> None:
    # The queue's bound counts texts, as admission does: two texts of five sentences each fit
    # a queue of four texts (they once counted as ten and were refused forever).
    s = settings(bundle, tmp_path, max_texts=2, queue_size=4, batch_size=4, cache_ttl_s=0)
    app = create_app(s)
    text = " ".join(["Red house."] * 5)
    async with running(app) as c:
        for _ in range(2):
            resp = await c.post("/v1/translate", json={"texts": [text, text]})
            assert resp.status_code == 200, resp.text
            assert len(resp.json()["results"]) == 2
        assert "ragmt_queue_depth 0.0" in (await c.get("/metrics")).text


async def test_concurrent_requests_share_decoding_batches(bundle: Path, tmp_path: Path) -> None:
    app = create_app(settings(bundle, tmp_path, batch_size=16, batch_wait_ms=50, cache_ttl_s=0))
    texts = ["one", "two house", "red", "blue tree", "green", "five four", "three", "house"]
    async with running(app) as c:
        resps = await asyncio.gather(*(c.post("/v1/translate", json={"texts": [t]}) for t in texts))
        assert [r.json()["results"][0]["translation"] for r in resps] == [gloss(t) for t in texts]
        metrics = (await c.get("/metrics")).text
    count = float(metrics.split("ragmt_batch_texts_count ")[1].split()[0])
    assert count < len(texts)  # fewer decoding batches than requests


@pytest.mark.parametrize(
    ("payload", "status", "code", "field"),
    [
        ({"texts": ["one"], "domain": "../../etc"}, 404, "unknown_domain", None),
        ({"texts": ["one"], "domain": "medical"}, 404, "unknown_domain", None),
        ({"texts": ["one"], "model": "nope"}, 404, "unknown_model", None),
        (
            {"texts": ["one"], "return_neighbours": "yes"},
            422,
            "invalid_request",
            "return_neighbours",
        ),
        ({"texts": []}, 422, "invalid_input", "texts"),
        ({"texts": ["one"] * 3}, 422, "limit_exceeded", "texts"),
        ({"texts": ["x" * 31]}, 422, "limit_exceeded", "texts.0"),
        ({"texts": ["one"], "target_lang": "xx"}, 422, "unsupported_language", None),
    ],
)
async def test_bad_input_is_a_4xx_naming_the_problem(
    bundle: Path, stores, payload, status, code, field
) -> None:
    root, _, _ = stores
    app = create_app(settings(bundle, root, max_texts=2, max_chars=30, queue_size=8))
    async with running(app) as c:
        resp = await c.post("/v1/translate", json=payload)
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["code"] == code and "Traceback" not in resp.text
    if field is not None:
        assert err["field"] == field
    if code == "limit_exceeded":
        assert err["limit"] in err["message"]


async def test_upload_over_its_limit_is_413(bundle: Path, tmp_path: Path) -> None:
    app = create_app(settings(bundle, tmp_path, max_upload_bytes=2000, max_body_bytes=100_000))
    async with running(app) as c:
        corpus = b"one\teins\n" * 400
        resp = await c.post(
            "/v1/domains/toy/corpora", files={"file": ("c.tsv", corpus)}, headers=ADMIN
        )
        assert resp.status_code == 413
        assert resp.json()["error"]["limit"] == "max_upload_bytes"


async def test_metrics_exposition_has_the_series(bundle: Path, stores) -> None:
    root, a, b = stores
    app = create_app(settings(bundle, root))
    async with running(app) as c:
        await c.post("/v1/translate", json={"texts": ["one"], "domain": "toy"})
        await c.post("/v1/domains/toy/activate", json={"version": b}, headers=ADMIN)
        await c.post("/v1/domains/toy/activate", json={"version": "nope-1"}, headers=ADMIN)
        resp = await c.get("/metrics")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    text = resp.text
    for series in (
        f'ragmt_translate_seconds_bucket{{domain="toy",le="0.005",store_version="{a}"}}',
        'ragmt_retrieval_seconds_count{domain="toy"} 1.0',
        "ragmt_queue_depth 0.0",
        "ragmt_batch_texts_count 1.0",
        "ragmt_cache_hit_ratio",
        'ragmt_store_swap_seconds_count{domain="toy",outcome="ok"}',
        'ragmt_store_swap_seconds_count{domain="toy",outcome="failed"} 1.0',
        'ragmt_store_swap_failures_total{domain="toy"} 1.0',
        'ragmt_store_versions_loaded{domain="toy"} 1.0',
        "# TYPE ragmt_rejections_total counter",
    ):
        assert series in text, series
