"""Request and response bodies of the HTTP API (pydantic v2); unknown fields are refused."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from index_builder.edits import pair_key
from service.engine import BatchResult, LoadedModel, TextResult, TranslationRequest
from service.settings import VERSION_PATTERN
from service.shared import Job


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


class TranslateRequest(_Schema):
    texts: list[str]
    source_lang: str = "en"
    target_lang: str = "de"
    domain: str | None = None  # null: "general"; otherwise a domain of GET /v1/domains
    model: str | None = None  # null or "default": the default model
    beam_size: int | None = None  # null: the configured default
    return_neighbours: bool = False
    # "html": each text is HTML; the text of each block is translated, every tag kept
    format: Literal["text", "html"] = "text"
    glossary: bool = True  # enforce the domain's glossary (GET /v1/domains/{domain}/glossary)

    def to_engine(self) -> TranslationRequest:
        return TranslationRequest(**self.model_dump())


class EditOut(_Schema):
    """A live edit of a domain's memory (POST /v1/domains/{domain}/memory and its kin)."""

    seq: int  # its number in the domain's edit log
    op: Literal["add", "correct", "delete"]
    key: str  # the pair's name: 16 hex digits of sha256 of its texts, the same in every version
    source: str
    target: str
    at: str  # ISO 8601, UTC
    by: str | None = None  # who made it (the API key's name, or "admin")
    old_key: str | None = None  # correct: the pair it replaced

    @classmethod
    def of(cls, e: Any) -> EditOut:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.at))
        return cls(
            seq=e.seq, op=e.op, key=e.key, source=e.source, target=e.target, at=at, by=e.by,
            old_key=e.old_key,
        )  # fmt: skip


class NeighbourOut(_Schema):
    """A retrieved pair; `span` is the matched [start, end) token range of the query (words,
    lower-cased, as the store tokenises), `matched` the neighbour's side of the match."""

    source: str
    target: str
    score: float
    pair_id: int  # its row in the store version; -1: a live edit added it (see `edit`)
    span: list[int] | None
    matched: str = ""
    key: str = ""  # the pair's name, to correct or delete it (PUT/DELETE .../memory/{key})
    origin: Literal["store", "edit"] = "store"
    edit: EditOut | None = None  # origin "edit": the edit that added it


class TranslationResult(_Schema):
    translation: str
    domain: str
    store_version: str | None  # null: served without a retrieval store
    model: str
    neighbours: list[NeighbourOut] | None = None  # present when return_neighbours
    gate: float | None = None  # present for models that report their memory gate
    glossary_version: str | None = None  # present when a glossary was enforced: its version
    edit_seq: int | None = None  # the last live edit of the domain's memory it saw; null: none

    @classmethod
    def of(cls, r: TextResult) -> TranslationResult:
        fields: dict[str, Any] = {}
        if r.neighbours is not None:
            fields["neighbours"] = [
                NeighbourOut(
                    source=n.source,
                    target=n.target,
                    score=float(n.score),
                    pair_id=int(n.pair_id),
                    span=list(n.span) if n.span is not None else None,
                    matched=n.matched,
                    key=pair_key(n.source, n.target),
                    origin="edit" if n.edit is not None else "store",
                    edit=EditOut.of(r.edits[n.edit])
                    if n.edit is not None and r.edits and n.edit in r.edits
                    else None,
                )
                for n in r.neighbours
            ]
        if r.gate is not None:
            fields["gate"] = r.gate
        if r.glossary_version is not None:
            fields["glossary_version"] = r.glossary_version
        if r.edit_seq is not None:
            fields["edit_seq"] = r.edit_seq
        return cls(
            translation=r.translation,
            domain=r.domain,
            store_version=r.store_version,
            model=r.model,
            **fields,
        )


class Timings(_Schema):
    total_ms: float
    retrieval_ms: float
    decode_ms: float
    cache_hits: int


class TranslateResponse(_Schema):
    results: list[TranslationResult]
    timings: Timings

    @classmethod
    def from_result(cls, r: BatchResult) -> TranslateResponse:
        timings = Timings(
            total_ms=r.total_ms,
            retrieval_ms=r.retrieval_ms,
            decode_ms=r.decode_ms,
            cache_hits=r.cache_hits,
        )
        return cls(results=[TranslationResult.of(x) for x in r.results], timings=timings)


class StatusResponse(_Schema):
    status: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # details such as field, limit, max
    code: str
    message: str


class ErrorResponse(_Schema):
    """Every error of the native routes (service/errors.py)."""

    error: ErrorDetail


class LibreError(BaseModel):
    """Every error of LibreTranslate's routes: the message where its clients read it, and
    beside it the code and details the native routes nest under `error`."""

    model_config = ConfigDict(extra="allow")
    error: str
    code: str


