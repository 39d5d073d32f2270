"""Every route of the app and its protection: public, client (API keys), admin, or metrics
(public until client keys are configured, then the admin key or a metrics key).

A new route fails `test_every_route_is_classified` until it is added to PROTECTION, so no
route can appear without a decision about who may call it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings

pytestmark = pytest.mark.integration

PUBLIC, CLIENT, ADMIN, METRICS = "public", "client", "admin", "metrics"
FILES = "files"  # a client key; a job is readable by the key that made it (404 for others)
EDITOR = "editor"  # the admin key, or a client key with `edit` scope
PROTECTION = {
    ("GET", "/livez"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/info"): PUBLIC,
    ("GET", "/metrics"): METRICS,
    ("GET", "/languages"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("GET", "/static/{name}"): PUBLIC,
    ("POST", "/v1/translate"): CLIENT,
    ("POST", "/translate"): CLIENT,
    ("POST", "/detect"): CLIENT,
    ("GET", "/v1/domains"): CLIENT,
    ("GET", "/v1/domains/{domain}"): CLIENT,
    ("POST", "/v1/domains/{domain}/corpora"): ADMIN,
    ("POST", "/v1/domains/{domain}/activate"): ADMIN,
    ("POST", "/v1/domains/{domain}/rollback"): ADMIN,
    ("DELETE", "/v1/domains/{domain}/versions/{version}"): ADMIN,
    ("GET", "/v1/jobs/{job_id}"): ADMIN,
    ("POST", "/v1/domains/{domain}/memory"): EDITOR,
    ("PUT", "/v1/domains/{domain}/memory/{key}"): EDITOR,
    ("DELETE", "/v1/domains/{domain}/memory/{key}"): EDITOR,
    ("GET", "/v1/domains/{domain}/memory"): CLIENT,
    ("POST", "/v1/domains/{domain}/memory/fold"): ADMIN,
    ("POST", "/v1/files"): FILES,
    ("GET", "/v1/files/{file_id}"): FILES,
    ("GET", "/v1/files/{file_id}/result"): FILES,
    ("GET", "/v1/domains/{domain}/glossary"): CLIENT,
    ("POST", "/v1/domains/{domain}/glossary"): ADMIN,
    ("DELETE", "/v1/domains/{domain}/glossary"): ADMIN,
    ("PUT", "/v1/domains/{domain}/glossary/terms"): ADMIN,
    ("DELETE", "/v1/domains/{domain}/glossary/terms"): ADMIN,
}
SAMPLE = {
    "{domain}": "general",
    "{version}": "20250101T000000.000Z-00000000",
    "{job_id}": "j1",
    "{name}": "app.js",
    "{key}": "0123456789abcdef",
    "{file_id}": "0" * 32,
}
BODY = {
    "/v1/translate": {"texts": ["one"]},
    "/translate": {"q": "one", "source": "en", "target": "de"},
    "/detect": {"q": "one two three"},
    "/v1/domains/{domain}/activate": {"version": "v1"},
    "/v1/domains/{domain}/memory": {"source": "one", "target": "eins"},
    "/v1/domains/{domain}/memory/{key}": {"source": "one", "target": "eins"},
}


def route_table(routes: list) -> set[tuple[str, str]]:
    """(method, path) of every route, descending into included routers."""
    out: set[tuple[str, str]] = set()
    for r in routes:
        inner = getattr(r, "original_router", None)  # newer FastAPI includes routers lazily
        if inner is not None:
            out |= route_table(inner.routes)
        elif getattr(r, "methods", None):
            out |= {(m, r.path) for m in r.methods if m != "HEAD"}
        else:
            out.add(("?", repr(r)))  # a kind of route this test does not know: fail
    return out


def call(c: TestClient, method: str, path: str, headers: dict[str, str] | None = None):
    url = path
    for name, value in SAMPLE.items():
        url = url.replace(name, value)
    body = BODY.get(path)
    return c.request(method, url, json=body, headers=headers or {})


def settings(bundle: Path, **extra) -> Settings:
    return Settings(model_path=bundle, stores_dir=bundle.parent / "no-stores", beam_size=1, **extra)


@pytest.fixture(scope="module")
def locked(bundle: Path) -> Iterator[TestClient]:
    """Admin key and API keys set."""
    with TestClient(create_app(settings(bundle, admin_key="adm", api_keys="cli"))) as c:
        yield c


@pytest.fixture(scope="module")
def open_app(bundle: Path) -> Iterator[TestClient]:
    """No admin key (management off) and no API keys (translation open)."""
    with TestClient(create_app(settings(bundle))) as c:
        yield c


def test_every_route_is_classified(tmp_path: Path) -> None:
    app = create_app(Settings(model_path=tmp_path / "absent"))  # no lifespan: routes only
    assert route_table(app.routes) == set(PROTECTION)
    documented = {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}
    assert documented <= set(PROTECTION)


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == ADMIN))
def test_admin_routes_need_the_admin_key(locked: TestClient, open_app, route) -> None:
    method, path = route
    resp = call(open_app, method, path)  # no admin key configured: the routes are off
    assert (resp.status_code, resp.json()["error"]["code"]) == (404, "disabled")
    resp = call(locked, method, path)
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert call(locked, method, path, {"Authorization": "Bearer wrong"}).status_code == 403
    assert call(locked, method, path, {"X-Admin-Key": "wrong"}).status_code == 403
    assert call(locked, method, path, {"Authorization": "Bearer cli"}).status_code == 403
    for good in ({"Authorization": "Bearer adm"}, {"X-Admin-Key": "adm"}):
        resp = call(locked, method, path, good)  # past the gate: the route's own answer
        code = resp.json().get("error", {}).get("code")  # a 200 has no error
        assert resp.status_code not in (401, 403) and code != "disabled"


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == EDITOR))
def test_memory_edits_need_the_admin_key_or_edit_scope(locked: TestClient, open_app, route) -> None:
    """Translating is open without keys; editing a memory never is."""
    method, path = route
    resp = call(open_app, method, path)
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert call(locked, method, path).status_code == 401
    for bad in ({"Authorization": "Bearer wrong"}, {"X-API-Key": "cli"}, {"X-Admin-Key": "no"}):
        assert call(locked, method, path, bad).status_code == 403  # "cli": no edit scope
    for good in ({"Authorization": "Bearer adm"}, {"X-Admin-Key": "adm"}):
        resp = call(locked, method, path, good)  # past the gate: no store to edit (409)
        assert resp.status_code == 409, resp.text


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == FILES))
def test_file_routes_need_an_api_key_when_configured(locked: TestClient, open_app, route) -> None:
    """Past the key check the sample call is answered by the route (no file sent: 422, no
    such job: 404), never 401 or 403."""
    method, path = route
    assert call(open_app, method, path).status_code in (404, 422)
    assert call(locked, method, path).status_code == 401
    assert call(locked, method, path, {"X-API-Key": "wrong"}).status_code == 403
    for good in ({"X-API-Key": "cli"}, {"Authorization": "Bearer cli"}):
        assert call(locked, method, path, good).status_code in (404, 422)


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == CLIENT))
def test_client_routes_need_an_api_key_when_configured(locked: TestClient, open_app, route) -> None:
    method, path = route
    assert call(open_app, method, path).status_code == 200  # no keys configured: open
    assert call(locked, method, path).status_code == 401
    assert call(locked, method, path, {"X-API-Key": "wrong"}).status_code == 403
    for good in ({"X-API-Key": "cli"}, {"Authorization": "Bearer cli"}, {"X-API-Key": "adm"}):
        assert call(locked, method, path, good).status_code == 200


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == PUBLIC))
def test_public_routes_need_nothing(locked: TestClient, route) -> None:
    assert call(locked, *route).status_code == 200


@pytest.mark.parametrize("route", sorted(r for r, p in PROTECTION.items() if p == METRICS))
def test_metrics_need_the_admin_key_once_client_keys_are_configured(
    locked: TestClient, open_app: TestClient, route
) -> None:
    """Its labels name every domain, which a client key may not all know."""
    assert call(open_app, *route).status_code == 200  # no client keys: public, as before
    resp = call(locked, *route)
    assert resp.status_code == 401 and resp.headers["www-authenticate"] == "Bearer"
    assert "ragmt_" not in resp.text
    for bad in ({"X-API-Key": "cli"}, {"Authorization": "Bearer cli"}, {"X-Admin-Key": "no"}):
        resp = call(locked, *route, bad)  # a plain client key opens translation, not this
        assert resp.status_code == 403 and "ragmt_" not in resp.text
    for good in ({"X-Admin-Key": "adm"}, {"Authorization": "Bearer adm"}, {"X-API-Key": "adm"}):
        resp = call(locked, *route, good)
        assert resp.status_code == 200 and "ragmt_rejections_total" in resp.text
