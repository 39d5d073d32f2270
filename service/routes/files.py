"""File translation: upload a PO or XLIFF file, follow its job, download the filled file.

The job remembers who sent it (the key's identity, never the key): only that key, or the
admin key, reads its state and result, and only while the key still opens its domain;
anyone else is told there is no such file. No client string becomes a path: a job's files
are named by its random id, and the uploaded file's name only comes back in the download's
Content-Disposition.
"""

from __future__ import annotations

import asyncio
import re
import time
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath
from typing import Annotated
from urllib.parse import quote

import anyio.to_thread
from fastapi import APIRouter, File, Form, Path, Request, UploadFile
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict

from service.deps import (
    Client,
    Keyring,
    Principal,
    PrincipalDep,
    Service,
    ServiceDep,
    admitting,
    in_scope,
)
from service.documents import Document, DocumentError, LanguageMismatch, primary, read_document
from service.domains import GENERAL_DOMAIN
from service.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    Unauthorized,
    UnsupportedLanguage,
)
from service.file_jobs import FILES_DIR, JOB_ID, FileJob, FileJobs
from service.routes import CLIENT_ERRORS, CLIENT_KEYS, errors
from service.routes.bodies import JsonBodyRoute
from service.settings import DOMAIN_PATTERN

router = APIRouter(route_class=JsonBodyRoute, dependencies=[Client, *CLIENT_KEYS], tags=["files"])

UPLOAD_PATH = r"/v1/files"  # the middleware lets its bodies be as large as max_upload_bytes
FileId = Annotated[str, Path(pattern=JOB_ID.pattern)]
SUFFIX = {"po": ".po", "xliff-1.2": ".xlf", "xliff-2.0": ".xlf"}
MEDIA_TYPES = ("text/x-gettext-translation", "application/x-xliff+xml", "application/xliff+xml")


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


class FileTimings(_Schema):
    parse_s: float  # reading the upload into units
    queued_s: float | None  # accepted -> started (waiting for another file job)
    translate_s: float | None  # started -> result written
    lines_per_s: float | None  # distinct lines translated per second


class FileJobResponse(_Schema):
    """A file job's state: queued, running, done (result ready) or failed (`error`)."""

    id: str
    state: str
    name: str
    format: str  # po, xliff-1.2, xliff-2.0
    domain: str
    source_lang: str
    target_lang: str
    units: int  # translatable units in the file
    untranslated: int  # of them, the ones being filled
    texts: int  # distinct lines to translate for them
    done: int  # lines translated so far
    translated: int  # untranslated units filled so far
    progress: float  # done / texts
    error: str | None
    models: list[str]
    store_versions: list[str]
    created_at: float
    updated_at: float
    timings: FileTimings

    @classmethod
    def of(cls, job: FileJob) -> FileJobResponse:
        started = job.started_at
        spent = job.translate_s
        if spent is None and started is not None:  # so far
            spent = round((job.finished_at or time.time()) - started, 3)
        rate = round(job.done / spent, 2) if spent else None
        return cls(
            id=job.id,
            state=job.state,
            name=job.name,
            format=job.format,
            domain=job.domain,
            source_lang=job.source_lang,
            target_lang=job.target_lang,
            units=job.units,
            untranslated=job.untranslated,
            texts=job.texts,
            done=job.done,
            translated=job.translated,
            progress=round(job.done / job.texts, 4) if job.texts else float(job.state == "done"),
            error=job.error,
            models=list(job.models),
            store_versions=list(job.store_versions),
            created_at=job.created_at,
            updated_at=job.updated_at,
            timings=FileTimings(
                parse_s=job.parse_s,
                queued_s=round(started - job.created_at, 3) if started else None,
                translate_s=spent,
                lines_per_s=rate,
            ),
        )


def file_jobs(request: Request, service: ServiceDep) -> FileJobs:
    """This app's file jobs (made at the first use; their tasks end with the app)."""
    jobs = getattr(request.app.state, "file_jobs", None)
    if jobs is None:
        settings = service.settings

        def keep(task: asyncio.Task[None]) -> None:
            service.tasks.append(task)  # cancelled (the job marked failed) on shutdown
            task.add_done_callback(lambda t: t in service.tasks and service.tasks.remove(t))

        jobs = FileJobs(
            settings.store_root / FILES_DIR,
            service.engine,
            settings.file_jobs,
            settings.max_file_jobs,
            settings.file_ttl_s,
            on_task=keep,
            draining=lambda: service.draining,
        )
        request.app.state.file_jobs = jobs
    return jobs


