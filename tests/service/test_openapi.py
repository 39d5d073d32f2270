"""/openapi.json is valid and says what the service does: every $ref resolves, every route lists
the errors it really returns in the shape it returns them (checked against real answers), and
the keys are security schemes on the routes that take them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.errors import LIBRETRANSLATE_PATHS
from service.settings import Settings
from tests.service.conftest import make_store
from tests.service.test_routes import (
    ADMIN,
    CLIENT,
    EDITOR,
    FILES,
    METRICS,
    PROTECTION,
    PUBLIC,
)
from tests.toy import toy_pairs

pytestmark = pytest.mark.integration

NATIVE_ERROR = "#/components/schemas/ErrorResponse"
LIBRE_ERROR = "#/components/schemas/LibreError"
SECURITY = {
    CLIENT: [{"ApiKey": []}, {"Bearer": []}],
    ADMIN: [{"AdminKey": []}, {"Bearer": []}],
    METRICS: [{"ApiKey": []}, {"AdminKey": []}, {"Bearer": []}],
    EDITOR: [{"AdminKey": []}, {"Bearer": []}, {"ApiKey": []}],
    FILES: [{"ApiKey": []}, {"Bearer": []}],
}
GLOSSARY_WRITE = {400, 401, 403, 404, 409, 413, 422, 500, 503}
MEMORY_WRITE = {401, 403, 404, 409, 422, 429, 500, 503}
# The error statuses each route can answer (500 everywhere some error is documented).
ERRORS = {
    ("GET", "/readyz"): {500, 503},
    ("GET", "/metrics"): {401, 403, 500},
    ("POST", "/v1/translate"): {400, 401, 403, 404, 413, 422, 429, 500, 503},
    ("POST", "/translate"): {400, 401, 403, 413, 422, 429, 500, 503},
    ("POST", "/detect"): {400, 401, 403, 413, 422, 429, 500, 503},
    ("GET", "/v1/domains"): {401, 403, 429, 500, 503},
    ("GET", "/v1/domains/{domain}"): {401, 403, 404, 422, 429, 500, 503},
    ("POST", "/v1/domains/{domain}/corpora"): {400, 401, 403, 404, 413, 422, 500, 503},
    ("GET", "/v1/jobs/{job_id}"): {401, 403, 404, 422, 500, 503},
    ("POST", "/v1/domains/{domain}/activate"): {400, 401, 403, 404, 413, 422, 500, 503},
    ("POST", "/v1/domains/{domain}/rollback"): {401, 403, 404, 409, 422, 500, 503},
    ("DELETE", "/v1/domains/{domain}/versions/{version}"): {401, 403, 404, 409, 422, 500, 503},
    ("POST", "/v1/domains/{domain}/memory"): MEMORY_WRITE | {400, 413},
    ("PUT", "/v1/domains/{domain}/memory/{key}"): MEMORY_WRITE | {400, 413},
    ("DELETE", "/v1/domains/{domain}/memory/{key}"): MEMORY_WRITE,
    ("GET", "/v1/domains/{domain}/memory"): {401, 403, 404, 422, 429, 500, 503},
    ("POST", "/v1/domains/{domain}/memory/fold"): {401, 403, 404, 409, 422, 500, 503},
    ("POST", "/v1/files"): {400, 401, 403, 404, 413, 422, 429, 500, 503},
    ("GET", "/v1/files/{file_id}"): {401, 403, 404, 422, 429, 500, 503},
    ("GET", "/v1/files/{file_id}/result"): {401, 403, 404, 409, 422, 429, 500, 503},
    ("GET", "/v1/domains/{domain}/glossary"): {401, 403, 404, 422, 429, 500, 503},
    ("POST", "/v1/domains/{domain}/glossary"): GLOSSARY_WRITE,
    ("DELETE", "/v1/domains/{domain}/glossary"): {401, 403, 404, 422, 500, 503},
    ("PUT", "/v1/domains/{domain}/glossary/terms"): GLOSSARY_WRITE,
    ("DELETE", "/v1/domains/{domain}/glossary/terms"): GLOSSARY_WRITE,
}
VERSION = "20250101T000000.000Z-00000000"  # well formed, never built


def resolve(doc: dict[str, Any], ref: str) -> Any:
    """The node a local JSON-pointer `ref` names; fails on any other kind or a missing part."""
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{ref}: no {part!r}"
        node = node[part]
    return node


def refs(node: Any) -> Iterator[str]:
    """Every $ref in `node`, however deep."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if isinstance(x.get("$ref"), str):
                yield x["$ref"]
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            yield method.upper(), path, op


