"""Glossaries through the HTTP API, on the toy bundle (which translates "house" as "haus"): a
term added is enforced in the next translation (cached translations included), uploads merge
or replace, bad files change nothing, writes need the admin key, and a second app on the same
stores directory sees every change (service/routes/glossary.py, service/glossaries.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.glossaries import FILE
from service.settings import Settings
from tests.service.conftest import make_store
from tests.toy import toy_pairs

pytestmark = pytest.mark.integration

ADMIN = {"X-Admin-Key": "adm"}
CLIENT = {"X-API-Key": "cli"}
GLOSSARY = "/v1/domains/{}/glossary"
TERMS = "/v1/domains/{}/glossary/terms"


def settings(bundle: Path, stores: Path) -> Settings:
    return Settings(
        model_path=bundle, stores_dir=stores, beam_size=1, admin_key="adm", api_keys="cli"
    )


@pytest.fixture
def stores(tmp_path: Path) -> Path:
    stores = tmp_path / "stores"
    make_store(stores, "docs", toy_pairs(30, seed=4), activate=True)
    return stores


@pytest.fixture
def client(bundle: Path, stores: Path) -> Iterator[TestClient]:
    with TestClient(create_app(settings(bundle, stores))) as c:
        yield c


def translate(c: TestClient, text: str, **extra) -> dict:
    body = {"texts": [text], "domain": "docs", **extra}
    resp = c.post("/v1/translate", json=body, headers=CLIENT)
    assert resp.status_code == 200, resp.text
    return resp.json()["results"][0]


def upload(c: TestClient, name: str, data: bytes, **form) -> tuple[int, dict]:
    files = {"file": (name, data, "application/octet-stream")}
    resp = c.post(GLOSSARY.format("docs"), files=files, data=form, headers=ADMIN)
    return resp.status_code, resp.json()


def test_a_term_added_is_used_in_the_next_translation(client: TestClient) -> None:
    before = translate(client, "red house")
    assert before["translation"] == "rot haus" and "glossary_version" not in before

    resp = client.put(TERMS.format("docs"), json={"source": "House", "target": "Gebäude"},
                      headers=ADMIN)  # fmt: skip
    assert resp.status_code == 200, resp.text
    change = resp.json()
    assert (change["domain"], change["count"], change["changed"]) == ("docs", 1, 1)

    after = translate(client, "red house")  # the cached "rot haus" is not served
    assert after["glossary_version"] == change["version"]
    assert "Gebäude" in after["translation"] and "haus" not in after["translation"]
    assert after["translation"].startswith("rot")
    assert translate(client, "red house", glossary=False)["translation"] == "rot haus"
    assert translate(client, "house")["translation"] == "Gebäude"  # a term alone
    assert translate(client, "red tree")["translation"] == "rot baum"  # no term: as before

    listed = client.get(GLOSSARY.format("docs"), headers=CLIENT).json()
    assert listed == {
        "domain": "docs",
        "version": change["version"],
        "source_lang": "en",
        "target_lang": "de",
        "terms": [{"source": "House", "target": "Gebäude", "note": ""}],
    }
    # the model's own translation already uses the term: kept, with the version it applied
    again = client.put(TERMS.format("docs"), json={"source": "house", "target": "haus"},
                       headers=ADMIN).json()  # fmt: skip
    assert (again["count"], again["changed"]) == (1, 1) and again["version"] != change["version"]
    kept = translate(client, "red house")
    assert kept == {**kept, "translation": "rot haus", "glossary_version": again["version"]}
    # other domains are untouched
    general = client.post("/v1/translate", json={"texts": ["red house"]}, headers=CLIENT)
    assert general.json()["results"][0]["translation"] == "rot haus"


def test_upload_merges_or_replaces_and_a_bad_file_changes_nothing(client: TestClient) -> None:
    status, body = upload(client, "a.csv", b"source,target,note\nhouse,Gebaeude,n\ntree,Baum,\n")
    assert status == 200 and (body["count"], body["changed"], body["skipped"]) == (2, 2, 0)
    first = body["version"]
    status, body = upload(client, "b.tsv", b"tree\tBaum\nblue\tBlau\n")  # merge: 1 new
    assert status == 200 and (body["count"], body["changed"]) == (3, 1)
    merged = body["version"]

    status, body = upload(client, "bad.csv", b"green,Gruen\nred\n")
    assert status == 422 and "line 2" in body["error"]["message"]
    status, body = upload(client, "x.tbx", b"<martif><text><body>")
    assert status == 422 and body["error"]["field"] == "file"
    status, body = upload(client, "x.xlsx", b"a,b\n")
    assert status == 422 and body["error"]["field"] == "format"
    listed = client.get(GLOSSARY.format("docs"), headers=CLIENT).json()
    assert listed["version"] == merged and len(listed["terms"]) == 3

    tbx = (
        b'<martif type="TBX"><text><body><termEntry id="1"><langSet xml:lang="en"><tig>'
        b'<term>house</term></tig></langSet><langSet xml:lang="de"><tig><term>Gebaeude</term>'
        b'</tig></langSet></termEntry><termEntry id="2"><langSet xml:lang="en"><tig><term>five'
        b"</term></tig></langSet></termEntry></body></text></martif>"
    )
    status, body = upload(client, "terms.xml", tbx, replace="true")
    # tree and blue removed, house's note gone; entry 2 has no German term
    assert status == 200 and (body["count"], body["changed"], body["skipped"]) == (1, 3, 1)
    assert body["version"] not in (first, merged)
    terms = client.get(GLOSSARY.format("docs"), headers=CLIENT).json()["terms"]
    assert terms == [{"source": "house", "target": "Gebaeude", "note": ""}]


def test_terms_are_deleted_by_query_or_body_and_the_glossary_cleared(client: TestClient) -> None:
    upload(client, "a.csv", b"house,Gebaeude\ntree,Baum\nred,Purpur\n")
    resp = client.request("DELETE", TERMS.format("docs"), params={"source": "HOUSE"},
                          headers=ADMIN)  # fmt: skip
    assert resp.status_code == 200 and (resp.json()["count"], resp.json()["changed"]) == (2, 1)
    resp = client.request("DELETE", TERMS.format("docs"), json={"source": "tree"}, headers=ADMIN)
    assert (resp.json()["count"], resp.json()["changed"]) == (1, 1)
    resp = client.request("DELETE", TERMS.format("docs"), json={"source": "absent"}, headers=ADMIN)
    assert (resp.json()["count"], resp.json()["changed"]) == (1, 0)
    resp = client.request("DELETE", TERMS.format("docs"), headers=ADMIN)
    assert (resp.status_code, resp.json()["error"]["field"]) == (422, "source")
    # red's term is left, house's is gone (what the toy model, which knows no masks, writes
    # beside the restored term is its own business)
    out = translate(client, "red house")["translation"]
    assert out.startswith("Purpur ") and "rot" not in out and "Gebaeude" not in out

    resp = client.delete(GLOSSARY.format("docs"), headers=ADMIN)
    assert resp.json() == {
        "domain": "docs",
        "version": None,
        "count": 0,
        "changed": 1,
        "skipped": 0,
    }
    assert client.get(GLOSSARY.format("docs"), headers=CLIENT).json()["version"] is None
    result = translate(client, "red house")
    assert result["translation"] == "rot haus" and "glossary_version" not in result


def test_writes_need_the_admin_key_and_a_known_domain(client: TestClient) -> None:
    term = {"source": "house", "target": "Gebäude"}
    assert client.put(TERMS.format("docs"), json=term).status_code == 401
    as_client = {"Authorization": "Bearer cli"}
    assert client.put(TERMS.format("docs"), json=term, headers=as_client).status_code == 403
    assert client.delete(GLOSSARY.format("docs"), headers=as_client).status_code == 403
    assert client.get(GLOSSARY.format("docs")).status_code == 401  # reading: a client key
    resp = client.put(TERMS.format("nowhere"), json=term, headers=ADMIN)
    assert (resp.status_code, resp.json()["error"]["code"]) == (404, "unknown_domain")
    assert client.get(GLOSSARY.format("nowhere"), headers=CLIENT).status_code == 404
    bad = client.put(TERMS.format("docs"), json={"source": "...", "target": "x"}, headers=ADMIN)
    assert bad.status_code == 422 and "no letter or digit" in bad.json()["error"]["message"]
    extra = client.put(TERMS.format("docs"), json={**term, "x": 1}, headers=ADMIN)
    assert extra.status_code == 422
    assert client.get(GLOSSARY.format("docs"), headers=CLIENT).json()["terms"] == []


def test_the_file_is_checked_and_a_corrupt_one_is_only_replaced(
    client: TestClient, stores: Path
) -> None:
    version = client.put(TERMS.format("docs"), json={"source": "house", "target": "Gebäude"},
                         headers=ADMIN).json()["version"]  # fmt: skip
    path = stores / "docs" / FILE
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["version"] == version and len(saved["sha256"]) == 64
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".glossary-")] == []

    path.write_text(path.read_text(encoding="utf-8").replace("Gebäude", "Haus"), "utf-8")
    time.sleep(0.6)  # the next lookup looks at the file again
    result = translate(client, "red house")  # the last good glossary still served
    assert result["glossary_version"] == version and "Gebäude" in result["translation"]
    resp = client.put(TERMS.format("docs"), json={"source": "tree", "target": "Baum"},
                      headers=ADMIN)  # fmt: skip
    assert (resp.status_code, resp.json()["error"]["code"]) == (409, "glossary_unreadable")
    status, body = upload(client, "a.csv", b"tree,Baum\n", replace="true")
    assert status == 200 and body["count"] == 1


def test_a_second_app_on_the_same_stores_sees_each_change(bundle: Path, stores: Path) -> None:
    with (
        TestClient(create_app(settings(bundle, stores))) as one,
        TestClient(create_app(settings(bundle, stores))) as two,
    ):
        assert translate(two, "red house")["translation"] == "rot haus"
        version = one.put(TERMS.format("docs"), json={"source": "house", "target": "Gebäude"},
                          headers=ADMIN).json()["version"]  # fmt: skip
        time.sleep(0.6)
        seen = translate(two, "red house")
        assert seen["glossary_version"] == version and "Gebäude" in seen["translation"]
        assert two.get(GLOSSARY.format("docs"), headers=CLIENT).json()["version"] == version
        # a change made by the second is merged with the first's, not lost
        two.put(TERMS.format("docs"), json={"source": "tree", "target": "Baum"}, headers=ADMIN)
        one.put(TERMS.format("docs"), json={"source": "red", "target": "Rot"}, headers=ADMIN)
        time.sleep(0.6)
        sources = [
            t["source"] for t in two.get(GLOSSARY.format("docs"), headers=CLIENT).json()["terms"]
        ]
        assert sources == ["house", "red", "tree"]
        one.delete(GLOSSARY.format("docs"), headers=ADMIN)
        time.sleep(0.6)
        cleared = translate(two, "red house")
        assert cleared["translation"] == "rot haus" and "glossary_version" not in cleared
