"""Public routes: liveness, readiness, info and the Prometheus exposition (which needs the
admin key or a metrics key once client keys are configured: its labels name the domains)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from service.deps import MetricsReader, ServiceDep, reader
from service.errors import NotReady
from service.routes import METRICS_KEYS, errors
from service.schemas import (
    InfoResponse,
    LimitsInfo,
    ModelInfo,
    StatusResponse,
)

router = APIRouter(tags=["service"])


@router.get("/livez", response_model=StatusResponse)
async def livez() -> StatusResponse:
    """The process answers (nothing else is checked)."""
    return StatusResponse(status="ok")


@router.get("/readyz", response_model=StatusResponse, responses=errors(503))
async def readyz(service: ServiceDep) -> StatusResponse:
    """Ready: a model and every required domain's store loaded, not draining."""
    engine = service.engine
    if service.draining:
        raise NotReady("draining")
    if not engine.ready:
        raise NotReady(engine.not_ready_reason or "not ready")
    missing = service.manager().missing(service.settings.required_domains)
    if missing:
        raise NotReady(f"required domain(s) without an active store: {', '.join(missing)}")
    return StatusResponse(status="ready")


@router.get("/info", response_model=InfoResponse)
async def info(request: Request, service: ServiceDep) -> InfoResponse:
    """Models, limits and domains. Once client keys are configured, `domains` lists only the
    domains the key sent opens (`Authorization: Bearer`, `X-API-Key` or `X-Admin-Key`): none
    without a key, or with an unknown one."""
    engine, s = service.engine, service.settings
    lim = engine.limits
    defaults = engine.registry.defaults
    principal = reader(service, request.headers)
    known = service.domains.known_domains() if service.domains is not None else []
    domains = principal.visible(known) if principal is not None else []
    return InfoResponse(
        ready=engine.ready,
        reason=engine.not_ready_reason,
        device=engine.device,
        models=[
            ModelInfo.of(m, [p for p, name in defaults.items() if name == m.name])
            for m in engine.models
        ],
        domains=domains,
        limits=LimitsInfo(
            max_texts=lim.max_texts,
            max_chars=lim.max_chars,
            max_body_bytes=s.max_body_bytes,
            beam_size=lim.options.beam_size,
            max_beam_size=lim.max_beam_size,
            queue_size=s.queue_size,
            rate_limit=s.rate_limit,
            rate_window_s=s.rate_window_s,
        ),
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}, **errors(401, 403)},
    dependencies=[MetricsReader, *METRICS_KEYS],
)
async def metrics(service: ServiceDep) -> Response:
    """Prometheus text exposition (latency, queue, rejections, cache, swaps, jobs)."""
    service.metrics.queue_depth.set(service.engine.queued)
    return Response(service.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
