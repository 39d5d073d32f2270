"""The HTTP API end to end on a real tiny bundle: translations, limits, errors, health, info."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from models.translator import DEFAULT_BUNDLE
from service.app import create_app
from service.engine import Limits, TranslationEngine, TranslationRequest
from service.settings import Settings, check_environment, known_variables
from tests.service.conftest import make_store
from tests.toy import gloss
from tests.toy_bundle import HELD_OUT

pytestmark = pytest.mark.integration

URL = "/v1/translate"
JSON = {"content-type": "application/json"}
LIMITS = dict(max_texts=4, max_chars=60, max_body_bytes=4096, beam_size=2, max_beam_size=4)


def settings(model_path: Path) -> Settings:
    # No stores directory: only the general domain, served without retrieval.
    return Settings(model_path=model_path, stores_dir=model_path.parent / "no-stores", **LIMITS)


@pytest.fixture(scope="module")
def client(bundle: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(bundle))) as c:  # `with`: the lifespan runs
        yield c


def error_of(resp, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    assert "Traceback" not in resp.text
    err = resp.json()["error"]
    assert isinstance(err["code"], str) and isinstance(err["message"], str)
    return err


def test_translate_held_out_sentence_exactly(client: TestClient) -> None:
    resp = client.post(URL, json={"texts": [HELD_OUT], "source_lang": "en", "target_lang": "de"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["results"] == [
        {
            "translation": "rot baum zwei haus",
            "model": "toy-en-de",
            "domain": "general",
            "store_version": None,
        }
    ]
    timings = body["timings"]
    assert timings["total_ms"] >= timings["decode_ms"] > 0
    assert (timings["retrieval_ms"], timings["cache_hits"]) == (0, 0)


def test_batch_order_preserved_and_options(client: TestClient) -> None:
    texts = ["green tree blue house", "blue", HELD_OUT, "three one"]
    for extra in ({}, {"beam_size": 1}, {"model": "default", "domain": "general"}):
        resp = client.post(URL, json={"texts": texts, "model": "toy-en-de", **extra})
        assert resp.status_code == 200, resp.text
        assert [r["translation"] for r in resp.json()["results"]] == [gloss(t) for t in texts]


def test_a_text_of_only_characters_the_tokenizer_drops_translates_to_empty(
    client: TestClient,
) -> None:
    """A zero-width space is not blank to validation but has no sub-word: an empty
    translation at its place, not a failed batch."""
    texts = ["one two", "\u200b", "blue"]
    resp = client.post(URL, json={"texts": texts})
    assert resp.status_code == 200, resp.text
    assert [r["translation"] for r in resp.json()["results"]] == [
        gloss("one two"),
        "",
        gloss("blue"),
    ]


def test_blank_texts_translate_to_blank_in_place(client: TestClient) -> None:
    """Blank texts are kept as blank translations (the CLI's rule for blank lines), so a
    tool sending a document's segments gets its results aligned, not a refused batch."""
    texts = ["one two", "", "  \n ", "blue"]
    resp = client.post(URL, json={"texts": texts, "return_neighbours": True})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [r["translation"] for r in results] == [gloss("one two"), "", "", gloss("blue")]
    assert results[1]["neighbours"] == [] and results[2]["neighbours"] == []


def test_engine_call_is_shared_with_non_http_callers(client: TestClient) -> None:
    engine: TranslationEngine = client.app.state.engine
    result = anyio.run(engine.translate_batch, TranslationRequest(texts=[HELD_OUT]))
    assert [r.translation for r in result.results] == [gloss(HELD_OUT)]


@pytest.mark.parametrize(
    ("payload", "limit"),
    [
        ({"texts": ["one"] * 5}, "max_texts"),
        ({"texts": ["one", "two " * 16]}, "max_chars"),
        ({"texts": ["one"], "beam_size": 5}, "max_beam_size"),
    ],
)
def test_limits_are_422_naming_the_limit(client: TestClient, payload: dict, limit: str) -> None:
    err = error_of(client.post(URL, json=payload), 422)
    assert (err["code"], err["limit"]) == ("limit_exceeded", limit)
    assert str(LIMITS[limit]) in err["message"]


def test_body_over_limit_is_413_by_header_and_by_bytes(client: TestClient) -> None:
    big = json.dumps({"texts": ["one two " * 600]}).encode()
    err = error_of(client.post(URL, content=big, headers=JSON), 413)
    assert err["limit"] == "max_body_bytes"
    # Streamed without Content-Length: the bytes actually received are counted.
    chunks = iter([big[:3000], big[3000:]])
    err = error_of(client.post(URL, content=chunks, headers=JSON), 413)
    assert err["limit"] == "max_body_bytes"


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        ({"texts": []}, 422, "invalid_input"),
        ({"texts": ["one"], "beam_size": 0}, 422, "invalid_input"),
        ({"texts": ["one"], "target_lang": "fr"}, 422, "unsupported_language"),
        ({"texts": ["one"], "source_lang": "de", "target_lang": "en"}, 422, "unsupported_language"),
        ({"texts": ["one"], "model": "nope"}, 404, "unknown_model"),
        ({"texts": ["one"], "domain": "medical"}, 404, "unknown_domain"),
        ({"texts": ["one"], "colour": "red"}, 422, "invalid_request"),  # extra field
        ({"texts": "one"}, 422, "invalid_request"),
        ({"texts": [None]}, 422, "invalid_request"),
        ({"texts": ["one"], "beam_size": "2"}, 422, "invalid_request"),
        ({"texts": ["one"], "beam_size": True}, 422, "invalid_request"),
        ({}, 422, "invalid_request"),
    ],
)
def test_bad_requests_are_json_4xx(client: TestClient, payload: dict, status: int, code) -> None:
    assert error_of(client.post(URL, json=payload), status)["code"] == code


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b'{"texts": ["one"', 422, "invalid_request"),  # malformed JSON
        (b'{"texts": ["\xff\xfe one"]}', 400, "bad_request"),  # invalid UTF-8
        (b'{"texts": ["\\ud800"]}', 422, "invalid_input"),  # a lone surrogate escape
        (b"", 422, "invalid_request"),
        (b"[1, 2]", 422, "invalid_request"),
    ],
)
def test_malformed_bodies_are_json_4xx(client: TestClient, raw: bytes, status, code) -> None:
    assert error_of(client.post(URL, content=raw, headers=JSON), status)["code"] == code


