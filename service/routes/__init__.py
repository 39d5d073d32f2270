"""HTTP routers: thin functions over the engine, the domain manager and the job queue.

What the routers share for the OpenAPI document: the error responses a route really returns,
in the shapes service/errors.py gives them, and the security schemes of the keys it takes.
"""

from __future__ import annotations

from typing import Any

from fastapi import Security
from fastapi.security import APIKeyHeader, HTTPBearer

from service.schemas import ErrorResponse, LibreError

# The groups of /docs, in this order; each router tags its routes with one of them.
OPENAPI_TAGS = [
    {
        "name": "translate",
        "description": "Translate texts with a domain's memory: each result names the store "
        "version it used and, on request, the neighbours (retrieved pairs) that shaped it.",
    },
    {
        "name": "domains",
        "description": "The domains a key may translate with: active store version, state, "
        "versions on disk and the last activation.",
    },
    {
        "name": "memory",
        "description": "A domain's memory edited live: add, correct, delete and search single "
        "pairs (the admin key or a key with edit scope), fold the edits into a new version.",
    },
    {
        "name": "glossary",
        "description": "A domain's terminology, enforced when decoding: list, add and delete "
        "terms, import CSV or TBX.",
    },
    {
        "name": "files",
        "description": "Translate a whole XLIFF or gettext PO file in the background, then "
        "download it.",
    },
    {
        "name": "management",
        "description": "The admin key: upload a corpus (TMX, TSV, Moses) to build a store "
        "version, follow its job, activate, roll back, delete versions.",
    },
    {
        "name": "libretranslate",
        "description": "LibreTranslate's routes, for its existing clients: the `general` "
        "domain and each pair's default model.",
    },
    {
        "name": "service",
        "description": "Liveness, readiness, the models and limits served, Prometheus metrics.",
    },
]

# What each status means here; the body's `code` tells the cases apart.
WHY = {
    400: "bad_request: a body that cannot be read (not UTF-8, a broken form or Content-Length)",
    401: "unauthorized: this route needs a key and none was sent",
    403: "forbidden: the key sent does not open this route; domain_forbidden: the key does not "
    "open the domain (or its neighbours), answered alike whether the domain exists or not",
    404: "not found: unknown_domain, unknown_model, unknown_job, unknown_version, unknown_pair "
    "(a memory edit naming a pair the memory does not hold), or disabled "
    "(management routes without an admin key configured)",
    409: "conflict: the request contradicts the domain's state (the active version cannot be "
    "deleted; no version to roll back to; no active version to edit or fold into)",
    413: "payload_too_large: the body exceeds max_body_bytes (max_upload_bytes for corpora)",
    422: "invalid_request (schema), invalid_input, limit_exceeded (names the limit, e.g. "
    "max_texts or max_json_depth), unsupported_language, activation_failed",
    429: "rate_limited: over rate_limit requests per rate_window_s; see Retry-After",
    500: "internal: an unexpected error (logged; nothing of it is returned)",
    503: "not_ready, draining and overloaded (both with Retry-After), domain_not_ready, "
    "registry_unavailable",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    429: _RETRY_AFTER,
    503: _RETRY_AFTER,  # only when draining or overloaded
}


def errors(*statuses: int, libre: bool = False) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of a route: `statuses` and 500, in the native shape or
    (`libre`) in LibreTranslate's."""
    model = LibreError if libre else ErrorResponse
    return {
        s: {
            "model": model,
            "description": WHY[s],
            **({"headers": _HEADERS[s]} if s in _HEADERS else {}),
        }
        for s in sorted({*statuses, 500})
    }


CLIENT_ERRORS = (401, 403, 429)  # API keys (when configured) and the rate limit
ADMIN_ERRORS = (401, 403, 404)  # the admin key; 404 while management is disabled

# The keys as OpenAPI security schemes. These dependencies only return what was sent (None
# when nothing was); service/deps.py checks the keys.
API_KEY = APIKeyHeader(
    name="X-API-Key",
    scheme_name="ApiKey",
    auto_error=False,
    description="A client API key; needed when the service is configured with API keys "
    "(LibreTranslate's routes also take it as `api_key` in the body).",
)
ADMIN_KEY = APIKeyHeader(
    name="X-Admin-Key",
    scheme_name="AdminKey",
    auto_error=False,
    description="The admin key of the management routes.",
)
BEARER = HTTPBearer(
    scheme_name="Bearer",
    auto_error=False,
    description="`Authorization: Bearer <key>`: an API key, or the admin key.",
)
CLIENT_KEYS = [Security(API_KEY), Security(BEARER)]
ADMIN_KEYS = [Security(ADMIN_KEY), Security(BEARER)]
METRICS_KEYS = [Security(API_KEY), Security(ADMIN_KEY), Security(BEARER)]  # once keys are set
