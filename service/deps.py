"""What routes depend on: the service state, and who may call what.

Three kinds of route: public (health, info, docs, LibreTranslate's /languages; /metrics
too unless keys are required), client (translation and domain reads: an API key when keys
are configured, and the rate limit), admin (management: the admin key; 404 when none is
configured). Keys come in `Authorization: Bearer <key>`, `X-API-Key` (client) or
`X-Admin-Key` (admin) and are compared in constant time.

A client key stands for a `Principal`: a plain `RAGMT_API_KEYS` key and the admin key open
every domain, a key of `RAGMT_API_KEYS_FILE` the domains its entry lists (to translate with,
and to read neighbours from), so one customer's translation memory stays its own. Without
configured keys everyone is `OPEN`. Rate limits count per principal where keys are
required, otherwise per client address; neither ever becomes a metric label or a log line.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from service.domains import DomainManager
from service.engine import TranslationEngine
from service.errors import Forbidden, NotFound, NotReady, TooManyRequests, Unauthorized
from service.langid import LanguageIdentifier
from service.metrics import Metrics
from service.settings import EVERY_DOMAIN, Settings
from service.shared import Backends

log = logging.getLogger("ragmt.service")


@dataclass(frozen=True)
class Principal:
    """Whom a client request acts for, and which domains its key opens (None: every one)."""

    name: str
    translate: frozenset[str] | None = None
    neighbours: frozenset[str] | None = None  # within `translate`
    edit: frozenset[str] | None = frozenset()  # may edit the memory of; within `neighbours`
    admin: bool = False
    metrics: bool = False  # may read /metrics, whose labels name every domain
    budget: str | None = None  # its rate budget; None: the client's address is

    def may(self, domain: str, neighbours: bool = False) -> bool:
        """Whether the key may translate with `domain` (and read its neighbours)."""
        scopes = (self.translate, self.neighbours) if neighbours else (self.translate,)
        return all(scope is None or domain in scope for scope in scopes)

    def check(self, domain: str, neighbours: bool = False) -> None:
        """403 domain_forbidden outside the key's scope. The answer does not depend on
        whether `domain` exists, so a key cannot probe for other customers' domains."""
        if not self.may(domain):
            what = "translate with"
        elif not self.may(domain, neighbours):
            what = "read the neighbours of"
        else:
            return
        raise Forbidden(f"this API key may not {what} that domain", code="domain_forbidden")

    def may_edit(self, domain: str) -> bool:
        """Whether the key may add, correct and delete pairs of `domain`'s memory."""
        return self.admin or (self.edit is None or domain in self.edit) and self.may(domain, True)

    def visible(self, domains: Iterable[str]) -> list[str]:
        """The domains of `domains` this key may translate with (and so may know about)."""
        return [d for d in domains if self.may(d)]


# No keys configured: every client may translate and read neighbours; editing a memory
# still takes the admin key (or, once keys are configured, a key with `edit` scope).
OPEN = Principal("open", metrics=True)


def _scope(given: list[str] | str) -> frozenset[str] | None:
    return None if given == EVERY_DOMAIN else frozenset(given)


