"""Domain reads: which store version each domain serves, and how its last activation went;
a key sees only the domains it opens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.deps import Client, PrincipalDep, ServiceDep, in_scope
from service.routes import CLIENT_ERRORS, CLIENT_KEYS, errors
from service.schemas import DomainInfo, DomainList
from service.settings import DOMAIN_PATTERN

router = APIRouter(dependencies=[Client, *CLIENT_KEYS], tags=["domains"])

DomainName = Annotated[str, Path(pattern=DOMAIN_PATTERN, max_length=64)]


@router.get("/v1/domains", response_model=DomainList, responses=errors(*CLIENT_ERRORS, 503))
async def list_domains(service: ServiceDep, principal: PrincipalDep) -> DomainList:
    """The domains the key may translate with."""
    manager = service.manager()
    domains = principal.visible(manager.known_domains())
    return DomainList(domains=[DomainInfo(**manager.describe(d)) for d in domains])


@router.get(
    "/v1/domains/{domain}",
    response_model=DomainInfo,
    responses=errors(*CLIENT_ERRORS, 404, 422, 503),
)
async def get_domain(
    domain: DomainName, service: ServiceDep, principal: PrincipalDep
) -> DomainInfo:
    """Active version, state, versions on disk, leases and the last activation attempt; 403
    for a domain the key does not open, whether it exists or not."""
    manager = service.manager()
    in_scope(service, principal, domain, neighbours=False)
    return DomainInfo(**manager.describe(domain))
