"""File translation through the app (toy model): upload a PO or XLIFF file, follow the job to
done, download a file in which only the untranslated targets changed; keys and domain scopes;
a large job does not hold up other requests; a stopped server leaves a failed job, not half
a file."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest
from lxml import etree

from service.app import create_app
from service.settings import Settings
from tests.service.conftest import make_store, running
from tests.toy import gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

KEYS = [
    {"name": "alice", "key": "alice-key", "translate": ["toy", "general"]},
    {"name": "bob", "key": "bob-key", "translate": ["toy", "general"]},
    {"name": "carol", "key": "carol-key", "translate": ["general"]},
]
ALICE, BOB, CAROL = ({"X-API-Key": f"{n}-key"} for n in ("alice", "bob", "carol"))
ADMIN = {"X-API-Key": "adm"}  # the admin key opens client routes too

PO = """\
# Toy catalogue.
msgid ""
msgstr ""
"Language: de\\n"
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\\n"

#: a.py:1
msgid "red house"
msgstr ""

msgid "blue tree"
msgstr "schon übersetzt"

#, python-format
msgid "one green tree %(count)s"
msgstr ""

msgid ""
"two house\\n"
"three tree"
msgstr ""

msgid "one house"
msgid_plural "five house"
msgstr[0] ""
msgstr[1] ""

msgctxt "again"
msgid "red house"
msgstr ""
"""
PO_DE = (
    PO.replace(
        '#: a.py:1\nmsgid "red house"\nmsgstr ""',
        f'#: a.py:1\nmsgid "red house"\nmsgstr "{gloss("red house")}"',
    )
    .replace('%(count)s"\nmsgstr ""', f'%(count)s"\nmsgstr "{gloss("one green tree")} %(count)s"')
    .replace(
        '"three tree"\nmsgstr ""',
        f'"three tree"\nmsgstr ""\n"{gloss("two house")}\\n"\n"{gloss("three tree")}"',
    )
    .replace('msgstr[0] ""', f'msgstr[0] "{gloss("one house")}"')
    .replace('msgstr[1] ""', f'msgstr[1] "{gloss("five house")}"')
    .replace(
        '"again"\nmsgid "red house"\nmsgstr ""',
        f'"again"\nmsgid "red house"\nmsgstr "{gloss("red house")}"',
    )
)

XLIFF = """\
<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="toy">
    <body>
      <trans-unit id="1">
        <source>red <g id="b">blue</g> house <x id="br"/> three</source>
      </trans-unit>
      <trans-unit id="2">
        <source>green tree</source>
        <target state="final">schon da</target>
      </trans-unit>
      <trans-unit id="3">
        <source>one two three</source>
        <target state="new"/>
      </trans-unit>
    </body>
  </file>
</xliff>
"""
XLIFF20 = """\
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
 <file id="f"><unit id="u"><segment><source>four <ph id="1"/> five</source></segment></unit>
 </file>
