"""Corpus upload -> store-build job -> activate -> translate, through the real worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from xml.sax.saxutils import escape

import httpx
import pytest
from pydantic import SecretStr

from index_builder.store import list_versions, open_store
from service.app import create_app
from service.settings import Settings
from service.shared import memory_backends
from service.worker import process_job, run_worker
from tests.service.conftest import make_store, running
from tests.toy import gloss, toy_pairs

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADMIN = {"X-Admin-Key": "admin-secret"}
PAIRS = toy_pairs(30, seed=5)


def settings(bundle: Path, stores: Path) -> Settings:
    return Settings(model_path=bundle, stores_dir=stores, admin_key="admin-secret", beam_size=1)


def tsv(pairs: list[tuple[str, str]]) -> bytes:
    return "".join(f"{s}\t{t}\n" for s, t in pairs).encode()


def tmx(pairs: list[tuple[str, str]]) -> bytes:
    units = "".join(
        f'<tu><tuv xml:lang="en-GB"><seg>{escape(s)}</seg></tuv>'
        f'<tuv xml:lang="de"><seg>{escape(t)}</seg></tuv></tu>\n'
        for s, t in pairs
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header srclang="en" '
        f'adminlang="en" datatype="plaintext" segtype="sentence" o-tmf="x" '
        f'creationtool="t" creationtoolversion="1"/><body>\n{units}</body></tmx>\n'
    ).encode()


async def upload(c: httpx.AsyncClient, domain: str, files: dict, **data) -> httpx.Response:
    return await c.post(f"/v1/domains/{domain}/corpora", files=files, data=data, headers=ADMIN)


async def finished(c: httpx.AsyncClient, job_id: str) -> dict:
    for _ in range(600):
        job = (await c.get(f"/v1/jobs/{job_id}", headers=ADMIN)).json()
        if job["state"] in ("done", "failed"):
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


async def test_upload_tsv_and_tmx_build_activate_translate(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    app = create_app(settings(bundle, stores))
    async with running(app) as c:
        resp = await upload(c, "legal", {"file": ("memory.tsv", tsv(PAIRS))}, method="idf-ngram")
        assert resp.status_code == 202, resp.text
        job = await finished(c, resp.json()["id"])
        assert (job["state"], job["progress"], job["error"]) == ("done", 1.0, None)
        assert (job["domain"], job["method"]) == ("legal", "idf-ngram")
        tsv_version = job["result"]["version"]
        assert job["result"]["pairs"] == len(PAIRS)

        # The same corpus as TMX, sentence method: a second version of the same pairs.
        resp = await upload(c, "legal", {"file": ("memory.tmx", tmx(PAIRS))}, method="idf-sentence")
        job = await finished(c, resp.json()["id"])
        assert job["state"] == "done", job
        tmx_version = job["result"]["version"]
        assert (
            job["result"]["corpus_sha256"]
            == open_store(stores / "legal" / tsv_version).manifest["corpus_sha256"]
        )  # same pairs, whichever format they came in
        assert list_versions(stores, "legal") == sorted([tsv_version, tmx_version])

        info = (await c.get("/v1/domains/legal")).json()
        assert (info["state"], info["active_version"]) == ("inactive", None)
        resp = await c.post(
            "/v1/domains/legal/activate", json={"version": tmx_version}, headers=ADMIN
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["method"] == "idf-sentence"
        text = PAIRS[0][0]
        resp = await c.post(
            "/v1/translate", json={"texts": [text], "domain": "legal", "return_neighbours": True}
        )
        assert resp.status_code == 200, resp.text
        result = resp.json()["results"][0]
        assert (result["translation"], result["store_version"]) == (gloss(text), tmx_version)
        assert (result["neighbours"][0]["source"], result["neighbours"][0]["target"]) == PAIRS[0]
    # Uploads are removed once their job has finished.
    assert list((stores / ".uploads").iterdir()) == []


async def test_moses_pair_and_idempotent_jobs(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    app = create_app(settings(bundle, stores))
    src = "".join(s + "\n" for s, _ in PAIRS).encode()
    tgt = "".join(t + "\n" for _, t in PAIRS).encode()
    files = {"file": ("a.en", src), "target_file": ("a.de", tgt)}
    async with running(app) as c:
        first = await upload(c, "subtitles", files, method="idf-ngram", widths="3,1")
        assert first.status_code == 202, first.text
        job = await finished(c, first.json()["id"])
        assert job["state"] == "done", job
        again = await upload(c, "subtitles", files, method="idf-ngram", widths="3,1")
        assert again.json()["id"] == job["id"] and again.json()["state"] == "done"
        assert len(list_versions(stores, "subtitles")) == 1
        manifest = open_store(stores / "subtitles" / job["result"]["version"]).manifest
        assert manifest["params"]["widths"] == [3, 1]


async def test_upload_again_after_its_version_was_deleted_builds_again(
    bundle: Path, tmp_path: Path
) -> None:
    """The same corpus's done job is reused only while its version exists: once that version
    is deleted, uploading the corpus again builds a new version instead of naming the gone one."""
    stores = tmp_path / "stores"
    app = create_app(settings(bundle, stores))
    first_corpus = {"file": ("a.tsv", tsv(PAIRS[:10]))}
    async with running(app) as c:
        first = await finished(c, (await upload(c, "manuals", first_corpus)).json()["id"])
        other = {"file": ("b.tsv", tsv(PAIRS[10:]))}
        second = await finished(c, (await upload(c, "manuals", other)).json()["id"])
        old, kept = first["result"]["version"], second["result"]["version"]
        resp = await c.post("/v1/domains/manuals/activate", json={"version": kept}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        resp = await c.delete(f"/v1/domains/manuals/versions/{old}", headers=ADMIN)
        assert resp.status_code == 200, resp.text

        again = await upload(c, "manuals", first_corpus)
        assert again.status_code == 202, again.text
        assert again.json()["id"] != first["id"]
        rebuilt = await finished(c, again.json()["id"])
        assert rebuilt["state"] == "done", rebuilt
        new = rebuilt["result"]["version"]
        assert new != old and list_versions(stores, "manuals") == sorted([kept, new])
        gone = (await c.get(f"/v1/jobs/{first['id']}", headers=ADMIN)).json()
        assert gone["state"] == "failed" and "deleted" in gone["error"]
        resp = await c.post("/v1/domains/manuals/activate", json={"version": new}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        # While the version exists, the same upload still answers with the same job.
        assert (await upload(c, "manuals", first_corpus)).json()["id"] == rebuilt["id"]


async def test_bad_corpus_fails_the_job_and_leaves_no_store(bundle: Path, tmp_path: Path) -> None:
    stores = tmp_path / "stores"
    app = create_app(settings(bundle, stores))
    async with running(app) as c:
        bad = b"red house\trot haus\nblue tree\n"  # line 2 has no target column
        resp = await upload(c, "broken", {"file": ("../../etc/evil.tsv", bad)})
        job = await finished(c, resp.json()["id"])
        assert job["state"] == "failed" and "line 2" in job["error"]
        assert str(stores) not in job["error"]
        assert list_versions(stores, "broken") == []
        assert not (tmp_path / "etc").exists()  # the client's file name was never a path
        invalid = await upload(c, "broken", {"file": ("x.tsv", b"\xff\xfe\tzwei\n")})
        job = await finished(c, invalid.json()["id"])
        assert job["state"] == "failed" and "UTF-8" in job["error"]
        assert job["error"].startswith("uploaded corpus: line 1: invalid UTF-8")
        assert not (stores / "broken").exists()
        # Refused before any job: unknown format, empty file, bad widths, bad domain name.
        for files, data, field in [
            ({"file": ("corpus.bin", b"x")}, {}, "format"),
            ({"file": ("corpus.tsv", b"")}, {}, "file"),
            ({"file": ("corpus.tsv", b"a\tb\n")}, {"widths": "0,x"}, "widths"),
            ({"file": ("corpus.tsv", b"a\tb\n")}, {"method": "nope"}, "method"),
        ]:
            resp = await upload(c, "broken", files, **data)
            assert resp.status_code == 422, resp.text
            assert resp.json()["error"]["field"] == field
        resp = await upload(c, "Bad..Name", {"file": ("c.tsv", b"a\tb\n")})
        assert resp.status_code == 422 and resp.json()["error"]["field"] == "domain"
        resp = await c.get("/v1/jobs/0123abc", headers=ADMIN)
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "unknown_job"


async def test_worker_loop_on_its_own(tmp_path: Path) -> None:
    """`run_worker` as `ragmt worker` runs it: claims, builds, records, and stops on request."""
    stores = tmp_path / "stores"
    (stores / ".uploads").mkdir(parents=True)
    name = "a" * 64 + ".tsv"
    (stores / ".uploads" / name).write_bytes(tsv(PAIRS))
    backends = memory_backends()
    spec = {
        "domain": "docs",
        "method": "idf-sentence",
        "params": {},
        "format": "tsv",
        "files": [name],
        "source_lang": "en",
        "target_lang": "de",
    }
    job = await backends.jobs.submit(spec, "docs:a")
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(backends, stores, "test", stop, block_ms=50))
    for _ in range(400):
        if (await backends.jobs.get(job.id)).state in ("done", "failed"):
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(worker, 5)
    done = await backends.jobs.get(job.id)
    assert done.state == "done", done.error
    assert list_versions(stores, "docs") == [done.result["version"]]
    # Delivered again (a worker died before its ack): nothing is built twice.
    (stores / ".uploads" / name).write_bytes(tsv(PAIRS))
    done.state = "running"
    assert await process_job(backends.jobs, stores, done) == "done"
    assert (await backends.jobs.get(job.id)).result["reused"] is True
    assert list_versions(stores, "docs") == [done.result["version"]]
    # A spec naming a path instead of an upload is refused.
    evil = await backends.jobs.submit({**spec, "files": ["../../x.tsv"]}, "docs:evil")
    assert await process_job(backends.jobs, stores, evil) == "failed"
    assert "upload names" in (await backends.jobs.get(evil.id)).error


async def test_with_a_signing_key_only_signed_stores_serve(bundle: Path, tmp_path: Path) -> None:
    """A server that requires signatures refuses an unsigned store (as it refuses an edited one
    whose checksums were recomputed: tests/index_builder/test_store_safety.py), while what its
    own worker builds is signed and serves; an unsigned version of the corpus is not reused."""
    stores = tmp_path / "stores"
    unsigned = make_store(stores, "toy", PAIRS, method="idf-ngram")
    s = settings(bundle, stores).model_copy(update={"store_signing_key": SecretStr("shared")})
    async with running(create_app(s)) as c:
        resp = await c.post("/v1/domains/toy/activate", json={"version": unsigned}, headers=ADMIN)
        assert resp.status_code == 422, resp.text
        assert "unsigned store" in resp.json()["error"]["message"]
        resp = await upload(c, "toy", {"file": ("c.tsv", tsv(PAIRS))}, method="idf-ngram")
        job = await finished(c, resp.json()["id"])
        assert job["state"] == "done" and not job["result"]["reused"], job
        signed = job["result"]["version"]
        assert signed != unsigned
        open_store(stores / "toy" / signed, b"shared")
        resp = await c.post("/v1/domains/toy/activate", json={"version": signed}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        got = await c.post("/v1/translate", json={"texts": ["red tree"], "domain": "toy"})
        assert got.json()["results"][0]["store_version"] == signed
