"""POST /v1/translate: the native translation API."""

from __future__ import annotations

from fastapi import APIRouter

from service.deps import Client, PrincipalDep, ServiceDep, admitting, in_scope
from service.domains import GENERAL_DOMAIN
from service.routes import CLIENT_ERRORS, CLIENT_KEYS, errors
from service.routes.bodies import JsonBodyRoute
from service.schemas import TranslateRequest, TranslateResponse

router = APIRouter(
    route_class=JsonBodyRoute, dependencies=[Client, *CLIENT_KEYS], tags=["translate"]
)


@router.post(
    "/v1/translate",
    response_model=TranslateResponse,
    response_model_exclude_unset=True,  # neighbours and gate only when present
    responses=errors(*CLIENT_ERRORS, 400, 404, 413, 422, 503),
)
async def translate(
    body: TranslateRequest, service: ServiceDep, principal: PrincipalDep
) -> TranslateResponse:
    """Translate `texts` with the domain's active store version (per text: which one). The
    key must open the domain, and its neighbours when `return_neighbours` (else 403)."""
    admitting(service)
    domain = body.domain if body.domain is not None else GENERAL_DOMAIN
    in_scope(service, principal, domain, body.return_neighbours)
    result = await service.engine.translate_batch(body.to_engine())
    return TranslateResponse.from_result(result)
