"""LibreTranslate-compatible routes, so its existing clients work unchanged.

`POST /translate` takes JSON or form bodies: `q` (a string or a list), `source` (a code or
"auto": identified per text, see service/langid.py), `target`, `format` ("text", or "html":
the text of each block translated, every tag kept) and an optional `api_key`; it answers
`{"translatedText": ...}` in the shape of `q`. `POST /detect` (`q`, `api_key`) answers, per
text, a list with the most probable language and its confidence in percent. A text without
letters (blank, digits) is not identified: it is reported as the model's source language
with confidence 0. `GET /languages` lists the served pairs as LibreTranslate does. Errors are
`{"error": message, ...}` as LibreTranslate clients expect (see service/errors.py).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from service.deps import Service, ServiceDep, admitting, authorize_client, in_scope
from service.domains import GENERAL_DOMAIN
from service.engine import TranslationRequest
from service.errors import BadRequest, InvalidInput, ServiceError, UnsupportedLanguage
from service.langid import Detection
from service.routes import CLIENT_ERRORS, CLIENT_KEYS, errors
from service.routes.bodies import check_json_depth
from service.schemas import (
    LibreDetection,
    LibreDetectRequest,
    LibreLanguage,
    LibreTranslateRequest,
    LibreTranslateResponse,
)

router = APIRouter(tags=["libretranslate"])

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French"}
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

Body = TypeVar("Body", bound=BaseModel)


def _openapi(schema: type[BaseModel]) -> dict[str, Any]:
    """The request body as documented: `schema` inline (the route reads the body itself, so
    FastAPI lists no model for it), as JSON or either kind of form."""
    body = schema.model_json_schema(ref_template="#/components/schemas/{model}")
    content = {ctype: {"schema": body} for ctype in ("application/json", *FORM_TYPES)}
    return {"requestBody": {"required": True, "content": content}}


async def _body(request: Request) -> dict[str, Any]:
    """The request's fields from JSON (the default) or a form; a bad body raises 4xx."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in FORM_TYPES:
        form = await request.form()
        data: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        qs = [v for v in form.getlist("q") if isinstance(v, str)]
        if len(qs) > 1:
            data["q"] = qs
        return data
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("request body is not valid UTF-8") from None
    check_json_depth(text)  # before json.loads, which recurses once per level
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise InvalidInput("body: not valid JSON", code="invalid_request", field="body") from None
    if not isinstance(data, dict):
        raise InvalidInput("body: expected a JSON object", code="invalid_request", field="body")
    return data


def _as_q(e: ServiceError) -> ServiceError:
    """The engine names fields `texts`; LibreTranslate's are `q`."""
    field = e.details.get("field")
    if isinstance(field, str) and field.startswith("texts"):
        e.details["field"] = "q" + field[len("texts") :]
        e.message = e.message.replace("texts", "q", 1)
    return e


async def _request(request: Request, service: Service, schema: type[Body]) -> Body:
    """The validated body, after admission and the client's key (checked before the body),
    which must open the general domain: LibreTranslate's routes serve that one."""
    admitting(service)
    problem: Exception | None = None
    try:
        data = await _body(request)
    except ServiceError as e:
        data, problem = {}, e
    key = data.get("api_key")
    principal = await authorize_client(service, request, key if isinstance(key, str) else None)
    in_scope(service, principal, GENERAL_DOMAIN, neighbours=False)
    if problem is not None:
        raise problem
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None


def _detect(service: Service, texts: list[str]) -> list[Detection]:
    """One detection per text, within the translation limits; see the module's docstring."""
    try:
        service.engine.check_texts(texts)
    except ServiceError as e:
        raise _as_q(e) from None
    source = service.engine.default_languages()[0]
    found = [service.langid.detect(t) for t in texts]
    return [d if d is not None else Detection(source, 0.0) for d in found]


def _auto_source(service: Service, texts: list[str], target: str) -> list[Detection]:
    """Each text's detected language, which must be one source translated into `target`
    (and the same for every text of the request); 422 naming the served sources otherwise."""
    sources = service.engine.registry.sources_for(target)
    # a text without letters is not identified: it is taken as the first served source
    detections = [
        Detection(sources[0], 0.0) if d.confidence == 0.0 and sources else d
        for d in _detect(service, texts)
    ]
    found = {d.language for d in detections}
    other = sorted(found - set(sources))
    if other or len(found) > 1:
        language = other[0] if other else sorted(found)[1]
        reason = "is not translated" if other else "differs from the rest of the request's"
        raise UnsupportedLanguage(
            f"detected language {language!r} {reason} into {target}; supported sources: "
            + (", ".join(sources) or "none"),
            detected=language,
            supported_sources=sources,
        )
    return detections


def _percent(d: Detection) -> dict[str, Any]:
    return {"confidence": round(d.confidence * 100, 1), "language": d.language}


@router.post(
    "/translate",
    response_model=LibreTranslateResponse,
    response_model_exclude_none=True,
    responses=errors(*CLIENT_ERRORS, 400, 413, 422, 503, libre=True),
    dependencies=CLIENT_KEYS,
    openapi_extra=_openapi(LibreTranslateRequest),
)
async def libre_translate(request: Request, service: ServiceDep) -> LibreTranslateResponse:
    """LibreTranslate's translate call: the pair's default model, the general domain."""
    req = await _request(request, service, LibreTranslateRequest)
    if req.format not in ("text", "html"):
        raise BadRequest(
            f"format {req.format[:20]!r} is not supported; use 'text' or 'html'", field="format"
        )
    engine = service.engine
    source = req.source
    texts = [req.q] if isinstance(req.q, str) else req.q
    detections: list[Detection] = []
    if source == "auto":
        detections = _auto_source(service, texts, req.target)
        source = detections[0].language
    try:
        result = await engine.translate_batch(
            TranslationRequest(texts, source, req.target, format=req.format)
        )
    except ServiceError as e:
        raise _as_q(e) from None
    out = [r.translation for r in result.results]
    detected = None
    if detections:
        found = [_percent(d) for d in detections]
        detected = found[0] if isinstance(req.q, str) else found
    return LibreTranslateResponse(
        translatedText=out[0] if isinstance(req.q, str) else out, detectedLanguage=detected
    )


Detected = list[LibreDetection] | list[list[LibreDetection]]


@router.post(
    "/detect",
    response_model=Detected,
    responses=errors(*CLIENT_ERRORS, 400, 413, 422, 503, libre=True),
    dependencies=CLIENT_KEYS,
    openapi_extra=_openapi(LibreDetectRequest),
)
async def libre_detect(request: Request, service: ServiceDep) -> Detected:
    """LibreTranslate's detect call: `[{"language", "confidence"}]` for a text (its most
    probable language), a list of those for a list of texts."""
    req = await _request(request, service, LibreDetectRequest)
    texts = [req.q] if isinstance(req.q, str) else req.q
    found = [[LibreDetection(**_percent(d))] for d in _detect(service, texts)]
    return found[0] if isinstance(req.q, str) else found


@router.get("/languages", response_model=list[LibreLanguage])
async def languages(service: ServiceDep) -> list[LibreLanguage]:
    """Each source language served, with the targets it is really translated into."""
    targets = service.engine.registry.targets()
    return [
        LibreLanguage(code=code, name=LANGUAGE_NAMES.get(code, code), targets=tgts)
        for code, tgts in targets.items()
    ]
