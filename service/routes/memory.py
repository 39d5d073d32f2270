"""A domain's memory edited live: add, correct and delete single pairs, search it, and fold
the edits into a new store version (`service.memory_edits`).

Writes take the admin key or an API key whose `edit` scope opens the domain; searching takes a
key that may read the domain's neighbours. An edit is served by this replica when the answer
comes, and by every other replica as soon as it has read the shared signal.
"""

from __future__ import annotations

import logging
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import Field

from index_builder.edits import pair_key
from service.deps import (
    Admin,
    Client,
    Principal,
    PrincipalDep,
    ServiceDep,
    admitting,
    in_scope,
    require_editor,
)
from service.domains import Lease
from service.errors import Conflict, NotFound
from service.memory_edits import activate_when_built, fold_spec, through_of
from service.routes import ADMIN_ERRORS, ADMIN_KEYS, CLIENT_ERRORS, CLIENT_KEYS, errors
from service.routes.bodies import JsonBodyRoute
from service.routes.domains import DomainName
from service.schemas import EditOut, JobResponse, _Schema

# Writes check their keys themselves (`require_editor`: the admin key or an edit scope).
log = logging.getLogger("ragmt.service")
router = APIRouter(route_class=JsonBodyRoute, tags=["memory"])


async def memory_editor(domain: DomainName, request: Request, service: ServiceDep) -> Principal:
    """The admin key, or a key whose `edit` scope opens `domain` (`require_editor`)."""
    service.manager().state(domain)  # 404 for an unknown domain before the key says more
    return await require_editor(service, request, domain)


Editor = Annotated[Principal, Depends(memory_editor)]
EDITOR_KEYS = [*ADMIN_KEYS, *CLIENT_KEYS]

PairKey = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="a pair's key")]
EDITOR_ERRORS = (401, 403, 404, 409, 422, 429, 503)


class PairIn(_Schema):
    source: str = Field(max_length=4000)
    target: str = Field(max_length=4000)


class EditResponse(_Schema):
    domain: str
    store_version: str  # the version the edit applies over
    edit: EditOut


class MemoryPair(_Schema):
    key: str
    source: str
    target: str
    score: float
    origin: str  # "store" (a row of the version) or "edit"
    edit: EditOut | None = None


class MemorySearch(_Schema):
    domain: str
    store_version: str | None
    edit_seq: int  # the last edit of the log the search saw
    pairs: list[MemoryPair]  # q given: the best matches; else the newest pairs edits added
    edits: list[EditOut]  # the newest edits, newest first (q absent)


async def _edit(
    who: Principal,
    service: ServiceDep,
    domain: str,
    op: str,
    source: str,
    target: str,
    old: tuple[str, str] | None = None,
) -> EditResponse:
    admitting(service)
    manager = service.manager()
    edit, version = await manager.edit(domain, op, source, target, old, by=who.name)
    await _fold_if_due(service, domain)
    return EditResponse(domain=domain, store_version=version, edit=EditOut.of(edit))


async def _fold_if_due(service: ServiceDep, domain: str) -> None:
    """Queue a fold (activated once built) when the active version carries
    `fold_edits_at` edits or more; a replica that cannot build (no worker) leaves it."""
    at = service.settings.fold_edits_at
    manager = service.manager()
    active = manager.state(domain).active
    backends = service.backends
    if not at or active is None or backends is None:
        return
    through = manager.edits.log(domain).seq
    if through - through_of(active.manifest) < at or through % at:
        return  # once per `at` edits, on the edit that reaches the mark
    if not service.settings.run_worker and backends.kind == "memory":
        return
    try:
        job = await backends.jobs.submit(*fold_spec(active, through))
    except Exception as e:  # the edit is made; the fold waits for the next mark or a request
        log.warning("fold of %s not queued: %s", domain, e)
        return
    manager._spawn(activate_when_built(manager, backends.jobs, job.id, domain, active.version))


async def _texts(service: ServiceDep, domain: str, key: str) -> tuple[str, str]:
    manager = service.manager()
    active = manager.state(domain).active
    if active is None:
        raise Conflict(f"domain {domain} has no active store version")
    lease = Lease(manager, active)
    try:
        texts = await anyio.to_thread.run_sync(manager.edits.texts_of, active, key)
    finally:
        lease.release()
    if texts is None:
        raise NotFound(f"domain {domain}'s memory holds no pair {key}", code="unknown_pair")
    return texts


