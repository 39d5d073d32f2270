"""A domain's glossary: read it with a client key that opens the domain; change it (one term,
an uploaded CSV, TSV or TBX file merged or replacing, or all cleared) with the admin key.

Every replica translates with the change within half a second (`service.glossaries`); the
results of /v1/translate name the glossary version they were made with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

import anyio.to_thread
from fastapi import APIRouter, Body, File, Form, Query, UploadFile
from pydantic import BaseModel, ConfigDict, Field

from index_builder.glossary_files import format_of, read_glossary
from models.glossary import (
    MAX_NOTE_CHARS,
    MAX_TERM_CHARS,
    Glossary,
    GlossaryError,
    Term,
    term_key,
)
from service.deps import Admin, Client, PrincipalDep, Service, ServiceDep, in_scope
from service.errors import InvalidInput, NotReady
from service.glossaries import GlossaryStore
from service.routes import ADMIN_ERRORS, ADMIN_KEYS, CLIENT_ERRORS, CLIENT_KEYS, errors
from service.routes.bodies import JsonBodyRoute
from service.routes.domains import DomainName

reads = APIRouter(dependencies=[Client, *CLIENT_KEYS], tags=["glossary"])
writes = APIRouter(route_class=JsonBodyRoute, dependencies=[Admin, *ADMIN_KEYS], tags=["glossary"])
router = APIRouter()  # both: app.py includes one router per module

WRITE_ERRORS = errors(*ADMIN_ERRORS, 400, 409, 413, 422, 503)


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TermBody(_Schema):
    """A term to add, or to put in place of the term of the same source (any case)."""

    source: str = Field(min_length=1, max_length=MAX_TERM_CHARS)
    target: str = Field(min_length=1, max_length=MAX_TERM_CHARS)
    note: str = Field("", max_length=MAX_NOTE_CHARS)


class TermRef(_Schema):
    source: str = Field(min_length=1, max_length=MAX_TERM_CHARS)


class TermOut(_Schema):
    source: str
    target: str
    note: str


class GlossaryOut(_Schema):
    domain: str
    version: str | None  # null: the domain has no glossary
    source_lang: str | None
    target_lang: str | None
    terms: list[TermOut]


class GlossaryChange(_Schema):
    """The glossary after a change: its version (null: now empty) and size, and how many
    terms the change added, replaced or removed (`skipped`: TBX entries without both
    languages)."""

    domain: str
    version: str | None
    count: int
    changed: int
    skipped: int = 0


def _store(service: Service) -> GlossaryStore:
    store = service.engine.glossaries
    if store is None:
        raise NotReady("stores not loaded yet")
    return store


def _writable(service: Service, domain: str) -> GlossaryStore:
    """The store, once `domain` is known (404 naming the known ones)."""
    store = _store(service)
    service.manager().state(domain)
    return store


def _empty(service: Service) -> Glossary:
    """A new glossary, in the first served model's language pair."""
    return Glossary((), *service.engine.default_languages())


def _changed(old: Glossary | None, new: Glossary | None) -> int:
    """How many terms differ between two glossaries (added, replaced or removed)."""
    before = {term_key(t.source): t for t in old.terms} if old is not None else {}
    after = {term_key(t.source): t for t in new.terms} if new is not None else {}
    return sum(before.get(k) != after.get(k) for k in before.keys() | after.keys())


Change = Callable[[Glossary | None], Glossary | None]


async def _apply(
    store: GlossaryStore, domain: str, change: Change, fresh: bool = False, skipped: int = 0
) -> GlossaryChange:
    """`change` applied under the store's lock, and what it did."""
    old: list[Glossary | None] = []

    def run(current: Glossary | None) -> Glossary | None:
        old.append(current)
        return change(current)

    try:
        new = await anyio.to_thread.run_sync(store.update, domain, run, fresh)
    except GlossaryError as e:
        raise InvalidInput(f"glossary: {e}", field="file") from None
    return GlossaryChange(
        domain=domain,
        version=new.version if new is not None else None,
        count=len(new) if new is not None else 0,
        changed=_changed(old[-1] if old else None, new),
        skipped=skipped,
    )