def _hashed(key: str) -> str:
    return "k:" + hashlib.sha256(key.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Keyring:
    """Every key a client route accepts and the principal it stands for."""

    keys: tuple[tuple[str, Principal], ...] = field(repr=False)  # never in a log line
    required: bool = False  # client routes need a key (plain or scoped keys are configured)

    @classmethod
    def of(cls, settings: Settings) -> Keyring:
        keys = [(k, Principal("api_keys", budget=_hashed(k))) for k in settings.api_keys]
        for entry in settings.key_entries:
            scoped = Principal(
                entry.name,
                _scope(entry.translate),
                _scope(entry.neighbours),
                _scope(entry.edit),
                metrics=entry.metrics,
                budget="p:" + entry.name,
            )
            keys.append((entry.key.get_secret_value(), scoped))
        if settings.admin_key is not None:
            admin = settings.admin_key.get_secret_value()
            keys.append(
                (admin, Principal("admin", admin=True, metrics=True, budget=_hashed(admin)))
            )
        return cls(tuple(keys), settings.keys_required)

    def find(self, given: str) -> Principal | None:
        """The principal of key `given`, or None for an unknown key."""
        found = None
        for key, principal in self.keys:  # no early exit: timing tells no key's position
            if hmac.compare_digest(given.encode(), key.encode()) and found is None:
                found = principal
        return found


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
    keyring: Keyring = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.keyring = Keyring.of(self.settings)

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


async def authorize_client(service: Service, request: Request, body_key: str | None) -> Principal:
    """API key (when required) and rate limit of a translation or domain-read request; the
    principal the key stands for (OPEN without configured keys)."""
    settings = service.settings
    principal = OPEN
    if service.keyring.required:
        given = _bearer(request.headers) or request.headers.get("x-api-key") or body_key
        if not given:
            service.metrics.rejections.labels("no_api_key").inc()
            raise Unauthorized(
                "API key required (Authorization: Bearer, X-API-Key or api_key)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        found = service.keyring.find(given)
        if found is None:
            service.metrics.rejections.labels("bad_api_key").inc()
            raise Forbidden("unknown API key")
        principal = found
    request.state.principal = principal
    if settings.rate_limit > 0:
        who = rate_identity(request, principal)
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
    return principal


def rate_identity(request: Request, principal: Principal) -> str:
    """Whom a request's rate budget belongs to: its principal when keys are required (a key
    that was checked); otherwise (OPEN) its client address, so a made-up key per request
    buys no fresh budget."""
    if principal.budget is not None:
        return principal.budget
    return "a:" + (request.client.host if request.client else "unknown")


async def require_client(request: Request, service: ServiceDep) -> Principal:
    """A client route's key and rate limit; routes take its principal as `PrincipalDep`
    (FastAPI runs it once per request however many times it is depended on)."""
    return await authorize_client(service, request, None)


def in_scope(service: Service, principal: Principal, domain: str, neighbours: bool) -> None:
    """The key's scope first (403, alike for an unknown domain and a forbidden one), then the
    domain's existence (404 naming only the domains the key opens)."""
    try:
        principal.check(domain, neighbours)
    except Forbidden:
        service.metrics.rejections.labels("domain_forbidden").inc()
        raise
    manager = service.domains
    if manager is not None and not manager.is_known(domain):
        known = principal.visible(manager.known_domains())
        raise NotFound(
            f"unknown domain; available: {', '.join(known) or 'none'}", code="unknown_domain"
        )


def _any_key(headers: Mapping[str, str]) -> str | None:
    return _bearer(headers) or headers.get("x-api-key") or headers.get("x-admin-key")


def reader(service: Service, headers: Mapping[str, str]) -> Principal | None:
    """Who reads a public route that answers more to a key (/info): OPEN without configured
    keys, else the principal of the key sent, None for none or an unknown one. Never raises:
    the route stays public."""
    if not service.keyring.required:
        return OPEN
    given = _any_key(headers)
    return service.keyring.find(given) if given else None


def require_metrics(request: Request, service: ServiceDep) -> None:
    """/metrics names every domain in its labels: open without configured keys, else the
    admin key or a key whose entry has `metrics` (401 without a key, 403 with another)."""
    if not service.keyring.required:
        return
    given = _any_key(request.headers)
    if not given:
        raise Unauthorized(
            "a key is required (Authorization: Bearer, X-API-Key or X-Admin-Key)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    principal = service.keyring.find(given)
    if principal is None or not principal.metrics:
        raise Forbidden("this key may not read the metrics")


async def require_editor(service: Service, request: Request, domain: str) -> Principal:
    """Who edits `domain`'s memory: the admin key, or a client key whose `edit` scope opens
    the domain (401 with no key, 403 with one that may not)."""
    admin = service.settings.admin_key
    given = _any_key(request.headers)
    if admin is not None and given and _matches(given, [admin.get_secret_value()]):
        return Principal("admin", admin=True)
    if request.headers.get("x-admin-key"):
        raise Forbidden("wrong admin key")
    principal = await authorize_client(service, request, None)
    if not principal.may_edit(domain):
        if principal is OPEN and not given:
            raise Unauthorized(
                "editing a memory takes the admin key or an API key with edit scope",
                headers={"WWW-Authenticate": "Bearer"},
            )
        service.metrics.rejections.labels("domain_forbidden").inc()
        raise Forbidden("this key may not edit that domain's memory", code="domain_forbidden")
    return principal


def admitting(service: Service) -> None:
    """Refuse new work while draining (SIGTERM): in-flight requests still finish."""
    if service.draining:  # a client retries elsewhere (or here, once restarted)
        raise NotReady(
            "draining: not admitting new requests", code="draining", headers={"Retry-After": "1"}
        )


Admin = Depends(require_admin)
Client = Depends(require_client)
MetricsReader = Depends(require_metrics)
PrincipalDep = Annotated[Principal, Client]
