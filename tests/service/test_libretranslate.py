"""LibreTranslate's /translate, /detect and /languages as its clients call them (JSON, forms)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.toy import gloss
from tests.toy_bundle import HELD_OUT

pytestmark = pytest.mark.integration

LIMITS = dict(max_texts=3, max_chars=40, beam_size=1)


@pytest.fixture(scope="module")
def client(bundle: Path) -> Iterator[TestClient]:
    s = Settings(model_path=bundle, stores_dir=bundle.parent / "no-stores", **LIMITS)
    with TestClient(create_app(s)) as c:
        yield c


def lt_error(resp, status: int) -> str:
    """LibreTranslate's error shape: {"error": "message"} (plus our code and details)."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert isinstance(body["error"], str) and body["error"]
    assert "Traceback" not in resp.text
    return body["error"]


def test_json_string_and_list(client: TestClient) -> None:
    resp = client.post("/translate", json={"q": HELD_OUT, "source": "en", "target": "de"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"translatedText": gloss(HELD_OUT)}
    texts = ["red tree", "one two three"]
    body = {"q": texts, "source": "en", "target": "de", "format": "text", "api_key": ""}
    assert client.post("/translate", json=body).json() == {
        "translatedText": [gloss(t) for t in texts]
    }


def test_form_bodies(client: TestClient) -> None:
    form = {"q": "blue house", "source": "en", "target": "de", "format": "text"}
    resp = client.post("/translate", data=form)
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"translatedText": "blau haus"}
    many = [("q", "one"), ("q", "two"), ("source", "en"), ("target", "de")]
    resp = client.post(
        "/translate",
        content="&".join(f"{k}={v}" for k, v in many),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert resp.json() == {"translatedText": ["eins", "zwei"]}
    resp = client.post(
        "/translate", files={"q": (None, "green")}, data={"source": "en", "target": "de"}
    )
    assert resp.json() == {"translatedText": "grün"}


def test_auto_source_reports_the_detected_language(client: TestClient) -> None:
    resp = client.post("/translate", json={"q": "one two three", "source": "auto", "target": "de"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["translatedText"] == "eins zwei drei"
    found = body["detectedLanguage"]
    assert found["language"] == "en" and 50 < found["confidence"] < 100  # the identifier's
    texts = ["red house", "", "blue tree"]
    resp = client.post("/translate", json={"q": texts, "source": "auto", "target": "de"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["translatedText"] == ["rot haus", "", "blau baum"]
    found = resp.json()["detectedLanguage"]
    assert [d["language"] for d in found] == ["en", "en", "en"]
    assert found[1]["confidence"] == 0.0 and found[0]["confidence"] != found[2]["confidence"]


def test_auto_source_refuses_a_language_the_model_does_not_translate(client: TestClient) -> None:
    body = {"q": "Die Datei ist gespeichert.", "source": "auto", "target": "de"}
    resp = client.post("/translate", json=body)
    assert "'de'" in lt_error(resp, 422)
    assert resp.json()["code"] == "unsupported_language"
    assert resp.json()["detected"] == "de" and resp.json()["supported_sources"] == ["en"]
    body["q"] = ["one two", "Le fichier n'a pas pu être enregistré."]
    resp = client.post("/translate", json=body)
    assert "'fr'" in lt_error(resp, 422) and resp.json()["detected"] == "fr"


def test_detect_json_form_and_lists(client: TestClient) -> None:
    resp = client.post("/detect", json={"q": "Die Datei ist gespeichert."})
    assert resp.status_code == 200, resp.text
    [found] = resp.json()
    assert found["language"] == "de" and 90 < found["confidence"] <= 100
    resp = client.post("/detect", data={"q": "Le fichier est enregistré."})
    assert [d["language"] for d in resp.json()] == ["fr"]
    texts = ["Open the file.", "Öffnen Sie die Datei.", " "]
    resp = client.post("/detect", json={"q": texts, "api_key": ""})
    assert resp.status_code == 200, resp.text
    assert [[d["language"] for d in ds] for ds in resp.json()] == [["en"], ["de"], ["en"]]
    assert resp.json()[2] == [{"language": "en", "confidence": 0.0}]
    many = "&".join(f"q={t}" for t in ("Open the file.", "Ouvrez le fichier."))
    form = {"content-type": "application/x-www-form-urlencoded"}
    resp = client.post("/detect", content=many, headers=form)
    assert [ds[0]["language"] for ds in resp.json()] == ["en", "fr"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"q": []}, 422, "q must not be empty"),
        ({"q": ["one"] * 4}, 422, "max_texts=3"),
        ({"q": "one " * 20}, 422, "max_chars=40"),
        ({"q": 5}, 422, "q"),
        ({}, 422, "q"),
    ],
)
def test_detect_errors_are_libretranslate_shaped(client: TestClient, body, status, needle) -> None:
    assert needle in lt_error(client.post("/detect", json=body), status)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"q": "one", "source": "en", "target": "de", "format": "markdown"}, 400, "format"),
        ({"q": "one", "source": "en", "target": "fr"}, 422, "en->de"),
        ({"q": "one", "source": "xx", "target": "de"}, 422, "en->de"),
        ({"q": [], "source": "en", "target": "de"}, 422, "q must not be empty"),
        ({"q": ["one"] * 4, "source": "en", "target": "de"}, 422, "max_texts=3"),
        ({"q": "one " * 20, "source": "en", "target": "de"}, 422, "max_chars=40"),
        ({"q": 5, "source": "en", "target": "de"}, 422, "q"),
        ({"source": "en", "target": "de"}, 422, "q"),
        ({"q": "one", "target": "de"}, 422, "source"),
    ],
)
def test_errors_are_libretranslate_shaped(client: TestClient, body, status, needle) -> None:
    assert needle in lt_error(client.post("/translate", json=body), status)


