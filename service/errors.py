"""Typed service errors and the one place that turns errors into JSON responses.

Every error body is `{"error": {"code": str, "message": str, ...details}}`, except on
LibreTranslate's paths: `{"error": message, "code": str, ...details}`, the shape its clients
parse. Clients never see a stack trace or an echo of their (possibly huge) input.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

log = logging.getLogger("ragmt.service")

MAX_REPORTED_ERRORS = 10
MAX_FIELD_CHARS = 100  # field names come from the client (e.g. an unknown key)


class ServiceError(Exception):
    """An error with an HTTP status, a stable machine-readable code and a safe message."""

    status: int = 500
    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        **details: Any,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers or {}  # e.g. Retry-After, WWW-Authenticate
        self.details = details  # extra JSON fields, e.g. field="texts", limit="max_texts"

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, **self.details}}


class BadRequest(ServiceError):
    status, code = 400, "bad_request"


class InvalidInput(ServiceError):
    """Well-formed JSON whose values the service refuses (empty text, limits exceeded)."""

    status, code = 422, "invalid_input"


class UnsupportedLanguage(ServiceError):
    status, code = 422, "unsupported_language"


class NotFound(ServiceError):
    status, code = 404, "not_found"


class PayloadTooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class NotReady(ServiceError):
    status, code = 503, "not_ready"


class RequestTimeout(ServiceError):
    """The client stopped sending its request body."""

    status, code = 408, "request_timeout"


class Unauthorized(ServiceError):
    """No credentials where some are needed."""

    status, code = 401, "unauthorized"


class Forbidden(ServiceError):
    """Credentials given, but not ones that open this route."""

    status, code = 403, "forbidden"


class Conflict(ServiceError):
    """The request contradicts the current state (delete the active version, ...)."""

    status, code = 409, "conflict"


class TooManyRequests(ServiceError):
    status, code = 429, "rate_limited"

    def __init__(self, message: str, retry_after_s: float, **details: Any) -> None:
        wait = max(1, math.ceil(retry_after_s))
        super().__init__(message, headers={"Retry-After": str(wait)}, retry_after=wait, **details)


class Overloaded(ServiceError):
    """The decoding queue is full: refused at once rather than left waiting."""

    status, code = 503, "overloaded"

    def __init__(self, message: str, retry_after_s: float = 1.0, **details: Any) -> None:
        wait = max(1, math.ceil(retry_after_s))
        super().__init__(message, headers={"Retry-After": str(wait)}, retry_after=wait, **details)


class ActivationFailed(ServiceError):
    """A store version failed to load or validate; the previous version keeps serving."""

    status, code = 422, "activation_failed"


# LibreTranslate's routes answer errors as `{"error": "message"}`, which its clients parse.
LIBRETRANSLATE_PATHS = frozenset({"/translate", "/detect", "/languages"})


class ErrorJSONResponse(JSONResponse):
    """An error's JSON response, shaped when it is sent: by then the path is known even to a
    middleware that answers before routing (413), so every LibreTranslate path answers alike."""

    def __init__(self, exc: ServiceError, headers: dict[str, str] | None = None) -> None:
        self.exc = exc
        super().__init__(exc.body(), exc.status, headers={**exc.headers, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("path") in LIBRETRANSLATE_PATHS:  # details alongside, as the flat shape
            exc = self.exc
            self.body = self.render({**exc.details, "error": exc.message, "code": exc.code})
            self.headers["content-length"] = str(len(self.body))
        await super().__call__(scope, receive, send)


def error_response(exc: ServiceError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The JSON response of `exc` (see ErrorJSONResponse for its two shapes)."""
    return ErrorJSONResponse(exc, headers)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    """("body", "texts", 0) -> "texts.0"; a bare ("body",) -> "body"."""
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts)[:MAX_FIELD_CHARS]


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Only location, message and type: pydantic's "input" would echo the payload back.
    errors = [
        {"field": _field(e.get("loc", ())), "message": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()[:MAX_REPORTED_ERRORS]
    ]
    if not errors or errors[0]["type"] == "json_invalid":
        errors = [{"field": "body", "message": "not valid JSON", "type": "json_invalid"}]
    first = errors[0]
    message = f"{first['field']}: {first['message']}"
    err = InvalidInput(message, code="invalid_request", field=first["field"], errors=errors)
    return error_response(err)


_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = str(exc.detail)
    if isinstance(exc.__cause__, UnicodeDecodeError):  # FastAPI's "error parsing the body"
        message = "request body is not valid UTF-8"
    err = ServiceError(message, code=_HTTP_CODES.get(exc.status_code, "http_error"))
    err.status = exc.status_code
    return error_response(err, headers=dict(exc.headers or {}))


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ServiceError("internal error"))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unhandled)