def check_body(doc: dict[str, Any], schema: dict[str, Any], body: Any) -> None:
    """Validate `body` against a schema of the document (its $refs resolved in the document)."""
    jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).validate(body)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The document as served (routes only: no lifespan, no model)."""
    absent = tmp_path_factory.mktemp("openapi") / "absent"
    app = create_app(Settings(model_path=absent, admin_key="adm", api_keys="cli"))
    resp = TestClient(app).get("/openapi.json")
    assert resp.status_code == 200
    return resp.json()


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    found = list(refs(doc))
    assert len(found) > 50  # the walk does reach the routes and the schemas
    for ref in found:
        resolve(doc, ref)
    libre = doc["paths"]["/translate"]["post"]["requestBody"]["content"]
    for ctype in ("application/json", "application/x-www-form-urlencoded", "multipart/form-data"):
        assert set(libre[ctype]["schema"]["required"]) == {"q", "source", "target"}


def test_every_route_documents_its_errors_in_its_shape(doc: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's; not ours
    documented = {}
    for method, path, op in operations(doc):
        statuses = {int(s) for s in op["responses"] if int(s) >= 400}
        if statuses:
            documented[(method, path)] = statuses
        shape = LIBRE_ERROR if path in LIBRETRANSLATE_PATHS else NATIVE_ERROR
        for status in statuses:
            response = op["responses"][str(status)]
            assert response["content"]["application/json"]["schema"] == {"$ref": shape}
            assert response["description"]
    assert documented == ERRORS


def test_the_two_error_shapes_are_told_apart(doc: dict[str, Any]) -> None:
    """A body of one shape fails the other's schema, so the checks below can fail."""
    native = {"error": {"code": "forbidden", "message": "unknown API key"}}
    libre = {"error": "unknown API key", "code": "forbidden"}
    check_body(doc, {"$ref": NATIVE_ERROR}, native)
    check_body(doc, {"$ref": LIBRE_ERROR}, libre)
    with pytest.raises(jsonschema.ValidationError):
        check_body(doc, {"$ref": NATIVE_ERROR}, libre)
    with pytest.raises(jsonschema.ValidationError):
        check_body(doc, {"$ref": LIBRE_ERROR}, native)


def test_keys_are_security_schemes_of_the_routes_that_take_them(doc: dict[str, Any]) -> None:
    schemes = doc["components"]["securitySchemes"]
    assert schemes["ApiKey"] | {"description": ""} == {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "",
    }
    assert schemes["AdminKey"]["in"] == "header" and schemes["AdminKey"]["name"] == "X-Admin-Key"
    assert (schemes["Bearer"]["type"], schemes["Bearer"]["scheme"]) == ("http", "bearer")
    for method, path, op in operations(doc):
        protection = PROTECTION[(method, path)]
        if protection == PUBLIC:
            assert "security" not in op, (method, path)
        else:
            assert op["security"] == SECURITY[protection], (method, path)
            assert {"401", "403"} <= set(op["responses"]), (method, path)


