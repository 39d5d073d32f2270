"""Deeply nested JSON bodies are refused (422, limit max_json_depth) on every JSON route before
anything parses them: Python's parser recurses per level and would end in a RecursionError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.routes.bodies import MAX_JSON_DEPTH, json_depth
from service.settings import Settings

pytestmark = pytest.mark.integration

ADMIN = {"X-Admin-Key": "adm"}
JSON = {"content-type": "application/json"}
LIBRE = {"/translate", "/detect"}
# Every route that reads a JSON body, and the field of it that nesting goes into.
ROUTES = {
    "/v1/translate": "texts",
    "/translate": "q",
    "/detect": "q",
    "/v1/domains/general/activate": "version",
}


def nested(depth: int) -> bytes:
    """`depth` arrays, one in the other: [[[...]]]."""
    return b"[" * depth + b"]" * depth


def body(path: str, depth: int) -> bytes:
    """The route's body with `depth` levels in all: its object and nested arrays in one field."""
    extra = b', "source": "en", "target": "de"' if path == "/translate" else b""
    return b'{"' + ROUTES[path].encode() + b'": ' + nested(depth - 1) + extra + b"}"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """No model (not ready): the depth check comes before everything that needs one."""
    absent = tmp_path_factory.mktemp("no-model") / "absent"
    s = Settings(model_path=absent, stores_dir=absent.parent / "stores", admin_key="adm")
    with TestClient(create_app(s), raise_server_exceptions=False) as c:
        yield c


def refused_for_depth(resp) -> bool:
    """Whether `resp` is the depth refusal, in the route's error shape."""
    body = resp.json()
    if resp.request.url.path in LIBRE:
        fields = body if isinstance(body.get("error"), str) else {}
    else:
        fields = body["error"] if isinstance(body.get("error"), dict) else {}
    return (resp.status_code, fields.get("code"), fields.get("limit"), fields.get("max")) == (
        422,
        "limit_exceeded",
        "max_json_depth",
        MAX_JSON_DEPTH,
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("", 0),
        ("1", 0),
        ("[]", 1),
        ("[][][]", 1),
        ('{"a": [{"b": [1]}]}', 4),
        ('{"a": "[[[[{{{{"}', 1),  # brackets in a string are text
        ('{"a": "\\"[[[", "b": [[1]]}', 3),  # an escaped quote does not end the string
        ('{"a": "\\\\", "b": [[1]]}', 3),  # an escaped backslash does not escape the quote
        ("[" * 100_000 + "]" * 100_000, 100_000),
    ],
)
def test_json_depth(text: str, depth: int) -> None:
    assert json_depth(text) == depth


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_deeply_nested_bodies_are_refused(client: TestClient, path: str) -> None:
    for raw in (nested(100_000), body(path, 5000), body(path, MAX_JSON_DEPTH + 1)):
        resp = client.post(path, content=raw, headers=JSON | ADMIN)
        assert refused_for_depth(resp), resp.text[:300]
    # Without a content type FastAPI parses the body as JSON too: checked alike.
    resp = client.post(path, content=body(path, 5000), headers=ADMIN)
    assert refused_for_depth(resp), resp.text[:300]


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_bodies_within_the_limit_go_on(client: TestClient, path: str) -> None:
    """Depth 32 passes the check (and fails on for other reasons: no model, wrong types), and
    so do brackets in a string."""
    in_text = json.dumps({ROUTES[path]: "[{" * 250}).encode()
    for raw in (body(path, MAX_JSON_DEPTH), in_text):
        resp = client.post(path, content=raw, headers=JSON | ADMIN)
        assert 400 <= resp.status_code < 500 or resp.status_code == 503, resp.text[:300]
        assert not refused_for_depth(resp), resp.text[:300]


def test_brackets_in_strings_and_forms_are_text(client: TestClient) -> None:
    texts = {"texts": ["[" * 1000, "{" * 1000]}
    resp = client.post("/v1/translate", json=texts)
    assert (resp.status_code, resp.json()["error"]["code"]) == (503, "not_ready")
    form = {"q": "[" * 1000, "source": "en", "target": "de"}
    resp = client.post("/translate", data=form)
    assert (resp.status_code, resp.json()["code"]) == (503, "not_ready")


def test_key_is_checked_before_a_deep_libretranslate_body(tmp_path: Path) -> None:
    """LibreTranslate's routes check the key before the body, a deep one included."""
    s = Settings(model_path=tmp_path / "absent", stores_dir=tmp_path, api_keys="k1")
    with TestClient(create_app(s)) as c:
        assert c.post("/translate", content=nested(5000), headers=JSON).status_code == 401
        resp = c.post("/translate", content=nested(5000), headers=JSON | {"X-API-Key": "k1"})
        assert refused_for_depth(resp), resp.text[:300]