@reads.get(
    "/v1/domains/{domain}/glossary",
    response_model=GlossaryOut,
    responses=errors(*CLIENT_ERRORS, 404, 422, 503),
)
async def get_glossary(
    domain: DomainName, service: ServiceDep, principal: PrincipalDep
) -> GlossaryOut:
    """The terms /v1/translate enforces for `domain`, and their version; 403 for a domain the
    key does not open, whether it exists or not."""
    in_scope(service, principal, domain, neighbours=False)
    glossary = await _store(service).current(domain)
    if glossary is None:
        return GlossaryOut(
            domain=domain, version=None, source_lang=None, target_lang=None, terms=[]
        )
    return GlossaryOut(
        domain=domain,
        version=glossary.version,
        source_lang=glossary.source_lang,
        target_lang=glossary.target_lang,
        terms=[TermOut(source=t.source, target=t.target, note=t.note) for t in glossary.terms],
    )


@writes.put(
    "/v1/domains/{domain}/glossary/terms", response_model=GlossaryChange, responses=WRITE_ERRORS
)
async def put_term(domain: DomainName, body: TermBody, service: ServiceDep) -> GlossaryChange:
    """Add a term, or replace the target and note of the term of the same source."""
    store = _writable(service, domain)
    term = Term(body.source, body.target, body.note)
    try:
        term.check()
    except GlossaryError as e:
        raise InvalidInput(f"body: {e}", field="body") from None
    empty = _empty(service)
    return await _apply(store, domain, lambda g: (g or empty).merged([term]))


@writes.delete(
    "/v1/domains/{domain}/glossary/terms", response_model=GlossaryChange, responses=WRITE_ERRORS
)
async def delete_term(
    domain: DomainName,
    service: ServiceDep,
    source: Annotated[str | None, Query(min_length=1, max_length=MAX_TERM_CHARS)] = None,
    body: Annotated[TermRef | None, Body()] = None,
) -> GlossaryChange:
    """Remove the term of `source` (any case), named in the query or the body; a source the
    glossary lacks changes nothing (`changed` 0)."""
    given = {x for x in (source, body.source if body is not None else None) if x is not None}
    if len(given) != 1:
        raise InvalidInput("source: name one term, in the query or the body", field="source")
    store = _writable(service, domain)
    gone = given.pop()
    return await _apply(store, domain, lambda g: g.without(gone) if g is not None else None)


@writes.post("/v1/domains/{domain}/glossary", response_model=GlossaryChange, responses=WRITE_ERRORS)
async def upload_glossary(
    domain: DomainName,
    service: ServiceDep,
    file: Annotated[UploadFile, File(description="CSV, TSV or TBX")],
    format: Annotated[Literal["csv", "tsv", "tbx"] | None, Form()] = None,
    replace: Annotated[bool, Form()] = False,
) -> GlossaryChange:
    """Import a glossary file: merged into the glossary (a term of the same source replaced),
    or replacing it whole with `replace`. A file with any bad row or entry changes nothing."""
    store = _writable(service, domain)
    try:
        fmt = format_of(format, file.filename)
    except GlossaryError as e:
        raise InvalidInput(str(e), field="format") from None
    data = await file.read()
    if not data:
        raise InvalidInput("file: the uploaded glossary is empty", field="file")
    current = (await store.current(domain)) or _empty(service)
    langs = (current.source_lang, current.target_lang)
    try:
        imported = await anyio.to_thread.run_sync(read_glossary, data, fmt, *langs)
    except GlossaryError as e:
        raise InvalidInput(f"file: {e}", field="file") from None

    def change(g: Glossary | None) -> Glossary:
        if replace or g is None:
            return Glossary(imported.terms, *langs)
        return g.merged(imported.terms)

    return await _apply(store, domain, change, fresh=replace, skipped=imported.skipped)


@writes.delete(
    "/v1/domains/{domain}/glossary",
    response_model=GlossaryChange,
    responses=errors(*ADMIN_ERRORS, 422, 503),
)
async def clear_glossary(domain: DomainName, service: ServiceDep) -> GlossaryChange:
    """Remove every term: the domain is translated without a glossary."""
    store = _writable(service, domain)
    return await _apply(store, domain, lambda g: None, fresh=True)


router.include_router(reads)
router.include_router(writes)
