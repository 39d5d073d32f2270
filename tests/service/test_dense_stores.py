"""Dense (FAISS) stores behind the service: served with the bundle they were built with,
refused at activation when that bundle is not loaded (the model-hash check)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from index_builder.corpus import Pair
from index_builder.store import build_store, set_active
from models.bundle import load_bundle, save_bundle
from models.registry import build_model
from service.app import create_app
from service.settings import Settings
from tests.service.conftest import running
from tests.toy import toy_pairs

pytest.importorskip("faiss")
pytestmark = [pytest.mark.integration, pytest.mark.anyio]

ADMIN = {"X-Admin-Key": "adm"}
PAIRS = [Pair(s, t) for s, t in toy_pairs(30, seed=41)]
PARAMS = {"widths": [2, 1]}


@pytest.fixture(scope="module")
def other_bundle(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of the same shape with other (untrained) weights: another encoder."""
    config = load_bundle(bundle).manifest["config"]
    torch.manual_seed(123)
    path = tmp_path_factory.mktemp("other-bundle") / "other"
    save_bundle(
        path,
        build_model("transformer", config),
        "transformer",
        languages={"source": "en", "target": "de"},
        extra_files={"spm.model": bundle / "spm.model"},
    )
    return path


async def test_dense_store_needs_the_bundle_it_was_built_with(
    bundle: Path, other_bundle: Path, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    ours = build_store(PAIRS, "toy", "dense-ngram", stores, PARAMS, model=bundle).name
    set_active(stores, "toy", ours)
    theirs = build_store(PAIRS[:20], "toy", "dense-ngram", stores, PARAMS, model=other_bundle)
    app = create_app(Settings(model_path=bundle, stores_dir=stores, admin_key="adm", beam_size=1))
    async with running(app) as c:
        resp = await c.post(
            "/v1/translate",
            json={"texts": [PAIRS[0].source], "domain": "toy", "return_neighbours": True},
        )
        assert resp.status_code == 200, resp.text
        result = resp.json()["results"][0]
        assert result["store_version"] == ours
        best = result["neighbours"][0]
        assert (best["source"], best["target"]) == (PAIRS[0].source, PAIRS[0].target)
        resp = await c.post(
            "/v1/domains/toy/activate", json={"version": theirs.name}, headers=ADMIN
        )
        assert resp.status_code == 422, resp.text
        err = resp.json()["error"]
        assert err["code"] == "activation_failed" and "model hash" in err["message"]
        info = (await c.get("/v1/domains/toy")).json()
        assert (info["active_version"], info["method"]) == (ours, "dense-ngram")


async def test_dense_store_from_an_upload_job(bundle: Path, tmp_path: Path) -> None:
    """The worker builds dense stores with the served bundle; the job is idempotent."""
    stores = tmp_path / "stores"
    app = create_app(Settings(model_path=bundle, stores_dir=stores, admin_key="adm", beam_size=1))
    corpus = "".join(f"{p.source}\t{p.target}\n" for p in PAIRS).encode()
    async with running(app) as c:
        job_ids = []
        for _ in range(2):
            resp = await c.post(
                "/v1/domains/toy/corpora",
                files={"file": ("c.tsv", corpus)},
                data={"method": "dense-ngram", "widths": "2,1"},
                headers=ADMIN,
            )
            assert resp.status_code == 202, resp.text
            job_ids.append(resp.json()["id"])
            for _ in range(400):
                job = (await c.get(f"/v1/jobs/{job_ids[-1]}", headers=ADMIN)).json()
                if job["state"] in ("done", "failed"):
                    break
                await asyncio.sleep(0.05)
            assert job["state"] == "done", job
        assert job_ids[0] == job_ids[1]
        version = job["result"]["version"]
        resp = await c.post("/v1/domains/toy/activate", json={"version": version}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        resp = await c.post(
            "/v1/translate",
            json={"texts": [PAIRS[3].source], "domain": "toy", "return_neighbours": True},
        )
        result = resp.json()["results"][0]
        assert result["store_version"] == version
        assert result["neighbours"][0]["source"] == PAIRS[3].source
