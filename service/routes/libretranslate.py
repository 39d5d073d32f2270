"""LibreTranslate-compatible routes, so its existing clients work unchanged.

`POST /translate` takes JSON or form bodies: `q` (a string or a list), `source` (a code or
"auto", meaning the model's source language), `target`, `format` ("text"; "html" is refused
with a clear 400) and an optional `api_key`; it answers `{"translatedText": ...}` in the
shape of `q`. `GET /languages` lists the served pairs as LibreTranslate does. Errors are
`{"error": message, ...}` as LibreTranslate clients expect (see service/errors.py).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from service.deps import ServiceDep, admitting, authorize_client
from service.engine import TranslationRequest
from service.errors import BadRequest, InvalidInput, ServiceError
from service.routes import ERRORS
from service.schemas import LibreLanguage, LibreTranslateRequest, LibreTranslateResponse

router = APIRouter()

LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French"}
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

_BODY_SCHEMA = {"$ref": "#/components/schemas/LibreTranslateRequest"}
_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": _BODY_SCHEMA},
            "application/x-www-form-urlencoded": {"schema": _BODY_SCHEMA},
        },
    }
}


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


@router.post(
    "/translate",
    response_model=LibreTranslateResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    openapi_extra=_OPENAPI,
)
async def libre_translate(request: Request, service: ServiceDep) -> LibreTranslateResponse:
    """LibreTranslate's translate call on the default model and the general domain."""
    admitting(service)
    problem: Exception | None = None
    try:
        data = await _body(request)
    except ServiceError as e:
        data, problem = {}, e
    key = data.get("api_key")
    await authorize_client(service, request, key if isinstance(key, str) else None)
    if problem is not None:
        raise problem
    try:
        req = LibreTranslateRequest.model_validate(data)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None
    if req.format != "text":
        raise BadRequest(
            f"format {req.format[:20]!r} is not supported; send plain text with format 'text'",
            field="format",
        )
    engine = service.engine
    source = req.source
    if source == "auto":  # one source language per model: "detection" is the model's
        source = engine.default_languages()[0]
    texts = [req.q] if isinstance(req.q, str) else req.q
    try:
        result = await engine.translate_batch(TranslationRequest(texts, source, req.target))
    except ServiceError as e:
        raise _as_q(e) from None
    out = [r.translation for r in result.results]
    detected = None
    if req.source == "auto":
        one = {"confidence": 100.0, "language": source}
        detected = one if isinstance(req.q, str) else [one] * len(out)
    return LibreTranslateResponse(
        translatedText=out[0] if isinstance(req.q, str) else out, detectedLanguage=detected
    )


@router.get("/languages", response_model=list[LibreLanguage])
async def languages(service: ServiceDep) -> list[LibreLanguage]:
    """Every language of the loaded models, with the targets it translates into."""
    targets: dict[str, set[str]] = {}
    for m in service.engine.models:
        src, tgt = m.translator.source_lang, m.translator.target_lang
        targets.setdefault(src, set()).add(tgt)
        targets.setdefault(tgt, set())
    return [
        LibreLanguage(code=code, name=LANGUAGE_NAMES.get(code, code), targets=sorted(tgts))
        for code, tgts in sorted(targets.items())
    ]