class ModelInfo(_Schema):
    """A served model as its bundle declares it, and the pairs it is the default for."""

    name: str
    default: bool  # the default model of at least one pair
    default_for: list[list[str]]  # [source, target] pairs routed to it without a model name
    architecture: str
    languages: dict[str, str]  # its first pair
    pairs: list[list[str]]
    tokenizer: str  # sentencepiece or bytes
    decoding: str  # autoregressive or ctc
    reads: list[str]  # store kinds it reads; [] none
    trained_on: dict[str, Any]
    parameters: int | None
    weights_sha256: str
    quantize: str  # none (PyTorch float), int8, int8-rows, ort, ort-int8 or native-int8
    int8_weights: str | None  # with ort-int8: s8, s7 or u8, as suits this CPU (RAGMT_INT8_WEIGHTS)
    native_isa: str | None  # with native-int8: the step's int8 kernels (avx512-vnni, avx2, ...)
    uses_memory: bool

    @classmethod
    def of(cls, m: LoadedModel, default_for: list[tuple[str, str]]) -> ModelInfo:
        card = m.card
        source, target = card.pairs[0]
        return cls(
            name=m.name,
            default=bool(default_for),
            default_for=[list(p) for p in default_for],
            architecture=card.architecture,
            languages={"source": source, "target": target},
            pairs=[list(p) for p in card.pairs],
            tokenizer=card.tokenizer,
            decoding=card.decoding,
            reads=list(card.reads),
            trained_on=card.trained_on,
            parameters=card.parameters or None,
            weights_sha256=m.weights_sha256,
            quantize=m.quantize,
            int8_weights=m.int8_weights,
            native_isa=m.native_isa,
            uses_memory=m.uses_memory,
        )


class LimitsInfo(_Schema):
    max_texts: int
    max_chars: int
    max_body_bytes: int
    beam_size: int
    max_beam_size: int
    queue_size: int
    rate_limit: int  # per rate_window_s and key or client; 0: none
    rate_window_s: float


class InfoResponse(_Schema):
    ready: bool
    reason: str | None
    device: str  # where the models decode: "cpu", "cuda", "cuda:1"
    models: list[ModelInfo]
    domains: list[str]
    limits: LimitsInfo


# --- LibreTranslate -------------------------------------------------------------------------


class LibreTranslateRequest(BaseModel):
    """LibreTranslate's /translate body (JSON or form); unknown fields are ignored as there."""

    model_config = ConfigDict(extra="ignore")
    q: str | list[str]
    source: str
    target: str
    format: str = "text"
    api_key: str | None = None


class LibreDetectRequest(BaseModel):
    """LibreTranslate's /detect body (JSON or form)."""

    model_config = ConfigDict(extra="ignore")
    q: str | list[str]
    api_key: str | None = None


class LibreDetection(BaseModel):
    language: str
    confidence: float  # percent, as LibreTranslate answers


class LibreTranslateResponse(BaseModel):
    translatedText: str | list[str]  # noqa: N815 (LibreTranslate's field name)
    detectedLanguage: dict[str, Any] | list[dict[str, Any]] | None = None  # noqa: N815


class LibreLanguage(_Schema):
    code: str
    name: str
    targets: list[str]


# --- domains and jobs -----------------------------------------------------------------------


class LoadedVersion(_Schema):
    version: str
    leases: int
    active: bool


class VersionInfo(_Schema):
    """A store version on disk, as its manifest describes it (unreadable: nulls)."""

    version: str
    method: str | None
    pairs: int | None
    built_at: str | None
    size_bytes: int  # its files on disk
    edits_through: int  # the last live edit it holds (folded); 0: none
    folded_from: str | None  # the version it was folded from
    signed: bool  # its manifest carries an HMAC signature


class ActivationAttempt(_Schema):
    version: str
    at: str
    ok: bool
    seconds: float
    error: str | None


class EditsInfo(_Schema):
    """The domain's live edits: its log, and what of it the active version does not hold."""

    seq: int  # the last edit of the log (0: none)
    folded_through: int  # the last edit the active version was folded with
    pending: int  # edits after it, applied over the version
    added: int  # pairs they add
    removed: int  # pairs they take away
    last_at: str | None
    bad_lines: list[str]  # log lines refused (checksum or signature), never applied


class DomainInfo(_Schema):
    domain: str
    edits: EditsInfo
    state: Literal["active", "inactive", "failed", "empty"]
    active_version: str | None
    method: str | None
    pairs: int | None
    versions: list[str]
    version_info: list[VersionInfo]  # per version of `versions`, in the same order
    previous_version: str | None
    loaded: list[LoadedVersion]
    last_attempt: ActivationAttempt | None


class DomainList(_Schema):
    domains: list[DomainInfo]


class ActivateRequest(_Schema):
    version: str = Field(pattern=VERSION_PATTERN)


class Deleted(_Schema):
    domain: str
    deleted: str


class JobResponse(_Schema):
    id: str
    state: str
    progress: float
    message: str
    domain: str
    method: str
    result: dict[str, Any]
    error: str | None
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, job: Job) -> JobResponse:
        return cls(
            id=job.id,
            state=job.state,
            progress=job.progress,
            message=job.message,
            domain=job.spec.get("domain", ""),
            method=job.spec.get("method", ""),
            result=dict(job.result),
            error=job.error,
            created_at=job.created_at,
            updated_at=job.updated_at,
        )
