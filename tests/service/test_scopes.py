"""Scoped API keys (RAGMT_API_KEYS_FILE): a key translates with, and reads the neighbours of,
only the domains its entry lists, and learns nothing of the others: not from the answers to
its requests, /v1/domains, /info, /metrics or the translation cache. Plain RAGMT_API_KEYS
keys and the admin key keep every scope."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from service.app import create_app
from service.settings import Settings, check_environment
from tests.service.conftest import make_store, running
from tests.toy import gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SECRET = "sk-4f9a-never-printed"
ENTRIES = [
    {"name": "everything", "key": "all-key", "translate": "*", "neighbours": "*"},
    {"name": "toy-only", "key": "toy-key", "translate": ["toy"]},
    {"name": "toy-memory", "key": "mem-key", "translate": ["toy"], "neighbours": ["toy"]},
    {"name": "toy-later", "key": "later-key", "translate": ["toy", "later"]},
    {"name": "monitor", "key": "mon-key", "metrics": True},
]
KEYS = {
    "everything": "all-key",
    "toy-only": "toy-key",
    "toy-memory": "mem-key",
    "toy-later": "later-key",
    "monitor": "mon-key",
    "plain": "plain-key",  # RAGMT_API_KEYS
    "admin": "adm",
}
ALL_DOMAINS = ["acme", "general", "toy"]
TEXT = "red house"


def headers(who: str) -> dict[str, str]:
    return {"X-API-Key": KEYS[who]}


def write_keys(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(entries))
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two customers' memories, each active: "toy" and "acme"."""
    root = tmp_path_factory.mktemp("scoped-stores")
    make_store(root, "toy", toy_pairs(30, seed=31), activate=True)
    make_store(root, "acme", toy_pairs(30, seed=32), activate=True)
    return root


def settings(bundle: Path, stores: Path, keys: Path, **extra: Any) -> Settings:
    base = dict(
        model_path=bundle,
        stores_dir=stores,
        api_keys_file=keys,
        api_keys="plain-key",
        admin_key="adm",
        beam_size=1,
    )
    return Settings(**(base | extra))


@pytest.fixture
def app(bundle: Path, stores: Path, tmp_path: Path):
    return create_app(settings(bundle, stores, write_keys(tmp_path / "keys.json", ENTRIES)))


async def translate(c, who: str, domain: str, neighbours: bool = False, texts=(TEXT,)):
    body = {"texts": list(texts), "domain": domain, "return_neighbours": neighbours}
    return await c.post("/v1/translate", json=body, headers=headers(who))


# who -> the domains it may translate with, and those it may read neighbours from
TRANSLATE = {
    "everything": ALL_DOMAINS,
    "toy-only": ["toy"],
    "toy-memory": ["toy"],
    "plain": ALL_DOMAINS,
    "admin": ALL_DOMAINS,
    "monitor": [],
}
NEIGHBOURS = TRANSLATE | {"toy-only": []}


@pytest.mark.parametrize("who", sorted(TRANSLATE))
async def test_each_key_translates_with_its_domains_only(app, who: str) -> None:
    async with running(app) as c:
        for domain in ALL_DOMAINS:
            resp = await translate(c, who, domain)
            if domain in TRANSLATE[who]:
                assert resp.status_code == 200, (domain, resp.text)
                result = resp.json()["results"][0]
                assert (result["domain"], result["translation"]) == (domain, gloss(TEXT))
                assert "neighbours" not in result
            else:
                assert resp.status_code == 403, (domain, resp.text)
                assert resp.json()["error"]["code"] == "domain_forbidden"


@pytest.mark.parametrize("who", sorted(NEIGHBOURS))
async def test_neighbours_need_the_neighbours_scope(app, who: str) -> None:
    async with running(app) as c:
        for domain in ("toy", "acme"):
            resp = await translate(c, who, domain, neighbours=True)
            if domain in NEIGHBOURS[who]:
                assert resp.status_code == 200, (domain, resp.text)
                assert resp.json()["results"][0]["neighbours"], domain  # the memory, read
            else:
                assert resp.status_code == 403, (domain, resp.text)
                error = resp.json()["error"]
                assert error["code"] == "domain_forbidden"
                reading = domain in TRANSLATE[who]  # may translate, not read the memory
                assert ("neighbours" in error["message"]) is reading, error
                assert "rot" not in resp.text and "haus" not in resp.text


