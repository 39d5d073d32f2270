"""Request and response bodies of the HTTP API (pydantic v2); unknown fields are refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from service.engine import BatchResult, LoadedModel, TranslationEngine, TranslationRequest


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, protected_namespaces=())


class TranslateRequest(_Schema):
    texts: list[str]
    source_lang: str = "en"
    target_lang: str = "de"
    # Accepted now so clients can send it; with no retrieval stores yet, any domain other
    # than null or "general" is answered 404 unknown_domain (stores arrive in a later issue).
    domain: str | None = None
    model: str | None = None  # null or "default": the default model
    beam_size: int | None = None  # null: the configured default

    def to_engine(self) -> TranslationRequest:
        return TranslationRequest(**self.model_dump())


class TranslationResult(_Schema):
    translation: str
    model: str
    domain: str


class Timings(_Schema):
    total_ms: float
    decode_ms: float


class TranslateResponse(_Schema):
    results: list[TranslationResult]
    timings: Timings

    @classmethod
    def from_result(cls, r: BatchResult) -> TranslateResponse:
        results = [
            TranslationResult(translation=x.translation, model=x.model, domain=x.domain)
            for x in r.results
        ]
        return cls(results=results, timings=Timings(total_ms=r.total_ms, decode_ms=r.decode_ms))


class StatusResponse(_Schema):
    status: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # details such as field, limit, max
    code: str
    message: str


class ErrorResponse(_Schema):
    error: ErrorDetail


class ModelInfo(_Schema):
    name: str
    default: bool
    architecture: str
    languages: dict[str, str]
    parameters: int | None
    weights_sha256: str
    domains: list[str]

    @classmethod
    def of(cls, m: LoadedModel, default: bool) -> ModelInfo:
        return cls(
            name=m.name,
            default=default,
            architecture=m.manifest["architecture"],
            languages=dict(m.manifest["languages"]),
            parameters=m.manifest.get("parameters"),
            weights_sha256=m.weights_sha256,
            domains=list(m.domains),
        )


class LimitsInfo(_Schema):
    max_texts: int
    max_chars: int
    max_body_bytes: int
    beam_size: int
    max_beam_size: int


class InfoResponse(_Schema):
    ready: bool
    reason: str | None
    models: list[ModelInfo]
    limits: LimitsInfo

    @classmethod
    def of(cls, engine: TranslationEngine, max_body_bytes: int) -> InfoResponse:
        lim = engine.limits
        return cls(
            ready=engine.ready,
            reason=engine.not_ready_reason,
            models=[ModelInfo.of(m, m.name == engine.default_model) for m in engine.models],
            limits=LimitsInfo(
                max_texts=lim.max_texts,
                max_chars=lim.max_chars,
                max_body_bytes=max_body_bytes,
                beam_size=lim.beam_size,
                max_beam_size=lim.max_beam_size,
            ),
        )
