"""What routes depend on: the service state, and who may call what.

Three kinds of route: public (health, info, metrics, docs, LibreTranslate's /languages),
client (translation and domain reads: an API key when `api_keys` is set, and the rate
limit), admin (management: the admin key; 404 when none is configured). Keys come in
`Authorization: Bearer <key>`, `X-API-Key` (client) or `X-Admin-Key` (admin) and are compared
in constant time. Rate limits count per API key (hashed) where keys are required, otherwise
per client address; neither ever becomes a metric label or a log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from service.domains import DomainManager
from service.engine import TranslationEngine
from service.errors import Forbidden, NotFound, NotReady, TooManyRequests, Unauthorized
from service.langid import LanguageIdentifier
from service.metrics import Metrics
from service.settings import Settings
from service.shared import Backends

log = logging.getLogger("ragmt.service")


@dataclass
class Service:
    """One app's state; the lifespan fills in what needs the event loop."""

    settings: Settings
    metrics: Metrics
    engine: TranslationEngine
    langid: LanguageIdentifier = field(default_factory=LanguageIdentifier)
    domains: DomainManager | None = None
    backends: Backends | None = None
    draining: bool = False
    drain_deadline: float | None = None  # time.monotonic() by which a drain ends
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def manager(self) -> DomainManager:
        if self.domains is None:
            raise NotReady("stores not loaded yet")
        return self.domains

    def require_backends(self) -> Backends:
        if self.backends is None:
            raise NotReady("shared state not connected yet")
        return self.backends


def get_service(request: Request) -> Service:
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


def _bearer(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(given: str, keys: list[str]) -> bool:
    ok = False
    for key in keys:  # no early exit: timing says nothing about which key nearly matched
        ok |= hmac.compare_digest(given.encode(), key.encode())
    return ok


def require_admin(request: Request, service: ServiceDep) -> None:
    check_admin(service.settings, request.headers)


def check_admin(settings: Settings, headers: Mapping[str, str]) -> None:
    """Management routes: off (404) without an admin key, else 401 without and 403 wrong.
    Headers only, so a middleware can refuse a large upload before reading its body."""
    admin = settings.admin_key
    if admin is None:
        raise NotFound("management routes are disabled (no admin key configured)", code="disabled")
    given = _bearer(headers) or headers.get("x-admin-key")
    if not given:
        raise Unauthorized(
            "admin key required (Authorization: Bearer or X-Admin-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not _matches(given, [admin.get_secret_value()]):
        raise Forbidden("wrong admin key")


async def authorize_client(service: Service, request: Request, body_key: str | None) -> None:
    """API key (when required) and rate limit of a translation or domain-read request."""
    settings = service.settings
    given = _bearer(request.headers) or request.headers.get("x-api-key") or body_key
    if settings.api_keys:
        keys = list(settings.api_keys)
        if settings.admin_key is not None:
            keys.append(settings.admin_key.get_secret_value())
        if not given:
            service.metrics.rejections.labels("no_api_key").inc()
            raise Unauthorized(
                "API key required (Authorization: Bearer, X-API-Key or api_key)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not _matches(given, keys):
            service.metrics.rejections.labels("bad_api_key").inc()
            raise Forbidden("unknown API key")
    if settings.rate_limit > 0:
        who = rate_identity(settings, request, given)
        limiter = service.require_backends().limiter
        try:
            allowed, wait = await limiter.hit(who, settings.rate_limit, settings.rate_window_s)
        except Exception as e:  # shared state down: serve (fail open) rather than refuse all
            service.metrics.backend_errors.labels("rate_limit").inc()
            log.warning("rate limiter unavailable (%s); request let through", type(e).__name__)
            allowed, wait = True, 0.0
        if not allowed:
            service.metrics.rejections.labels("rate_limited").inc()
            raise TooManyRequests(
                f"rate limit of {settings.rate_limit} requests per "
                f"{settings.rate_window_s:g} s exceeded",
                retry_after_s=wait,
                limit="rate_limit",
                max=settings.rate_limit,
            )


def rate_identity(settings: Settings, request: Request, given: str | None) -> str:
    """Whom a request's rate budget belongs to: its API key only when keys are required (a
    key that was checked); otherwise its client address, so a made-up key per request buys
    no fresh budget."""
    if settings.api_keys and given:
        return "k:" + hashlib.sha256(given.encode()).hexdigest()[:32]
    return "a:" + (request.client.host if request.client else "unknown")


async def require_client(request: Request, service: ServiceDep) -> None:
    await authorize_client(service, request, None)


def admitting(service: Service) -> None:
    """Refuse new work while draining (SIGTERM): in-flight requests still finish."""
    if service.draining:  # a client retries elsewhere (or here, once restarted)
        raise NotReady(
            "draining: not admitting new requests", code="draining", headers={"Retry-After": "1"}
        )


Admin = Depends(require_admin)
Client = Depends(require_client)