async def test_an_unknown_domain_and_a_forbidden_one_answer_alike(app) -> None:
    """To a scoped key, a domain it may not use and one that does not exist are the same 403:
    it cannot probe for other customers' domain names."""
    async with running(app) as c:
        for neighbours in (False, True):
            answers = [
                await translate(c, "toy-only", domain, neighbours)
                for domain in ("acme", "nope", "Not a domain!", "")
            ]
            assert len({(r.status_code, r.text) for r in answers}) == 1
            assert answers[0].status_code == 403
        reads = [
            await c.get(f"/v1/domains/{d}", headers=headers("toy-only")) for d in ("acme", "nope")
        ]
        assert reads[0].status_code == reads[1].status_code == 403
        assert reads[0].text == reads[1].text and "acme" not in reads[0].text
        # A domain of the key's scope without a store directory: 404, naming only its domains.
        resp = await translate(c, "toy-later", "later")
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["code"] == "unknown_domain"
        assert "toy" in resp.text and "acme" not in resp.text and "general" not in resp.text
        resp = await c.get("/v1/domains/later", headers=headers("toy-later"))
        assert resp.status_code == 404 and "acme" not in resp.text
        # A key of every scope is told what exists, as before.
        resp = await translate(c, "everything", "nope")
        assert resp.status_code == 404 and "acme" in resp.json()["error"]["message"]


async def test_domain_reads_are_per_key(app) -> None:
    async with running(app) as c:
        for who in TRANSLATE:
            resp = await c.get("/v1/domains", headers=headers(who))
            assert resp.status_code == 200, resp.text
            assert [d["domain"] for d in resp.json()["domains"]] == TRANSLATE[who], who
            for domain in ALL_DOMAINS:
                resp = await c.get(f"/v1/domains/{domain}", headers=headers(who))
                assert resp.status_code == (200 if domain in TRANSLATE[who] else 403), who
        resp = await c.get("/v1/domains", headers=headers("toy-later"))
        assert [d["domain"] for d in resp.json()["domains"]] == ["toy"]  # "later": no store


async def test_info_names_domains_only_to_a_key_that_opens_them(
    app, bundle: Path, stores: Path
) -> None:
    async with running(app) as c:
        for sent, domains in (
            ({}, []),
            ({"X-API-Key": "wrong"}, []),
            (headers("toy-only"), ["toy"]),
            ({"Authorization": "Bearer toy-key"}, ["toy"]),
            (headers("everything"), ALL_DOMAINS),
            (headers("plain"), ALL_DOMAINS),
            ({"X-Admin-Key": "adm"}, ALL_DOMAINS),
        ):
            resp = await c.get("/info", headers=sent)
            assert resp.status_code == 200  # public: models and limits for anyone
            assert resp.json()["domains"] == domains, sent
            assert resp.json()["models"]
    no_keys = Settings(model_path=bundle, stores_dir=stores, beam_size=1)
    async with running(create_app(no_keys)) as c:  # no keys configured: as before
        assert (await c.get("/info")).json()["domains"] == ALL_DOMAINS


async def test_metrics_need_the_admin_key_or_a_metrics_key(app) -> None:
    """Its labels name every domain: a client key that opens some of them may not read it."""
    async with running(app) as c:
        assert (await translate(c, "everything", "acme")).status_code == 200
        assert (await translate(c, "toy-only", "acme")).status_code == 403
        resp = await c.get("/metrics")
        assert resp.status_code == 401 and "acme" not in resp.text
        for who in ("toy-only", "everything", "plain"):
            resp = await c.get("/metrics", headers=headers(who))
            assert resp.status_code == 403 and "acme" not in resp.text, who
        for sent in (headers("monitor"), {"Authorization": "Bearer mon-key"}, headers("admin")):
            resp = await c.get("/metrics", headers=sent)
            assert resp.status_code == 200, sent
            assert 'domain="acme"' in resp.text
            assert 'ragmt_rejections_total{reason="domain_forbidden"} 1.0' in resp.text


