"""HTTP API of the netdomain service (reached only through the gateway, which signs the caller).

Routes (see docs/api.md): ``GET/POST /api/v1/domains``, ``GET/DELETE /api/v1/domains/{name}``,
``POST /api/v1/domains:check``. Creating and deleting need the admin role; reading and checking
need any signed-in user.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, FastAPI, Response
from pydantic import BaseModel, ConfigDict, Field
from rlark_contracts.messages import said
from rlark_platform.http import AdminDep, CallerDep, create_app, database_ready
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize
from rlark_platform.service import ServiceContext

from rlark_netdomain.domain import count_assignable, full_mesh
from rlark_netdomain.handlers import domains
from rlark_netdomain.repository.domains import Domain
from rlark_netdomain.settings import NetdomainSettings


class CreateDomainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=256, description="A DNS label, e.g. train-net")
    cidr: str = Field(max_length=64, description="A private IPv4 CIDR no cluster uses, e.g. 10.100.0.0/16")
    description: str = Field(default="", max_length=1000)


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cidr: str = Field(max_length=64)


class ConflictOut(BaseModel):
    kind: str = Field(description="cluster_pod_cidr, cluster_service_cidr or domain")
    name: str
    cidr: str
    observed: bool = Field(
        default=False, description="A cluster CIDR its agent observed (true), not one it declared"
    )
    message: str
    message_key: str | None = Field(default=None, description="The message's catalogue key (ADR 0011)")
    params: dict[str, str | int] | None = Field(
        default=None, description="The values the message interpolates"
    )


class ErrorOut(BaseModel):
    code: str
    message: str
    field: str | None
    message_key: str | None = Field(default=None, description="The message's catalogue key (ADR 0011)")
    params: dict[str, str | int] | None = Field(
        default=None, description="The values the message interpolates"
    )


class CheckOut(BaseModel):
    ok: bool
    cidr: str | None = Field(description="The network, normalised")
    capacity: int | None = Field(description="Addresses workers can get (.0 and .255 never)")
    conflicts: list[ConflictOut]
    error: ErrorOut | None = Field(description="Why the CIDR itself is refused, if it is")


class DomainOut(BaseModel):
    name: str
    cidr: str
    description: str
    created_by: str
    created_at: datetime
    capacity: int
    allocated: int
    warnings: list[str] = Field(description="Clusters whose CIDRs came to overlap this domain")


class DomainList(BaseModel):
    items: list[DomainOut]
    total: int
    page: int
    page_size: int


class ClusterUsage(BaseModel):
    cluster: str
    allocated: int


class LinkOut(BaseModel):
    a: str
    b: str
    via: str | None = Field(
        default=None, description="The relay cluster when a and b cannot reach each other directly"
    )


class TunnelsOut(BaseModel):
    clusters: list[str]
    links: list[LinkOut]


class WarningOut(BaseModel):
    cluster: str
    kind: str
    cluster_cidr: str
    message: str
    detected_at: datetime


class TunnelStateOut(BaseModel):
    cluster: str = Field(description="The reporting cluster")
    peer: str
    state: str = Field(description="up or down, as the reporting cluster's agent sees the link")
    since: datetime = Field(description="When the link entered this state")
    rtt_ms: float | None
    bytes_sent: int
    bytes_received: int
    last_error: str
    reported_at: datetime


class DomainDetailOut(DomainOut):
    free: int
    clusters: list[ClusterUsage]
    tunnels: TunnelsOut
    tunnel_states: list[TunnelStateOut] = Field(
        description="Each link as each cluster's agent last reported it"
    )
    overlaps: list[WarningOut]


def _out(domain: Domain, allocated: int, warnings: list[str]) -> DomainOut:
    return DomainOut(
        name=domain.name,
        cidr=str(domain.cidr),
        description=domain.description,
        created_by=domain.created_by,
        created_at=domain.created_at,
        capacity=count_assignable(domain.cidr),
        allocated=allocated,
        warnings=warnings,
    )


def _detail(detail: domains.DomainDetail) -> DomainDetailOut:
    base = _out(detail.domain, detail.allocated, [w.message for w in detail.warnings])
    topology = full_mesh(detail.per_cluster)
    via = {r.link: r.via for r in detail.relays}
    return DomainDetailOut(
        **base.model_dump(),
        free=detail.capacity - detail.allocated,
        clusters=[ClusterUsage(cluster=c, allocated=n) for c, n in detail.per_cluster.items()],
        tunnels=TunnelsOut(
            clusters=list(topology.clusters),
            links=[LinkOut(a=x.a, b=x.b, via=via.get(x)) for x in topology.links],
        ),
        tunnel_states=[
            TunnelStateOut(
                cluster=t.cluster,
                peer=t.peer,
                state=t.state,
                since=t.since,
                rtt_ms=t.rtt_ms,
                bytes_sent=t.bytes_sent,
                bytes_received=t.bytes_received,
                last_error=t.last_error,
                reported_at=t.reported_at,
            )
            for t in detail.tunnel_states
        ],
        overlaps=[
            WarningOut(
                cluster=w.cluster,
                kind=w.kind,
                cluster_cidr=str(w.cluster_cidr),
                message=w.message,
                detected_at=w.detected_at,
            )
            for w in detail.warnings
        ],
    )


def build_router(ctx: ServiceContext[NetdomainSettings, None]) -> APIRouter:
    pool = ctx.require_pool()
    router = APIRouter(prefix="/api/v1", tags=["network domains"], responses=error_responses(401))

    @router.get("/domains", response_model=DomainList)
    async def list_domains(
        _: CallerDep,
        page: PageNumber = 1,
        page_size: PageSize = 50,
    ) -> DomainList:
        """Network domains ordered by name (the first one is a job's default domain)."""
        result = await domains.list_domains(pool, page=page, page_size=page_size)
        return DomainList(
            items=[_out(s.domain, s.allocated, s.warnings) for s in result.items],
            total=result.total,
            page=result.page,
            page_size=result.page_size,
        )

    @router.post(
        "/domains", status_code=201, response_model=DomainDetailOut, responses=error_responses(403, 409)
    )
    async def create_domain(body: CreateDomainRequest, caller: AdminDep) -> DomainDetailOut:
        """Create a network domain: a private CIDR overlapping no cluster and no other domain."""
        domain = await domains.create_domain(pool, caller, body.name, body.cidr, body.description)
        return _detail(await domains.get_domain(pool, domain.name))

    @router.post("/domains:check", response_model=CheckOut)
    async def check_cidr(body: CheckRequest, _: CallerDep) -> CheckOut:
        """Would this CIDR be accepted for a new domain? For forms: always 200, with the reasons."""
        result = await domains.check_cidr(pool, body.cidr)
        error = result.error
        return CheckOut(
            ok=result.ok,
            cidr=result.cidr,
            capacity=result.capacity,
            conflicts=[
                ConflictOut(
                    kind=c.kind.value,
                    name=c.name,
                    cidr=str(c.cidr),
                    observed=c.observed,
                    message=c.message,
                    **said(c.message),
                )
                for c in result.conflicts
            ],
            error=ErrorOut(
                code=error.code.value, message=error.message, field=error.field, **said(error.message)
            )
            if error
            else None,
        )

    @router.get("/domains/{name}", response_model=DomainDetailOut, responses=error_responses(404))
    async def get_domain(name: str, _: CallerDep) -> DomainDetailOut:
        """A domain with its utilisation, tunnel topology and links' states, overlap warnings."""
        return _detail(await domains.get_domain(pool, name))

    @router.delete("/domains/{name}", status_code=204, responses=error_responses(403, 404, 409))
    async def delete_domain(name: str, _: AdminDep) -> Response:
        """Delete a domain; refused (409 domain_in_use) while addresses of it are allocated."""
        await domains.delete_domain(pool, name)
        return Response(status_code=204)

    return router


def build_api(ctx: ServiceContext[NetdomainSettings, None]) -> FastAPI:
    app = create_app(
        "netdomain",
        internal_secret=ctx.settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
    )
    app.include_router(build_router(ctx))
    return app