def test_malformed_bodies(client: TestClient) -> None:
    json_type = {"content-type": "application/json"}
    assert "UTF-8" in lt_error(
        client.post("/translate", content=b'{"q": "\xff"}', headers=json_type), 400
    )
    assert "JSON" in lt_error(client.post("/translate", content=b"{", headers=json_type), 422)
    assert "object" in lt_error(client.post("/translate", content=b"[1]", headers=json_type), 422)


def test_too_large_bodies_are_libretranslate_shaped(bundle: Path) -> None:
    """The size limit answers before routing, yet in the shape of the path it answers."""
    s = Settings(model_path=bundle, stores_dir=bundle.parent / "no-stores", max_body_bytes=100)
    c = TestClient(create_app(s))  # no lifespan: the limit needs no model
    body = {"q": "one " * 50, "source": "en", "target": "de"}
    assert "max_body_bytes=100" in lt_error(c.post("/translate", json=body), 413)
    resp = c.post("/detect", data={"q": "one " * 50})
    assert "max_body_bytes=100" in lt_error(resp, 413)
    assert resp.json()["code"] == "payload_too_large" and resp.json()["max"] == 100
    resp = c.post("/v1/translate", json={"texts": ["one " * 50]})  # native routes: nested
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "payload_too_large"


def test_languages(client: TestClient) -> None:
    resp = client.get("/languages")
    assert resp.status_code == 200
    assert resp.json() == [
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["de"]},
    ]


def test_api_key_in_the_body_or_a_header(bundle: Path) -> None:
    s = Settings(
        model_path=bundle, stores_dir=bundle.parent / "no-stores", api_keys="k1,k2", beam_size=1
    )
    body = {"q": "red", "source": "en", "target": "de"}
    with TestClient(create_app(s)) as c:
        assert "API key" in lt_error(c.post("/translate", json=body), 401)
        assert lt_error(c.post("/translate", json=body | {"api_key": "nope"}), 403)
        assert c.post("/translate", json=body | {"api_key": "k2"}).json() == {
            "translatedText": "rot"
        }
        assert c.post("/translate", data=body | {"api_key": "k1"}).status_code == 200
        resp = c.post("/translate", json=body, headers={"X-API-Key": "k1"})
        assert resp.status_code == 200
        detect = {"q": "Open the file."}
        assert "API key" in lt_error(c.post("/detect", json=detect), 401)
        assert lt_error(c.post("/detect", json=detect | {"api_key": "nope"}), 403)
        assert c.post("/detect", json=detect | {"api_key": "k1"}).json()[0]["language"] == "en"
        assert c.post("/detect", data=detect, headers={"X-API-Key": "k2"}).status_code == 200
        # A key is checked before the body: no key and a broken body is still a 401.
        assert lt_error(
            c.post("/translate", content=b"{", headers={"content-type": "application/json"}), 401
        )


def test_a_key_must_open_the_general_domain(bundle: Path, tmp_path: Path) -> None:
    """LibreTranslate's routes translate with the general domain: a scoped key that does not
    open it is refused (403 domain_forbidden, in LibreTranslate's shape), whatever the body."""
    keys = tmp_path / "keys.json"
    keys.write_text(
        json.dumps(
            [
                {"name": "acme", "key": "acme-key", "translate": ["acme"]},
                {"name": "public", "key": "public-key", "translate": ["general"]},
            ]
        )
    )
    s = Settings(model_path=bundle, stores_dir=tmp_path / "stores", api_keys_file=keys, **LIMITS)
    body = {"q": "red", "source": "en", "target": "de"}
    with TestClient(create_app(s)) as c:
        for path, sent in (("/translate", body), ("/detect", {"q": "Open the file."})):
            for how in (
                {"json": sent | {"api_key": "acme-key"}},
                {"data": sent, "headers": {"X-API-Key": "acme-key"}},
            ):
                resp = c.post(path, **how)
                assert "domain" in lt_error(resp, 403)
                assert resp.json()["code"] == "domain_forbidden"
            bad = c.post(path, json={"api_key": "acme-key"})  # refused before the body's 422
            assert bad.json()["code"] == "domain_forbidden"
            assert c.post(path, json=sent | {"api_key": "public-key"}).status_code == 200
        assert c.post("/translate", json=body | {"api_key": "public-key"}).json() == {
            "translatedText": "rot"
        }
        assert c.get("/languages").status_code == 200  # public: model pairs, no domains


def test_html_keeps_every_tag_and_translates_the_text(client: TestClient) -> None:
    body = {"q": "<p>blue house</p><p>one two</p>", "source": "en", "target": "de"}
    resp = client.post("/translate", json=body | {"format": "html"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"translatedText": "<p>blau haus</p><p>eins zwei</p>"}
    # as text, the same body's tags are literal text: they come back, escaped nowhere
    plain = client.post("/translate", json=body | {"format": "text"}).json()["translatedText"]
    assert plain.count("<p>") == 2 and plain.count("</p>") == 2