def test_validation_errors_name_the_field_without_echoing_input(client: TestClient) -> None:
    secret = "zq" * 1500
    err = error_of(client.post(URL, json={"texts": [secret, 7]}), 422)
    assert err["field"] == "texts.1"
    resp = client.post(URL, json={"texts": secret})
    assert secret not in resp.text and len(resp.text) < 1000


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    assert error_of(client.get("/nope"), 404)["code"] == "not_found"
    assert error_of(client.get(URL), 405)["code"] == "method_not_allowed"


def test_health(client: TestClient) -> None:
    assert client.get("/livez").json() == {"status": "ok"}
    resp = client.get("/readyz")
    assert (resp.status_code, resp.json()) == (200, {"status": "ready"})


def test_info(client: TestClient, bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    info = client.get("/info").json()
    assert (info["ready"], info["reason"]) == (True, None)
    (model,) = info["models"]
    assert model["name"] == "toy-en-de" and model["default"]
    assert model["architecture"] == "transformer"
    assert model["languages"] == {"source": "en", "target": "de"}
    assert model["weights_sha256"] == manifest["files"]["model.safetensors"]
    assert model["uses_memory"] is False
    assert info["domains"] == ["general"]
    extra = {"queue_size": 256, "rate_limit": 0, "rate_window_s": 60.0}
    assert info["limits"] == LIMITS | {"max_body_bytes": 4096} | extra


def test_docs_and_openapi(client: TestClient) -> None:
    for path in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"):
        assert client.get(path).status_code == 200
    assert URL in client.get("/openapi.json").json()["paths"]


def test_unexpected_error_is_500_without_trace(bundle: Path, monkeypatch) -> None:
    def boom(*_args, **_kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("models.translator.Translator.translate_detailed", boom)
    with TestClient(create_app(settings(bundle)), raise_server_exceptions=False) as c:
        resp = c.post(URL, json={"texts": ["one"]})
    assert resp.status_code == 500
    assert resp.json() == {"error": {"code": "internal", "message": "internal error"}}


def test_tampered_bundle_starts_but_is_not_ready(bundle: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tampered"
    shutil.copytree(bundle, copy)
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    with TestClient(create_app(settings(copy))) as c:
        assert c.get("/livez").status_code == 200
        err = error_of(c.get("/readyz"), 503)
        assert err["code"] == "not_ready" and "checksum" in err["message"]
        assert error_of(c.post(URL, json={"texts": ["one"]}), 503)["code"] == "not_ready"
        assert c.get("/info").json()["ready"] is False


def test_missing_bundle_starts_but_is_not_ready(tmp_path: Path) -> None:
    with TestClient(create_app(settings(tmp_path / "absent"))) as c:
        assert c.get("/livez").status_code == 200
        assert "manifest" in error_of(c.get("/readyz"), 503)["message"]


@pytest.mark.unit
def test_settings(monkeypatch) -> None:
    assert Settings(model_path=None).bundle_path == DEFAULT_BUNDLE
    monkeypatch.setenv("RAGMT_MAX_TEXTS", "7")
    monkeypatch.setenv("RAGMT_MODEL_PATH", "/srv/bundle")
    s = Settings()
    assert (s.max_texts, s.bundle_path, s.port) == (7, Path("/srv/bundle"), 8000)
    with pytest.raises(ValidationError):
        Settings(beam_size=9, max_beam_size=8)


@pytest.mark.unit
def test_a_misspelt_variable_is_named_with_the_closest_known_one() -> None:
    check_environment({"RAGMT_PORT": "8001", "PATH": "/bin", "RAGMTX": "1"})
    with pytest.raises(ValueError, match="RAGMT_STORE_DIR: did you mean RAGMT_STORES_DIR"):
        check_environment({"RAGMT_STORE_DIR": "/srv/stores"})
    with pytest.raises(ValueError, match="ragmt_adminkey: did you mean RAGMT_ADMIN_KEY"):
        check_environment({"ragmt_adminkey": "k"})
    assert "RAGMT_REDIS_URL" in known_variables() and len(known_variables()) == len(
        Settings.model_fields
    )


@pytest.mark.unit
def test_engine_is_not_ready_before_loading() -> None:
    engine = TranslationEngine(Limits())
    assert not engine.ready and engine.not_ready_reason


def test_the_start_logs_what_is_served(
    bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator reads in the first lines: the model, its languages and architecture, the
    device and threads, the stores directory, each domain's active version, the access."""
    stores = tmp_path / "stores"
    version = make_store(stores, "toy", [("one", "eins"), ("two", "zwei")], activate=True)
    settings = Settings(model_path=bundle, stores_dir=stores, admin_key="k", api_keys="a,b")
    with caplog.at_level(logging.INFO, logger="ragmt"), TestClient(create_app(settings)):
        pass
    lines = [r.getMessage() for r in caplog.records if r.name == "ragmt.service"]
    assert any(
        ln.startswith(f"model {bundle.name}: transformer en->de") and "parameters" in ln
        for ln in lines
    ), lines
    assert f"stores directory {stores.resolve()}" in lines
    assert f"domain toy: active version {version} (idf-sentence, 2 pairs)" in lines
    assert "domain general: no store, translated without retrieval" in lines
    assert "management routes on; client API keys 2 keys required" in lines
    assert any(ln.startswith("device cpu, ") and " torch threads (of " in ln for ln in lines)
