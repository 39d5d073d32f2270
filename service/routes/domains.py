"""Domain reads: which store version each domain serves, and how its last activation went."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.deps import Client, ServiceDep
from service.routes import CLIENT_ERRORS, CLIENT_KEYS, errors
from service.schemas import DomainInfo, DomainList
from service.settings import DOMAIN_PATTERN

router = APIRouter(dependencies=[Client, *CLIENT_KEYS])

DomainName = Annotated[str, Path(pattern=DOMAIN_PATTERN, max_length=64)]


@router.get("/v1/domains", response_model=DomainList, responses=errors(*CLIENT_ERRORS, 503))
async def list_domains(service: ServiceDep) -> DomainList:
    manager = service.manager()
    return DomainList(domains=[DomainInfo(**manager.describe(d)) for d in manager.known_domains()])


@router.get(
    "/v1/domains/{domain}",
    response_model=DomainInfo,
    responses=errors(*CLIENT_ERRORS, 404, 422, 503),
)
async def get_domain(domain: DomainName, service: ServiceDep) -> DomainInfo:
    """Active version, state, versions on disk, leases and the last activation attempt."""
    return DomainInfo(**service.manager().describe(domain))
