"""`ragmt worker` as its own process: a job queued on real Redis (`redis_url`) becomes a store
version."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from service.redis_backend import redis_backends
from service.worker import uploads_dir
from tests.toy import toy_pairs

pytestmark = pytest.mark.system


async def _submit_and_wait(url: str, prefix: str, spec: dict, timeout: float = 60.0):
    backends = await redis_backends(url, prefix)
    try:
        job = await backends.jobs.submit(spec, dedup_key=spec["files"][0])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = await backends.jobs.get(job.id)
            if current is not None and current.state in ("done", "failed"):
                return current
            await asyncio.sleep(0.2)
        raise AssertionError(f"job {job.id} not finished in {timeout} s")
    finally:
        await backends.close()


async def _cleanup(url: str, prefix: str) -> None:
    import redis.asyncio as aioredis

    r = aioredis.from_url(url)
    keys = [k async for k in r.scan_iter(match=f"{prefix}:*")]
    if keys:
        await r.delete(*keys)
    await r.aclose()


def test_worker_process_builds_a_queued_store_and_stops_on_sigterm(
    redis_url: str, tmp_path: Path
) -> None:
    stores = tmp_path / "stores"
    text = "".join(f"{s}\t{t}\n" for s, t in toy_pairs(40, seed=5)).encode()
    name = hashlib.sha256(text).hexdigest() + ".tsv"
    uploads_dir(stores).mkdir(parents=True)
    (uploads_dir(stores) / name).write_bytes(text)
    prefix = f"ragmt-test-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RAGMT_REDIS_PREFIX": prefix, "RAGMT_STORES_DIR": str(stores)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--redis-url", redis_url],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        spec = {
            "domain": "toy", "method": "idf-sentence", "format": "tsv", "files": [name],
            "source_lang": "en", "target_lang": "de", "params": {},
        }  # fmt: skip
        job = asyncio.run(_submit_and_wait(redis_url, prefix, spec))
        assert job.state == "done", (job.error, job.message)
        version = job.result["version"]
        assert (stores / "toy" / version / "manifest.json").is_file()
        assert job.result["pairs"] == 40
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        asyncio.run(_cleanup(redis_url, prefix))
    assert proc.returncode == 0, out.decode()