async def test_cached_neighbours_stay_with_the_keys_that_may_read_them(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    """A translation cached with its neighbours for a key that may read them is served from
    the cache to a key that may not, without them; asking for them is still 403."""
    keys = write_keys(tmp_path / "keys.json", ENTRIES)
    app = create_app(settings(bundle, stores, keys, cache_ttl_s=600))
    texts = [TEXT, "two trees"]
    async with running(app) as c:
        first = await translate(c, "toy-memory", "toy", neighbours=True, texts=texts)
        assert first.status_code == 200 and first.json()["timings"]["cache_hits"] == 0
        assert all(r["neighbours"] for r in first.json()["results"])
        refused = await translate(c, "toy-only", "toy", neighbours=True, texts=texts)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "domain_forbidden"
        plain = await translate(c, "toy-only", "toy", texts=texts)
        assert plain.status_code == 200 and plain.json()["timings"]["cache_hits"] == 2
        for result, cached in zip(plain.json()["results"], first.json()["results"], strict=True):
            assert result["translation"] == cached["translation"]
            assert "neighbours" not in result
        again = await translate(c, "toy-memory", "toy", neighbours=True, texts=texts)
        assert again.json()["results"] == first.json()["results"]


async def test_rate_budget_is_the_principals(bundle: Path, stores: Path, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.json", ENTRIES)
    app = create_app(settings(bundle, stores, keys, rate_limit=2, rate_window_s=60))
    async with running(app) as c:
        codes = [(await translate(c, "toy-only", "toy")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert (await translate(c, "toy-memory", "toy")).status_code == 200  # its own budget
        metrics = (await c.get("/metrics", headers=headers("admin"))).text
        assert "toy-only" not in metrics and "toy-key" not in metrics


# --- the keys file -------------------------------------------------------------------------


def entry(**fields: Any) -> dict[str, Any]:
    return {"name": "acme", "key": SECRET, "translate": ["acme"]} | fields


def refusal(tmp_path: Path, entries: Any, **extra: Any) -> str:
    """The message that refuses the start with `entries` as the keys file."""
    path = tmp_path / "keys.json"
    path.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    with pytest.raises(ValidationError) as e:
        Settings(api_keys_file=path, **extra)
    message = e.value.errors()[0]["msg"]
    assert SECRET not in message and SECRET not in str(e.value)
    assert str(path) in message
    return message


@pytest.mark.parametrize(
    ("entries", "extra", "says"),
    [
        ([entry(), entry(name="other")], {}, "entry 2 ('other'): its key is also the key of"),
        ([entry(), entry(key="another")], {}, "entry 2 ('acme'): name 'acme' is used twice"),
        ([entry(key="")], {}, "('acme'): key is empty"),
        ([entry(key="   ")], {}, "('acme'): key is empty"),
        ([entry(key=f" {SECRET}")], {}, "('acme'): key starts or ends with white space"),
        ([entry(key=12345)], {}, "('acme'): key: Input should be a valid string"),
        ([entry(translate=["No!"])], {}, "('acme'): translate: 'No!' is not a domain name"),
        ([entry(neighbours=["toy"])], {}, "('acme'): neighbours: toy not among its translate"),
        ([entry(neighbours="*")], {}, "('acme'): neighbours: '*' needs translate '*'"),
        ([entry(translate="all")], {}, "('acme'): translate: expected a list of domain names"),
        ([entry(neighbours=[1])], {}, "('acme'): neighbours: expected a list of domain names"),
        (
            [entry(translate=["toy"])],
            {"domains": "acme"},
            "domain 'toy' is not among RAGMT_DOMAINS",
        ),
        ([entry(scopes=["toy"])], {}, "('acme'): scopes: Extra inputs are not permitted"),
        ([{"key": SECRET, "translate": ["acme"]}], {}, "entry 1: name: Field required"),
        ([entry(name=f"{SECRET}!")], {}, "entry 1: name: String should match pattern"),
        (["acme"], {}, "entry 1: expected an object"),
        ([], {}, "expected a non-empty list of key entries"),
        ({"acme": SECRET}, {}, "expected a non-empty list of key entries"),
        (f'[{{"name": "acme", "key": "{SECRET}",}}]', {}, "not JSON"),
        ([entry(key="plain-key")], {"api_keys": "plain-key"}, "('acme'): its key is also the key"),
        ([entry(key="adm")], {"admin_key": "adm"}, "('acme'): its key is also the key of"),
    ],
)
def test_a_bad_keys_file_refuses_the_start_naming_the_entry_not_its_key(
    tmp_path: Path, entries: Any, extra: dict[str, Any], says: str
) -> None:
    assert says in refusal(tmp_path, entries, **extra)


def test_an_unreadable_keys_file_refuses_the_start(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="cannot read it"):
        Settings(api_keys_file=tmp_path / "absent.json")


def test_a_keys_file_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_keys(
        tmp_path / "keys.json",
        [
            entry(translate=["acme", "general", "acme"], neighbours=["acme"]),
            {"name": "ops", "key": "ops-key", "translate": "*", "metrics": True},
        ],
    )
    for var in [v for v in os.environ if v.upper().startswith("RAGMT_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("RAGMT_API_KEYS_FILE", str(path))
    check_environment()  # a known variable
    s = Settings()
    assert s.keys_required and s.api_keys == []
    acme, ops = s.key_entries
    assert (acme.name, acme.key.get_secret_value(), acme.metrics) == ("acme", SECRET, False)
    assert sorted(set(acme.translate)) == ["acme", "general"] and acme.neighbours == ["acme"]
    assert (ops.translate, ops.neighbours, ops.metrics) == ("*", [], True)
    assert SECRET not in repr(s) and SECRET not in repr(s.key_entries)
    monkeypatch.setenv("RAGMT_API_KEYS_FILE", "")  # compose passes an unset variable as ""
    assert not Settings().keys_required and Settings().api_keys_file is None
