"""The store-build worker: claims corpus jobs, builds store versions, records the outcome.

It runs inside the app (setting `run_worker`, the default) or as its own process (`ragmt
worker`, which calls `main(settings)`), consuming the shared `JobQueue`. A job names uploaded
files by server-generated names under ``<stores_dir>/.uploads/``; the worker checks those
names again, since a job spec may come from a shared queue. Builds are idempotent: a job whose
corpus, method and parameters already have a version in the domain reuses that version, so a
job delivered twice (a worker died before acking) builds once. A failed build leaves no store
(`build_store` writes to a temporary directory) and the job `failed` with the reason.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any

import anyio.to_thread

from index_builder.corpus import CorpusError, Pair
from index_builder.edits import EditLog, EditState, fold_pairs, log_path
from index_builder.readers import read_corpus, read_moses
from index_builder.retrieval.encoder import bundle_sha256
from index_builder.retrieval.idf import IdfNgramParams
from index_builder.store import (
    METHODS,
    SIGNATURE,
    build_store,
    corpus_sha256,
    list_versions,
    manifest_signature,
    open_store,
)
from models.artifacts import MANIFEST, ArtifactError
from service.backends import open_backends
from service.memory_edits import EDITS_THROUGH
from service.settings import DOMAIN_RE, VERSION_RE, Settings
from service.shared import Backends, Job, JobQueue

log = logging.getLogger("ragmt.worker")

UPLOADS = ".uploads"  # under stores_dir; hidden, so never taken for a domain
UPLOAD_NAME = re.compile(r"[0-9a-f]{64}\.(tsv|tmx|src|tgt)")
_UPLOAD_IN_TEXT = re.compile(r"\.uploads/[0-9a-f]{64}\.[a-z]+")
FORMATS = ("tsv", "tmx", "moses", "fold")  # fold: a version and its live edits
HEARTBEAT_S = 30.0  # a running job's record is touched this often (a Redis claim's liveness)


class JobSpecError(ValueError):
    """A job spec this worker refuses (it may have come from a shared queue)."""


def uploads_dir(stores_dir: Path) -> Path:
    return Path(stores_dir) / UPLOADS


def normalised_params(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The parameters as the store records them, so equal requests compare equal."""
    if method == "idf-ngram":
        return IdfNgramParams.from_dict(params).to_dict()
    if method == "dense-ngram":
        from index_builder.retrieval.dense import DenseNgramParams  # FAISS: only when used

        return DenseNgramParams.from_dict(params).to_dict()
    return dict(params)


