"""Management routes (admin key): corpus upload -> build job, activate, roll back, delete.

An upload is saved under a name made of its sha256 in ``<stores_dir>/.uploads/``; no client
string (file name, domain beyond the strict pattern) ever becomes a path. Jobs are idempotent
on (domain, corpus hash, method, parameters): uploading the same corpus again returns the
same job.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path as FsPath
from typing import IO, Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter, File, Form, Path, UploadFile

from service.deps import Admin, ServiceDep
from service.errors import InvalidInput, NotFound, NotReady
from service.routes import ADMIN_ERRORS, ADMIN_KEYS, errors
from service.routes.bodies import JsonBodyRoute
from service.routes.domains import DomainName
from service.schemas import ActivateRequest, Deleted, DomainInfo, JobResponse
from service.settings import VERSION_PATTERN, VERSION_RE
from service.worker import uploads_dir

router = APIRouter(
    route_class=JsonBodyRoute, dependencies=[Admin, *ADMIN_KEYS], tags=["management"]
)

VersionId = Annotated[str, Path(pattern=VERSION_PATTERN)]
JobId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,100}$")]
WIDTHS = r"^[1-9][0-9]?(,[1-9][0-9]?){0,7}$"
SUFFIXES = {"tsv": ["tsv"], "tmx": ["tmx"], "moses": ["src", "tgt"]}
CHUNK = 1 << 20


def _save(directory: FsPath, files: list[IO[bytes]], suffixes: list[str]) -> tuple[str, list[str]]:
    """Hash and store the uploaded parts as ``<sha256>.<suffix>``; blocking (a thread)."""
    directory.mkdir(parents=True, exist_ok=True)
    part_hashes, temps = [], []
    try:
        for f in files:
            h = hashlib.sha256()
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".part-")
            temps.append(tmp)
            with os.fdopen(fd, "wb") as out:
                f.seek(0)
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                if out.tell() == 0:
                    raise InvalidInput("file: the uploaded corpus is empty", field="file")
                out.flush()
                os.fsync(out.fileno())
            part_hashes.append(h.hexdigest())
        digest = hashlib.sha256("".join(part_hashes).encode()).hexdigest()
        names = [f"{digest}.{suffix}" for suffix in suffixes]
        for tmp, name in zip(temps, names, strict=True):
            os.replace(tmp, directory / name)
        return digest, names
    finally:
        for tmp in temps:
            FsPath(tmp).unlink(missing_ok=True)


def _format(given: str | None, name: str | None, moses_pair: bool) -> str:
    """The corpus format: given, implied by a second file, or from the file's extension."""
    if moses_pair:
        if given not in (None, "moses"):
            raise InvalidInput("format: two files are a Moses pair", field="format")
        return "moses"
    if given == "moses":
        raise InvalidInput("target_file: a Moses corpus needs both sides", field="target_file")
    if given is not None:
        return given
    suffix = (name or "").rsplit(".", 1)[-1].lower()
    if suffix in ("tsv", "txt"):
        return "tsv"
    if suffix == "tmx":
        return "tmx"
    raise InvalidInput("format: cannot tell the corpus format; send format", field="format")


def _built(store_root: FsPath, domain: str, result: dict[str, object]) -> bool:
    """Whether a done job's version is still on disk (a deleted one cannot be activated)."""
    version = result.get("version")
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        return False
    return (store_root / domain / version).is_dir()