def check_upload_key(keyring: Keyring) -> Callable[[Mapping[str, str]], None]:
    """The header check of a file upload, for the middleware: when keys are required, a
    known client key (401 without one, 403 unknown) before a byte of the body is read."""

    def check(headers: Mapping[str, str]) -> None:
        if not keyring.required:
            return
        auth = headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else ""
        given = given or headers.get("x-api-key", "")
        if not given:
            raise Unauthorized(
                "API key required (Authorization: Bearer or X-API-Key)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if keyring.find(given) is None:
            raise Forbidden("unknown API key")

    return check


def identity(principal: Principal) -> str:
    """Whom a job belongs to: the key's rate identity (a hash, or a key entry's name)."""
    return principal.budget or principal.name


def safe_name(name: str | None, fmt: str) -> str:
    """The uploaded file's base name without control characters (a download name only)."""
    base = PurePosixPath((name or "").replace("\\", "/")).name
    base = "".join(ch for ch in base if unicodedata.category(ch)[0] != "C" and ch not in '"')
    return base.strip()[:200] or f"translated{SUFFIX[fmt]}"


def _languages(
    doc: Document, service: Service, source: str | None, target: str | None
) -> tuple[str, str]:
    """The request's languages, else the file's (primary subtag), else the default model's;
    422 when the file declares others."""
    default_source, default_target = service.engine.default_languages()
    source = source or (primary(doc.source_lang) if doc.source_lang else default_source)
    target = target or (primary(doc.target_lang) if doc.target_lang else default_target)
    try:
        doc.check_languages(source, target)
    except LanguageMismatch as e:
        raise UnsupportedLanguage(str(e), field="file") from None
    return source, target


@router.post(
    "/v1/files",
    status_code=202,
    response_model=FileJobResponse,
    responses=errors(*CLIENT_ERRORS, 400, 404, 413, 422, 503),
)
async def upload_file(
    request: Request,
    service: ServiceDep,
    principal: PrincipalDep,
    file: Annotated[UploadFile, File(description="A gettext PO or an XLIFF 1.2 / 2.0 file")],
    source_lang: Annotated[str | None, Form(max_length=35)] = None,
    target_lang: Annotated[str | None, Form(max_length=35)] = None,
    domain: Annotated[str | None, Form(pattern=DOMAIN_PATTERN)] = None,
    model: Annotated[str | None, Form(max_length=200)] = None,
    fuzzy: Annotated[bool, Form()] = False,
    needs_review: Annotated[bool, Form()] = False,
) -> FileJobResponse:
    """Translate every untranslated unit of the file with the domain's memory (and fuzzy
    ones with `fuzzy`); the rest of the file stays byte for byte. Languages default to the
    file's, then the default model's. `needs_review` marks filled units (PO: fuzzy; XLIFF
    1.2: needs-review-translation; XLIFF 2.0: state left as it was). Answers 202 with the
    job; follow it at /v1/files/{id}, download /v1/files/{id}/result once done."""
    admitting(service)
    domain = domain if domain is not None else GENERAL_DOMAIN
    in_scope(service, principal, domain, False)
    jobs = file_jobs(request, service)
    data = await file.read()
    start = time.perf_counter()
    try:
        doc = await anyio.to_thread.run_sync(read_document, data, fuzzy)
    except DocumentError as e:
        raise InvalidInput(f"file: {e}", code="invalid_file", field="file") from None
    parse_s = round(time.perf_counter() - start, 3)
    source, target = _languages(doc, service, source_lang, target_lang)
    service.engine.registry.route(source, target, model)  # 422 naming the served pairs
    job = FileJob(
        id=FileJobs.new_id(),
        owner=identity(principal),
        name=safe_name(file.filename, doc.kind),
        format=doc.kind,
        media_type=doc.media_type,
        domain=domain,
        source_lang=source,
        target_lang=target,
        model=model,
        fuzzy=fuzzy,
        needs_review=needs_review,
        units=sum(1 for u in doc.units if u.state != "not-translatable"),
        untranslated=len(doc.todo),
        texts=len(doc.texts()),
        parse_s=parse_s,
    )
    return FileJobResponse.of(await jobs.submit(doc, job))


async def _readable(
    request: Request, service: Service, principal: Principal, file_id: str
) -> FileJob:
    """The job, for its owner (or the admin) while the key opens its domain; else 404."""
    job = await file_jobs(request, service).get(file_id)
    if job is None or not (principal.admin or job.owner == identity(principal)):
        raise NotFound("no such file job", code="unknown_file")
    in_scope(service, principal, job.domain, False)
    return job


@router.get(
    "/v1/files/{file_id}",
    response_model=FileJobResponse,
    responses=errors(*CLIENT_ERRORS, 404, 422, 503),
)
async def get_file(
    file_id: FileId, request: Request, service: ServiceDep, principal: PrincipalDep
) -> FileJobResponse:
    """A file job's state and progress (lines and units translated so far) and timings."""
    return FileJobResponse.of(await _readable(request, service, principal, file_id))


@router.get(
    "/v1/files/{file_id}/result",
    response_class=Response,
    responses={
        200: {
            "description": "The translated file, named as uploaded (Content-Disposition)",
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}} for media in MEDIA_TYPES
            },
        },
        **errors(*CLIENT_ERRORS, 404, 409, 422, 503),
    },
)
async def get_file_result(
    file_id: FileId, request: Request, service: ServiceDep, principal: PrincipalDep
) -> Response:
    """The translated file (409 until the job is done, or when it failed)."""
    job = await _readable(request, service, principal, file_id)
    if job.state != "done":
        why = f": {job.error}" if job.error else ""
        raise Conflict(f"the file job is {job.state}{why}", code=f"file_{job.state}")
    path = file_jobs(request, service).result_path(job.id)
    try:
        data = await anyio.to_thread.run_sync(path.read_bytes)
    except OSError:
        raise NotFound("the translated file has been removed", code="unknown_file") from None
    return Response(data, media_type=job.media_type, headers=_disposition(job.name))


def _disposition(name: str) -> dict[str, str]:
    ascii_name = re.sub(r"[^A-Za-z0-9._ -]", "_", name)
    return {
        "Content-Disposition": f'attachment; filename="{ascii_name}"; '
        f"filename*=UTF-8''{quote(name, safe='')}"
    }