</xliff>
"""


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("file-stores")
    make_store(root, "toy", toy_pairs(40, seed=41), activate=True)
    return root


def settings(bundle: Path, stores: Path, tmp_path: Path, **extra) -> Settings:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    return Settings(
        model_path=bundle,
        stores_dir=stores,
        beam_size=1,
        admin_key="adm",
        api_keys_file=keys,
        install_memories=False,
        **extra,
    )


async def upload(
    c: httpx.AsyncClient, name: str, data: bytes, headers: dict, **form: str
) -> httpx.Response:
    return await c.post("/v1/files", files={"file": (name, data)}, data=form, headers=headers)


async def finished(c: httpx.AsyncClient, file_id: str, headers: dict) -> dict:
    for _ in range(2400):
        resp = await c.get(f"/v1/files/{file_id}", headers=headers)
        assert resp.status_code == 200, resp.text
        job = resp.json()
        if job["state"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"file job {file_id} did not finish: {job}")


def without_targets(text: str) -> str:
    text = re.sub(r"\s*<target\b[^>]*?(/>|>.*?</target>)", "", text, flags=re.S)
    return re.sub(r'(<segment[^>]*?) state="[^"]*"', r"\1", text)


async def test_po_file_round_trip(bundle: Path, stores: Path, tmp_path: Path) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path))) as c:
        resp = await upload(c, "../../etc/de.po", PO.encode(), ALICE, domain="toy")
        assert resp.status_code == 202, resp.text
        job = resp.json()
        assert job["state"] in ("queued", "running", "done")
        assert (job["format"], job["name"], job["domain"]) == ("po", "de.po", "toy")
        assert (job["source_lang"], job["target_lang"]) == ("en", "de")
        # 6 units (the header is none), 5 to fill; 6 distinct lines ("red house" twice)
        assert (job["units"], job["untranslated"], job["texts"]) == (6, 5, 6)
        job = await finished(c, job["id"], ALICE)
        assert job["state"] == "done", job
        assert (job["done"], job["translated"], job["progress"], job["error"]) == (6, 5, 1.0, None)
        assert job["models"] == ["toy-en-de"] and len(job["store_versions"]) == 1
        timings = job["timings"]
        assert timings["translate_s"] > 0 and timings["lines_per_s"] > 0
        assert timings["parse_s"] >= 0 and timings["queued_s"] >= 0
        resp = await c.get(f"/v1/files/{job['id']}/result", headers=ALICE)
        assert resp.status_code == 200
        assert resp.content == PO_DE.encode()
        assert resp.headers["content-type"].startswith("text/x-gettext-translation")
        assert 'filename="de.po"' in resp.headers["content-disposition"]


async def test_xliff_files_round_trip_with_inline_codes(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path))) as c:
        resp = await upload(c, "ui.xlf", XLIFF.encode(), BOB)
        assert resp.status_code == 202, resp.text
        job = await finished(c, resp.json()["id"], BOB)
        assert (job["state"], job["format"], job["untranslated"]) == ("done", "xliff-1.2", 2)
        out = (await c.get(f"/v1/files/{job['id']}/result", headers=BOB)).content.decode()
        etree.fromstring(out.encode())
        assert without_targets(out) == without_targets(XLIFF)  # only targets changed
        assert '<target state="final">schon da</target>' in out
        assert f'<target state="translated">{gloss("one two three")}</target>' in out
        unit1 = re.search(r'<target state="translated">(.*?)</target>\n', out).group(1)
        # every inline code back once, the pair around its own word's translation (the toy
        # model knows no masks and drops them; the pair is moved to "blau" where it wrote it)
        assert unit1.count('<x id="br"/>') == 1 and unit1.count("<g ") == 1
        assert f'<g id="b">{gloss("blue")}</g>' in unit1

        resp = await upload(c, "ui20.xlf", XLIFF20.encode(), BOB, source_lang="en")
        job = await finished(c, resp.json()["id"], BOB)
        assert (job["state"], job["format"]) == ("done", "xliff-2.0"), job
        out = (await c.get(f"/v1/files/{job['id']}/result", headers=BOB)).content.decode()
        assert without_targets(out) == without_targets(XLIFF20)
        assert '<segment state="translated"><source>' in out
        assert re.search(r'<target>[^<>]*<ph id="1"/>[^<>]*</target>', out)
        assert resp.headers["content-type"] == "application/json"  # the upload's own answer


async def test_only_the_sender_or_the_admin_reads_a_job(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path))) as c:
        resp = await upload(c, "de.po", PO.encode(), ALICE, domain="toy")
        file_id = resp.json()["id"]
        await finished(c, file_id, ALICE)
        for path in (f"/v1/files/{file_id}", f"/v1/files/{file_id}/result"):
            assert (await c.get(path, headers=ALICE)).status_code == 200
            assert (await c.get(path, headers=ADMIN)).status_code == 200
            resp = await c.get(path, headers=BOB)  # another key: no such file, as for any id
            assert (resp.status_code, resp.json()["error"]["code"]) == (404, "unknown_file")
            assert (await c.get(path)).status_code == 401
            assert (await c.get(path, headers={"X-API-Key": "nope"})).status_code == 403
        missing = await c.get("/v1/files/" + "0" * 32, headers=ALICE)
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "unknown_file")
        assert (await c.get("/v1/files/../../etc", headers=ALICE)).status_code == 404
        assert (await c.get("/v1/files/not-an-id", headers=ALICE)).status_code == 422

        resp = await upload(c, "de.po", PO.encode(), CAROL, domain="toy")  # not her domain
        assert (resp.status_code, resp.json()["error"]["code"]) == (403, "domain_forbidden")
        resp = await upload(c, "de.po", PO.encode(), {})  # refused before the body is read
        assert resp.status_code == 401
        resp = await upload(c, "de.po", PO.encode(), {"Authorization": "Bearer nope"})
        assert resp.status_code == 403


async def test_bad_files_and_languages_are_refused_with_what_and_where(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path))) as c:
        resp = await upload(c, "x.po", b'msgid "a"\nmsgstr "b\n', ALICE)
        err = resp.json()["error"]
        assert (resp.status_code, err["code"], err["field"]) == (422, "invalid_file", "file")
        assert err["message"] == "file: line 2: expected a quoted string"
        resp = await upload(c, "x.xlf", b"<xliff version='1.2'><file>", ALICE)
        assert resp.json()["error"]["message"].startswith("file: not well-formed XML")
        resp = await upload(c, "x.xlf", XLIFF.encode(), ALICE, target_lang="fr")
        err = resp.json()["error"]
        assert (resp.status_code, err["code"]) == (422, "unsupported_language")
        assert (
            err["message"] == "the file's target language is 'de' (line 3), not the requested 'fr'"
        )
        french = XLIFF.replace('target-language="de"', 'target-language="fr"')
        resp = await upload(c, "x.xlf", french.encode(), ALICE)  # the file's languages
        err = resp.json()["error"]
        assert (resp.status_code, err["code"]) == (422, "unsupported_language")
        assert err["message"] == "en->fr is not served; served pairs: en->de"
        resp = await upload(c, "x.po", PO.encode(), ALICE, domain="nowhere")
        assert resp.status_code == 403  # outside the key's scope: as if it did not exist
        resp = await upload(c, "x.po", PO.encode(), ADMIN, domain="nowhere")
        assert (resp.status_code, resp.json()["error"]["code"]) == (404, "unknown_domain")


def big_po(n: int) -> bytes:
    """A catalogue of `n` distinct untranslated toy sentences."""
    seen: dict[str, None] = {}
    seed = 0
    while len(seen) < n:
        for s, _ in toy_pairs(500, seed=seed):
            seen.setdefault(s, None)
        seed += 1
    entries = "".join(f'msgid "{s}"\nmsgstr ""\n\n' for s in list(seen)[:n])
    return ('msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n' + entries).encode()


async def test_other_requests_are_answered_while_a_large_file_is_translated(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path, cache_ttl_s=0))) as c:
        resp = await upload(c, "big.po", big_po(1500), ALICE)
        assert resp.status_code == 202, resp.text
        file_id = resp.json()["id"]
        for _ in range(600):  # its first chunks are through
            job = (await c.get(f"/v1/files/{file_id}", headers=ALICE)).json()
            if job["done"] > 0:
                break
            await asyncio.sleep(0.02)
        assert job["state"] == "running" and 0 < job["done"] < job["texts"], job
        start = time.perf_counter()
        resp = await c.post("/v1/translate", json={"texts": ["red house"]}, headers=BOB)
        waited = time.perf_counter() - start
        assert resp.json()["results"][0]["translation"] == gloss("red house")
        job = (await c.get(f"/v1/files/{file_id}", headers=ALICE)).json()
        assert job["state"] == "running", f"the file finished first ({waited:.2f} s)"
        assert job["done"] < job["texts"]
        job = await finished(c, file_id, ALICE)
        assert (job["state"], job["done"], job["translated"]) == ("done", 1500, 1500)


async def test_a_stopped_server_leaves_a_failed_job_and_no_result(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    app = create_app(settings(bundle, stores, tmp_path))
    async with running(app) as c:
        resp = await upload(c, "big.po", big_po(600), ALICE)
        file_id = resp.json()["id"]
        await asyncio.sleep(0.2)
    assert not (stores / ".files" / file_id / "result").exists()
    async with running(create_app(settings(bundle, stores, tmp_path))) as c:  # a new replica
        job = (await c.get(f"/v1/files/{file_id}", headers=ALICE)).json()
        assert job["state"] == "failed" and "stopped" in job["error"], job
        resp = await c.get(f"/v1/files/{file_id}/result", headers=ALICE)
        assert (resp.status_code, resp.json()["error"]["code"]) == (409, "file_failed")


async def test_finished_jobs_are_removed_after_their_ttl(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    async with running(create_app(settings(bundle, stores, tmp_path, file_ttl_s=0.5))) as c:
        first = (await upload(c, "a.po", PO.encode(), ALICE)).json()["id"]
        await finished(c, first, ALICE)
        await asyncio.sleep(0.6)
        second = (await upload(c, "b.po", PO.encode(), ALICE)).json()["id"]
        assert (await c.get(f"/v1/files/{first}", headers=ALICE)).status_code == 404
        assert not (stores / ".files" / first).exists()
        await finished(c, second, ALICE)


async def test_files_may_be_as_large_as_uploads(bundle: Path, stores: Path, tmp_path: Path) -> None:
    limits = {"max_body_bytes": 1000, "max_upload_bytes": 200_000}
    async with running(create_app(settings(bundle, stores, tmp_path, **limits))) as c:
        data = big_po(300)
        assert 1000 < len(data) < 200_000
        resp = await upload(c, "big.po", data, ALICE)
        assert resp.status_code == 202, resp.text
        resp = await upload(c, "huge.po", data * 20, ALICE)
        assert (resp.status_code, resp.json()["error"]["limit"]) == (413, "max_upload_bytes")


async def test_another_replica_reads_the_job_and_its_result(
    bundle: Path, stores: Path, tmp_path: Path
) -> None:
    """State and result live in the shared stores directory: any replica answers."""
    async with (
        running(create_app(settings(bundle, stores, tmp_path))) as a,
        running(create_app(settings(bundle, stores, tmp_path))) as b,
    ):
        file_id = (await upload(a, "de.po", PO.encode(), ALICE, domain="toy")).json()["id"]
        job = await finished(b, file_id, ALICE)
        assert job["state"] == "done", job
        resp = await b.get(f"/v1/files/{file_id}/result", headers=ALICE)
        assert resp.content == PO_DE.encode()
        assert (await b.get(f"/v1/files/{file_id}", headers=BOB)).status_code == 404

        state = stores / ".files" / file_id / "state.json"  # a replica that died mid-job
        frozen = json.loads(state.read_text()) | {"state": "running", "updated_at": 1.0}
        state.write_text(json.dumps(frozen))
        (stores / ".files" / file_id / "result").unlink()
        job = (await b.get(f"/v1/files/{file_id}", headers=ALICE)).json()
        assert job["state"] == "failed" and "stopped" in job["error"], job