def encoder_identity(model: Path) -> str:
    """What a dense store records as `model_sha256` for vectors made by bundle `model`."""
    try:
        manifest = json.loads((Path(model) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ArtifactError(f"model bundle for dense stores unreadable: {e}") from e
    return bundle_sha256(manifest)


def check_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """Validate a job spec: domain, method, format, languages and upload names."""
    domain, method, fmt = spec.get("domain"), spec.get("method"), spec.get("format")
    if not isinstance(domain, str) or not DOMAIN_RE.fullmatch(domain):
        raise JobSpecError("invalid domain in job")
    if method not in METHODS:
        raise JobSpecError(f"unknown method {str(method)[:40]!r}")
    if fmt not in FORMATS:
        raise JobSpecError(f"unknown corpus format {str(fmt)[:40]!r}")
    files = spec.get("files")
    if fmt == "fold":
        base, through = spec.get("base"), spec.get("through")
        if not isinstance(base, str) or not VERSION_RE.fullmatch(base):
            raise JobSpecError("a fold names its base version")
        if not isinstance(through, int) or isinstance(through, bool) or through < 1:
            raise JobSpecError("a fold names the last edit it folds (through >= 1)")
        if files != []:
            raise JobSpecError("a fold reads no uploaded files")
    elif not isinstance(files, list) or len(files) != (2 if fmt == "moses" else 1):
        raise JobSpecError("wrong number of corpus files for the format")
    if not all(isinstance(f, str) and UPLOAD_NAME.fullmatch(f) for f in files):
        raise JobSpecError("corpus files must be upload names")
    for lang in (spec.get("source_lang"), spec.get("target_lang")):
        if not isinstance(lang, str) or not re.fullmatch(r"[a-z]{2,3}", lang):
            raise JobSpecError("invalid language code in job")
    if not isinstance(spec.get("params", {}), dict):
        raise JobSpecError("params must be an object")
    return spec


def read_pairs(
    stores_dir: Path, spec: dict[str, Any], signing_key: bytes | None = None
) -> list[Pair]:
    if spec["format"] == "fold":
        return folded_pairs(stores_dir, spec, signing_key)
    paths = [uploads_dir(stores_dir) / name for name in spec["files"]]
    if spec["format"] == "moses":
        return read_moses(paths[0], paths[1])
    return read_corpus(paths[0], spec["format"], spec["source_lang"], spec["target_lang"])


def folded_pairs(
    stores_dir: Path, spec: dict[str, Any], signing_key: bytes | None = None
) -> list[Pair]:
    """The base version's pairs with the domain's edits after its own `edits_through` and up
    to the job's `through` applied (`index_builder.edits`)."""
    store = open_store(Path(stores_dir) / spec["domain"] / spec["base"], signing_key)
    log = EditLog(log_path(stores_dir, spec["domain"]), signing_key)
    log.refresh()
    if log.seq < spec["through"]:
        raise JobSpecError(f"the edit log ends at {log.seq}, before edit {spec['through']}")
    start = store.manifest.get(EDITS_THROUGH, 0)
    state = EditState.of([e for e in log.edits if e.seq <= spec["through"]], after=start)
    pairs = store.pairs
    sources = [pairs.sources[i] for i in range(len(pairs))]
    targets = [pairs.targets[i] for i in range(len(pairs))]
    return fold_pairs(sources, targets, state)


def existing_version(
    stores_dir: Path,
    domain: str,
    corpus_hash: str,
    method: str,
    params: dict[str, Any],
    model_sha256: str | None = None,
    signing_key: bytes | None = None,
) -> str | None:
    """A complete version of `domain` built from the same corpus, method, parameters (and,
    for dense stores, encoder); with `signing_key`, only one signed with it (an unsigned
    one would be refused at activation)."""
    for version in reversed(list_versions(stores_dir, domain)):
        try:
            text = (Path(stores_dir) / domain / version / MANIFEST).read_text(encoding="utf-8")
            m = json.loads(text)
        except (OSError, ValueError):
            continue
        if signing_key is not None and not hmac.compare_digest(
            str(m.get(SIGNATURE, "")), manifest_signature(m, signing_key)
        ):
            continue
        built = (m.get("corpus_sha256"), m.get("method"), m.get("params"), m.get("model_sha256"))
        if built == (corpus_hash, method, params, model_sha256):
            return version
    return None


def build(
    stores_dir: Path,
    spec: dict[str, Any],
    pairs: list[Pair],
    model: Path | None = None,
    signing_key: bytes | None = None,
) -> dict[str, Any]:
    """Build (or find) the version of this corpus; blocking, so it runs in a thread.

    `model` is the bundle dense stores encode with (the served one), unused by sparse ones.
    """
    domain, method = spec["domain"], spec["method"]
    params = normalised_params(method, spec.get("params", {}))
    dense = METHODS[method].uses_model
    if dense and model is None:
        raise JobSpecError(f"{method} needs a model bundle and this worker was given none")
    identity = encoder_identity(model) if dense and model is not None else None
    corpus_hash = corpus_sha256(pairs)
    version = existing_version(
        stores_dir, domain, corpus_hash, method, params, identity, signing_key
    )
    reused = version is not None
    if version is None:
        langs = (spec["source_lang"], spec["target_lang"])
        extra = None
        if spec["format"] == "fold":
            extra = {EDITS_THROUGH: spec["through"], "folded_from": spec["base"]}
        built = build_store(
            pairs,
            domain,
            method,
            stores_dir,
            params,
            langs,
            model=model if dense else None,
            signing_key=signing_key,
            extra=extra,
        )
        version = built.name
    return {"version": version, "pairs": len(pairs), "corpus_sha256": corpus_hash, "reused": reused}


def _remove_uploads(stores_dir: Path, spec: dict[str, Any]) -> None:
    for name in spec.get("files", []):
        if isinstance(name, str) and UPLOAD_NAME.fullmatch(name):
            (uploads_dir(stores_dir) / name).unlink(missing_ok=True)


def _safe(e: BaseException, stores_dir: Path) -> str:
    """The error for the job record: no server paths, uploads named as such."""
    msg = str(e) or type(e).__name__
    for root in {str(Path(stores_dir).resolve()), str(stores_dir)}:
        msg = msg.replace(root + os.sep, "").replace(root, "<stores>")
    return _UPLOAD_IN_TEXT.sub("uploaded corpus", msg)[:500]


async def _heartbeat(jobs: JobQueue, job_id: str) -> None:
    while True:
        await asyncio.sleep(HEARTBEAT_S)
        try:
            await jobs.update(job_id, message="indexing")
        except Exception as e:
            log.warning("job %s heartbeat failed: %s", job_id, e)


async def process_job(
    jobs: JobQueue,
    stores_dir: Path,
    job: Job,
    model: Path | None = None,
    signing_key: bytes | None = None,
) -> str:
    """Run one claimed job to `done` or `failed`; returns the final state."""
    if job.state == "done":  # delivered again after it finished: nothing to do
        return "done"
    await jobs.update(job.id, state="running", progress=0.05, message="reading corpus", error=None)
    beat = asyncio.create_task(_heartbeat(jobs, job.id))
    try:
        spec = check_spec(job.spec)
        pairs = await anyio.to_thread.run_sync(read_pairs, stores_dir, spec, signing_key)
        await jobs.update(job.id, progress=0.3, message=f"indexing {len(pairs)} pairs")
        result = await anyio.to_thread.run_sync(build, stores_dir, spec, pairs, model, signing_key)
    except (CorpusError, ArtifactError, JobSpecError, ValueError, OSError) as e:
        error = _safe(e, stores_dir)
    except Exception as e:
        log.exception("job %s crashed", job.id)
        error = f"internal error while building ({type(e).__name__})"
    else:
        error = None
    finally:
        beat.cancel()
    await anyio.to_thread.run_sync(_remove_uploads, stores_dir, job.spec)
    if error is not None:
        log.warning("job %s failed: %s", job.id, error)
        await jobs.update(job.id, state="failed", progress=1.0, message="failed", error=error)
        return "failed"
    built = "found existing" if result["reused"] else "built"
    message = f"{built} version {result['version']} ({result['pairs']} pairs)"
    await jobs.update(job.id, state="done", progress=1.0, message=message, result=result)
    log.info("job %s: %s", job.id, message)
    return "done"


async def run_worker(
    backends: Backends,
    stores_dir: Path,
    consumer: str,
    stop: asyncio.Event,
    block_ms: int = 1000,
    model: Path | None = None,
    signing_key: bytes | None = None,
) -> None:
    """Claim and run jobs until `stop` is set; a queue outage is waited out, not fatal.

    `model`: the bundle that dense-ngram jobs encode with (None: such jobs fail clearly).
    """
    log.info("worker %s consuming store jobs into %s", consumer, stores_dir)
    while not stop.is_set():
        try:
            job = await backends.jobs.claim(consumer, block_ms)
        except Exception as e:
            log.warning("job queue unavailable (%s); retrying", e)
            await _sleep_or_stop(stop, 1.0)
            continue
        if job is None:
            continue
        try:
            await process_job(backends.jobs, stores_dir, job, model, signing_key)
            await backends.jobs.ack(job.id)
        except Exception:  # e.g. the queue went away mid-job: it will be delivered again
            log.exception("job %s not recorded; it will be retried", job.id)
            await _sleep_or_stop(stop, 1.0)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def _main(settings: Settings) -> None:
    backends = await open_backends(settings)
    if backends.kind == "memory":
        await backends.close()
        raise SystemExit(
            "a separate worker needs RAGMT_REDIS_URL (shared job queue); without Redis the "
            "app builds stores in-process (RAGMT_RUN_WORKER=true)"
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    consumer = f"{socket.gethostname()}-{os.getpid()}"
    try:
        await run_worker(
            backends,
            settings.store_root,
            consumer,
            stop,
            model=settings.bundle_path,
            signing_key=settings.signing_key,
        )
    finally:
        await backends.close()


def main(settings: Settings | None = None) -> None:
    """`ragmt worker`: consume store-build jobs from Redis until SIGTERM or SIGINT."""
    asyncio.run(_main(settings if settings is not None else Settings()))