@router.post(
    "/v1/domains/{domain}/memory",
    status_code=201,
    response_model=EditResponse,
    responses=errors(*EDITOR_ERRORS, 400, 413),
    dependencies=EDITOR_KEYS,
)
async def add_pair(
    domain: DomainName, body: PairIn, who: Editor, service: ServiceDep
) -> EditResponse:
    """Add one pair to the domain's memory: retrieved from the next translation on."""
    return await _edit(who, service, domain, "add", body.source, body.target)


@router.put(
    "/v1/domains/{domain}/memory/{key}",
    response_model=EditResponse,
    responses=errors(*EDITOR_ERRORS, 400, 413),
    dependencies=EDITOR_KEYS,
)
async def correct_pair(
    domain: DomainName, key: PairKey, body: PairIn, who: Editor, service: ServiceDep
) -> EditResponse:
    """Replace the pair named `key` (from a neighbour or a search) by the corrected one."""
    old = await _texts(service, domain, key)
    return await _edit(who, service, domain, "correct", body.source, body.target, old)


@router.delete(
    "/v1/domains/{domain}/memory/{key}",
    response_model=EditResponse,
    responses=errors(*EDITOR_ERRORS),
    dependencies=EDITOR_KEYS,
)
async def delete_pair(
    domain: DomainName, key: PairKey, who: Editor, service: ServiceDep
) -> EditResponse:
    """Take the pair named `key` out of the domain's memory (every version it serves)."""
    source, target = await _texts(service, domain, key)
    return await _edit(who, service, domain, "delete", source, target)


@router.get(
    "/v1/domains/{domain}/memory",
    response_model=MemorySearch,
    responses=errors(*CLIENT_ERRORS, 404, 422, 503),
    dependencies=[Client, *CLIENT_KEYS],
)
async def search_memory(
    domain: DomainName,
    service: ServiceDep,
    principal: PrincipalDep,
    q: Annotated[str | None, Query(max_length=4000)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> MemorySearch:
    """The pairs of the memory that best match `q` as retrieval ranks them, or, without `q`,
    the newest edits. Needs a key that may read the domain's neighbours."""
    in_scope(service, principal, domain, neighbours=True)
    manager = service.manager()
    edits = manager.edits
    log_ = edits.log(domain)
    lease = manager.lease(domain)  # None: no version, and only the edits to show
    pairs: list[MemoryPair] = []
    recent: list[EditOut] = []
    try:
        if lease is not None and q is not None and q.strip():
            (found,) = await anyio.to_thread.run_sync(lease.retriever.search, [q], limit)
            for n in found:
                e = edits.edit_of(domain, n.edit) if n.edit is not None else None
                pairs.append(
                    MemoryPair(
                        key=pair_key(n.source, n.target),
                        source=n.source,
                        target=n.target,
                        score=float(n.score),
                        origin="edit" if n.edit is not None else "store",
                        edit=EditOut.of(e) if e is not None else None,
                    )
                )
        else:
            recent = [EditOut.of(e) for e in reversed(log_.edits[-limit:])]
        return MemorySearch(
            domain=domain,
            store_version=lease.version if lease is not None else None,
            edit_seq=lease.edits if lease is not None else log_.seq,
            pairs=pairs,
            edits=recent,
        )
    finally:
        if lease is not None:
            lease.release()


@router.post(
    "/v1/domains/{domain}/memory/fold",
    status_code=202,
    response_model=JobResponse,
    responses=errors(*ADMIN_ERRORS, 409, 422, 503),
    dependencies=[Admin, *ADMIN_KEYS],
)
async def fold(
    domain: DomainName,
    service: ServiceDep,
    activate: Annotated[bool, Query()] = False,
) -> JobResponse:
    """Build a new store version of the active one with the edits folded in (a background
    job, like a corpus upload). `activate`: activate it once built, if the domain still
    serves the version it was folded from (else activate its `result.version`). Admin key."""
    manager = service.manager()
    active = manager.state(domain).active
    if active is None:
        raise Conflict(f"domain {domain} has no active store version to fold edits into")
    log_ = manager.edits.log(domain)
    await anyio.to_thread.run_sync(log_.refresh)
    if log_.seq <= through_of(active.manifest):
        raise Conflict(f"domain {domain}'s active version holds every edit already")
    jobs = service.require_backends().jobs
    job = await jobs.submit(*fold_spec(active, log_.seq))
    if activate:
        manager._spawn(activate_when_built(manager, jobs, job.id, domain, active.version))
    return JobResponse.of(job)