def test_routes_are_grouped_under_described_tags(doc: dict[str, Any]) -> None:
    """/docs groups the routes: each operation under one declared tag with a description."""
    declared = {t["name"]: t.get("description", "") for t in doc["tags"]}
    assert all(declared.values()), declared
    used = set()
    for method, path, op in operations(doc):
        assert len(op.get("tags", [])) == 1 and op["tags"][0] in declared, (method, path)
        used.add(op["tags"][0])
    assert {"translate", "domains", "management", "libretranslate", "service"} <= used
    assert doc["paths"]["/v1/translate"]["post"]["tags"] == ["translate"]
    assert doc["paths"]["/v1/domains/{domain}/activate"]["post"]["tags"] == ["management"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Domain "toy" active (its version returned) and "idle" built but not active."""
    root = tmp_path_factory.mktemp("openapi-stores")
    active = make_store(root, "toy", toy_pairs(20, seed=3), activate=True)
    make_store(root, "idle", toy_pairs(20, seed=4))
    return root, active


@pytest.fixture(scope="module")
def locked(bundle: Path, stores: tuple[Path, str]) -> Iterator[TestClient]:
    """Keys set and a small body limit."""
    s = Settings(
        model_path=bundle,
        stores_dir=stores[0],
        admin_key="adm",
        api_keys="cli",
        beam_size=1,
        max_body_bytes=2000,
    )
    with TestClient(create_app(s), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture(scope="module")
def unready(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """No model (503), no admin key (management disabled), one request per key and minute."""
    absent = tmp_path_factory.mktemp("unready") / "absent"
    s = Settings(
        model_path=absent,
        stores_dir=absent.parent,
        api_keys="a,b,c,d,e,f",
        rate_limit=1,
        rate_window_s=60,
    )
    with TestClient(create_app(s), raise_server_exceptions=False) as c:
        yield c


KEY, ADMIN_KEY = {"X-API-Key": "cli"}, {"X-Admin-Key": "adm"}
TR = {"texts": ["one"]}
LT = {"q": "one", "source": "en", "target": "de"}
BIG = "one " * 600
UTF8 = {"content": b'{"texts": ["\xff"]}', "headers": {"content-type": "application/json"}}
# (app, method, route, url, request arguments, status): each documented error, really caused.
# Requests to the locked app carry the API key unless they set their own headers.
CASES = [
    ("locked", "POST", "/v1/translate", None, {"json": TR, "headers": {}}, 401),
    ("locked", "POST", "/v1/translate", None, {"json": TR, "headers": {"X-API-Key": "no"}}, 403),
    ("locked", "POST", "/v1/translate", None, {"json": TR | {"domain": "nope"}}, 404),
    ("locked", "POST", "/v1/translate", None, {"json": {"texts": [BIG]}}, 413),
    ("locked", "POST", "/v1/translate", None, {"json": {"texts": []}}, 422),
    ("locked", "POST", "/v1/translate", None, {"json": TR | {"domain": "idle"}}, 503),
    ("locked", "POST", "/v1/translate", None, UTF8, 400),
    ("locked", "POST", "/translate", None, {"json": LT | {"format": "markdown"}}, 400),
    ("locked", "POST", "/translate", None, {"json": LT, "headers": {}}, 401),
    ("locked", "POST", "/translate", None, {"json": LT | {"api_key": "no"}, "headers": {}}, 403),
    ("locked", "POST", "/translate", None, {"json": LT | {"q": BIG}}, 413),
    ("locked", "POST", "/translate", None, {"json": LT | {"q": []}}, 422),
    ("locked", "POST", "/detect", None, {"json": {"q": 5}}, 422),
    ("locked", "GET", "/v1/domains/{domain}", "/v1/domains/nope", {}, 404),
    ("locked", "GET", "/v1/domains/{domain}", "/v1/domains/No!", {}, 422),
    ("locked", "GET", "/metrics", None, {"headers": {}}, 401),
    ("locked", "GET", "/metrics", None, {}, 403),  # a client key, not the admin key
    ("locked", "GET", "/v1/jobs/{job_id}", "/v1/jobs/j1", {"headers": {}}, 401),
    ("locked", "GET", "/v1/jobs/{job_id}", "/v1/jobs/j1", {"headers": {"X-Admin-Key": "x"}}, 403),
    ("locked", "GET", "/v1/jobs/{job_id}", "/v1/jobs/j1", {"headers": ADMIN_KEY}, 404),
    (
        "locked",
        "POST",
        "/v1/domains/{domain}/activate",
        "/v1/domains/toy/activate",
        {"json": {"version": VERSION}, "headers": ADMIN_KEY},
        422,
    ),
    (
        "locked",
        "POST",
        "/v1/domains/{domain}/rollback",
        "/v1/domains/general/rollback",
        {"headers": ADMIN_KEY},
        409,
    ),
    (
        "locked",
        "DELETE",
        "/v1/domains/{domain}/versions/{version}",
        "/v1/domains/toy/versions/ACTIVE",
        {"headers": ADMIN_KEY},
        409,
    ),
    (
        "locked",
        "DELETE",
        "/v1/domains/{domain}/versions/{version}",
        f"/v1/domains/toy/versions/{VERSION}",
        {"headers": ADMIN_KEY},
        404,
    ),
    (
        "locked",
        "PUT",
        "/v1/domains/{domain}/glossary/terms",
        "/v1/domains/nope/glossary/terms",
        {"json": {"source": "one", "target": "eins"}, "headers": ADMIN_KEY},
        404,
    ),
    (
        "locked",
        "POST",
        "/v1/domains/{domain}/glossary",
        "/v1/domains/toy/glossary",
        {"files": {"file": ("g.csv", b"one\n")}, "headers": ADMIN_KEY},
        422,
    ),
    ("locked", "GET", "/v1/domains/{domain}/glossary", "/v1/domains/nope/glossary", {}, 404),
    ("unready", "GET", "/readyz", None, {}, 503),
    ("unready", "POST", "/v1/translate", None, {"json": TR, "headers": {"X-API-Key": "a"}}, 503),
    ("unready", "POST", "/translate", None, {"json": LT | {"api_key": "b"}}, 503),
    ("unready", "POST", "/detect", None, {"json": {"q": "one", "api_key": "c"}}, 503),
    ("unready", "GET", "/v1/jobs/{job_id}", "/v1/jobs/j1", {}, 404),  # management disabled
]
# A second request with the same key within the minute: 429.
RATE_LIMITED = [
    ("POST", "/v1/translate", {"json": TR, "headers": {"X-API-Key": "d"}}),
    ("POST", "/translate", {"json": LT | {"api_key": "e"}}),
    ("GET", "/v1/domains", {"headers": {"X-API-Key": "f"}}),
]


def check_documented(doc: dict[str, Any], method: str, route: str, resp) -> None:
    """`resp` is a documented response of the route: its status, body schema and headers."""
    documented = doc["paths"][route][method.lower()]["responses"]
    assert str(resp.status_code) in documented, (method, route, resp.status_code)
    response = documented[str(resp.status_code)]
    check_body(doc, response["content"]["application/json"]["schema"], resp.json())
    for header in response.get("headers", {}):
        if header != "Retry-After" or resp.status_code == 429:  # 503: draining, overloaded
            assert header in resp.headers, (method, route, header)


@pytest.mark.parametrize(
    ("app", "method", "route", "url", "kwargs", "status"),
    CASES,
    ids=[f"{c[1]} {c[3] or c[2]} {c[5]}" for c in CASES],
)
def test_real_errors_are_as_documented(
    doc: dict[str, Any], request: pytest.FixtureRequest, app, method, route, url, kwargs, status
) -> None:
    client: TestClient = request.getfixturevalue(app)
    url = url or route
    if app == "locked":
        kwargs = {"headers": KEY} | kwargs
        url = url.replace("ACTIVE", request.getfixturevalue("stores")[1])
    resp = client.request(method, url, **kwargs)
    assert resp.status_code == status, resp.text[:300]
    check_documented(doc, method, route, resp)


@pytest.mark.parametrize(("method", "route", "kwargs"), RATE_LIMITED)
def test_rate_limited_answers_are_as_documented(
    doc: dict[str, Any], unready: TestClient, method: str, route: str, kwargs
) -> None:
    unready.request(method, route, **kwargs)
    resp = unready.request(method, route, **kwargs)
    assert resp.status_code == 429, resp.text[:300]
    check_documented(doc, method, route, resp)
