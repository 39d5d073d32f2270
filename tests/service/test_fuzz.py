"""Property-based requests against every route of the OpenAPI schema: whatever the body,
path or headers, the answer is never a 500 and every error is JSON without a stack trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import make_store
from tests.toy import LEXICON, toy_pairs

pytestmark = pytest.mark.integration

WORDS = sorted(LEXICON)
FIELDS = {
    "/v1/translate": ["texts", "source_lang", "target_lang", "domain", "model", "beam_size"],
    "/translate": ["q", "source", "target", "format", "api_key"],
}
FIELDS["/v1/translate"].append("return_neighbours")

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
    st.sampled_from(WORDS + ["en", "de", "toy", "general", "auto", "text", "html", ""]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
sentences = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)


def bodies(path: str) -> st.SearchStrategy[dict]:
    """Mostly-plausible objects: the route's fields with valid, odd or missing values."""
    value = st.one_of(sentences, st.lists(sentences, max_size=4), json_value)
    return st.dictionaries(st.sampled_from(FIELDS[path]), value, max_size=len(FIELDS[path]))


@pytest.fixture(scope="module")
def client(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    stores = tmp_path_factory.mktemp("fuzz-stores")
    make_store(stores, "toy", toy_pairs(20, seed=9), activate=True)
    s = Settings(
        model_path=bundle,
        stores_dir=stores,
        admin_key="adm",
        max_texts=4,
        max_chars=50,
        max_beam_size=2,
        beam_size=1,
        max_body_bytes=20_000,
    )
    with TestClient(create_app(s), raise_server_exceptions=False) as c:
        yield c


def check(resp) -> None:
    assert resp.status_code < 500 or resp.status_code == 503, resp.text
    assert "Traceback" not in resp.text
    if resp.status_code >= 400:
        body = resp.json()
        assert "error" in body


FUZZ = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@FUZZ
@given(path=st.sampled_from(sorted(FIELDS)), body=st.data())
def test_json_bodies_never_500(client: TestClient, path: str, body) -> None:
    payload = body.draw(bodies(path))
    check(client.post(path, json=payload))


@FUZZ
@given(
    path=st.sampled_from(sorted(FIELDS)),
    raw=st.binary(max_size=200),
    ctype=st.sampled_from(
        ["application/json", "application/x-www-form-urlencoded", "text/plain", ""]
    ),
)
def test_raw_bodies_never_500(client: TestClient, path: str, raw: bytes, ctype: str) -> None:
    check(client.post(path, content=raw, headers={"content-type": ctype} if ctype else {}))


@FUZZ
@given(
    domain=st.text(max_size=20),
    version=st.text(max_size=20),
    job=st.text(max_size=20),
    body=json_value,
)
def test_path_parameters_never_500(client: TestClient, domain, version, job, body) -> None:
    admin = {"X-Admin-Key": "adm"}
    # Any text, percent-encoded into one path segment.
    d, v, j = (quote(x, safe="") or "x" for x in (domain, version, job))
    check(client.get(f"/v1/domains/{d}"))
    check(client.get(f"/v1/jobs/{j}", headers=admin))
    check(client.post(f"/v1/domains/{d}/activate", json=body, headers=admin))
    check(client.delete(f"/v1/domains/{d}/versions/{v}", headers=admin))
    check(client.post(f"/v1/domains/{d}/corpora", content=b"x", headers=admin))