@router.post(
    "/v1/domains/{domain}/corpora",
    status_code=202,
    response_model=JobResponse,
    responses=errors(*ADMIN_ERRORS, 400, 413, 422, 503),
)
async def upload_corpus(
    domain: DomainName,
    service: ServiceDep,
    file: Annotated[UploadFile, File(description="TSV, TMX, or a Moses pair's source side")],
    target_file: Annotated[UploadFile | None, File(description="Moses: target side")] = None,
    format: Annotated[Literal["tsv", "tmx", "moses"] | None, Form()] = None,
    method: Annotated[Literal["idf-sentence", "idf-ngram", "dense-ngram"], Form()] = "idf-ngram",
    widths: Annotated[str | None, Form(pattern=WIDTHS)] = None,
    source_lang: Annotated[str | None, Form()] = None,
    target_lang: Annotated[str | None, Form()] = None,
) -> JobResponse:
    """Queue a build of a new store version of `domain` from the uploaded corpus; its
    languages default to the first served model's pair and must be a served pair."""
    settings, manager = service.settings, service.manager()
    backends = service.require_backends()
    if manager.configured and domain not in manager.configured:
        raise NotFound(
            f"unknown domain; available: {', '.join(manager.known_domains())}",
            code="unknown_domain",
        )
    if not settings.run_worker and backends.kind == "memory":
        raise NotReady("no store-build worker: set RAGMT_RUN_WORKER or a shared RAGMT_REDIS_URL")
    if widths is not None and method == "idf-sentence":
        raise InvalidInput("widths: the idf-sentence method takes no widths", field="widths")
    fmt = _format(format, file.filename, target_file is not None)
    default_source, default_target = service.engine.default_languages()
    source_lang, target_lang = source_lang or default_source, target_lang or default_target
    service.engine.registry.route(source_lang, target_lang)  # 422 naming the served pairs
    parts = [file.file] + ([target_file.file] if target_file is not None else [])
    updir = uploads_dir(settings.store_root)
    digest, names = await anyio.to_thread.run_sync(_save, updir, parts, SUFFIXES[fmt])
    params = {"widths": [int(w) for w in widths.split(",")]} if widths else {}
    spec = {
        "domain": domain,
        "method": method,
        "params": params,
        "format": fmt,
        "files": names,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "upload_sha256": digest,
    }
    dedup = f"{domain}:{digest}:{method}:{json.dumps(params, sort_keys=True)}"
    job = await backends.jobs.submit(spec, dedup)
    if job.state == "done" and not _built(settings.store_root, domain, job.result):
        # Its version has been deleted since: build the corpus again (the job queue replaces
        # a failed job under the same key, in-process and in Redis alike).
        await backends.jobs.update(
            job.id, state="failed", error="its store version was deleted; uploaded again"
        )
        job = await backends.jobs.submit(spec, dedup)
    if job.state in ("done", "failed"):  # the same corpus was built before: files not needed
        for name in names:
            (updir / name).unlink(missing_ok=True)
    return JobResponse.of(job)


@router.get(
    "/v1/jobs/{job_id}", response_model=JobResponse, responses=errors(*ADMIN_ERRORS, 422, 503)
)
async def get_job(job_id: JobId, service: ServiceDep) -> JobResponse:
    """A store-build job's state (queued, running, done, failed), progress and result."""
    job = await service.require_backends().jobs.get(job_id)
    if job is None:
        raise NotFound("no such job", code="unknown_job")
    return JobResponse.of(job)


@router.post(
    "/v1/domains/{domain}/activate",
    response_model=DomainInfo,
    responses=errors(*ADMIN_ERRORS, 400, 413, 422, 503),
)
async def activate(domain: DomainName, body: ActivateRequest, service: ServiceDep) -> DomainInfo:
    """Load, validate, then switch the domain to `version` on every replica; idempotent."""
    manager = service.manager()
    await manager.activate(domain, body.version)
    return DomainInfo(**manager.describe(domain))


@router.post(
    "/v1/domains/{domain}/rollback",
    response_model=DomainInfo,
    responses=errors(*ADMIN_ERRORS, 409, 422, 503),
)
async def rollback(domain: DomainName, service: ServiceDep) -> DomainInfo:
    """Switch back to the version that was active before the current one."""
    manager = service.manager()
    await manager.rollback(domain)
    return DomainInfo(**manager.describe(domain))


@router.delete(
    "/v1/domains/{domain}/versions/{version}",
    response_model=Deleted,
    responses=errors(*ADMIN_ERRORS, 409, 422, 503),
)
async def delete_version(domain: DomainName, version: VersionId, service: ServiceDep) -> Deleted:
    """Delete an inactive version; the active one is refused (409)."""
    await service.manager().delete(domain, version)
    return Deleted(domain=domain, deleted=version)
