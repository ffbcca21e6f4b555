"""HTTP API of the inventory service (reached through the gateway; see docs/api.md).

Every route needs a caller the gateway signed, except ``POST /api/v1/agent/session``, where the agent
credential itself is the authentication. Writes go through ``handlers`` (state + outbox in one
transaction); reads go straight to the repository, since they change nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

import asyncpg
from fastapi import APIRouter, FastAPI, Header, Query, Request, Response
from rlark_contracts import TopicNames
from rlark_contracts.messages import text
from rlark_platform.errors import ApiError, invalid, not_found
from rlark_platform.http import AdminDep, CallerDep, create_app, database_ready
from rlark_platform.messaging.access import agent_principal
from rlark_platform.messaging.provision import provision_agent, revoke_agent
from rlark_platform.openapi import error_responses
from rlark_platform.paging import PageNumber, PageSize
from rlark_platform.service import ServiceContext

from rlark_inventory import handlers
from rlark_inventory import repository as repo
from rlark_inventory.api.models import (
    AgentLeaseIn,
    AgentLeaseOut,
    AgentSessionOut,
    ClusterCreate,
    ClusterList,
    ClusterOut,
    ClusterPatch,
    ClusterWithCredential,
    CredentialOut,
    HostPathPolicy,
    HostPathPolicyOut,
    LabelCatalog,
    MatchOut,
    NodeDetail,
    NodeList,
    NodeOut,
    TotalsOut,
    WorkerOut,
)
from rlark_inventory.domain.clusters import ClusterSpec
from rlark_inventory.domain.errors import InvalidInput
from rlark_inventory.domain.labels import parse_selector
from rlark_inventory.settings import InventorySettings


def _sort(value: str, allowed: dict[str, str]) -> tuple[str, bool]:
    key, descending = (value[1:], True) if value.startswith("-") else (value, False)
    if key not in allowed:
        raise invalid("invalid_sort", text("invalid_sort", key=repr(key), allowed=", ".join(allowed)), "sort")
    return key, descending


def _selector(text: str | None) -> dict[str, str]:
    try:
        return parse_selector(text)
    except InvalidInput as exc:
        raise invalid(exc.code, exc.message, exc.field) from None


def _pool(request: Request) -> asyncpg.Pool:
    pool: asyncpg.Pool = request.app.state.pool
    return pool


def _settings(request: Request) -> InventorySettings:
    settings: InventorySettings = request.app.state.settings
    return settings


router = APIRouter(prefix="/api/v1", responses=error_responses(401))


# ---------------------------------------------------------------------------------------------- clusters


@router.get("/clusters", response_model=ClusterList)
async def list_clusters(
    request: Request, _: CallerDep, page: PageNumber = 1, page_size: PageSize = 50, sort: str = "name"
) -> ClusterList:
    key, descending = _sort(sort, repo.CLUSTER_SORTS)
    async with _pool(request).acquire() as conn:
        rows, total = await repo.list_clusters(
            conn, sort=key, descending=descending, limit=page_size, offset=(page - 1) * page_size
        )
        totals = await repo.totals(conn)
    return ClusterList(
        items=[ClusterOut.of(row, summary) for row, summary in rows],
        total=total,
        page=page,
        page_size=page_size,
        totals=TotalsOut.of_totals(totals),
    )


@router.post(
    "/clusters", status_code=201, response_model=ClusterWithCredential, responses=error_responses(403, 409)
)
async def register_cluster(request: Request, body: ClusterCreate, caller: AdminDep) -> ClusterWithCredential:
    spec = ClusterSpec(
        name=body.name,
        runtime=body.runtime,
        display_name=body.display_name,
        category=body.category,
        region=body.region,
        pod_cidrs=tuple(body.pod_cidrs),
        service_cidrs=tuple(body.service_cidrs),
        labels=body.labels,
        hostpath_allow=tuple(body.hostpath_allow),
    )
    created = await handlers.register_cluster(_pool(request), spec, caller)
    shown = ClusterOut.of(created.cluster).model_dump()
    return ClusterWithCredential(**shown, agent_credential=created.credential)


@router.get("/clusters/{name}", response_model=ClusterOut, responses=error_responses(404))
async def get_cluster(request: Request, name: str, _: CallerDep) -> ClusterOut:
    async with _pool(request).acquire() as conn:
        found = await repo.cluster_with_summary(conn, name)
    if found is None:
        raise not_found("cluster", name)
    return ClusterOut.of(*found)


@router.patch("/clusters/{name}", response_model=ClusterOut, responses=error_responses(403, 404))
async def update_cluster(request: Request, name: str, body: ClusterPatch, _: AdminDep) -> ClusterOut:
    changes = body.model_dump(exclude_none=True)
    row = await handlers.update_cluster(_pool(request), name, changes)
    return ClusterOut.of(row)


@router.get(
    "/clusters/{name}/hostpath-policy", response_model=HostPathPolicyOut, responses=error_responses(404)
)
async def get_hostpath_policy(request: Request, name: str, _: CallerDep) -> HostPathPolicyOut:
    """Which host directories workers of this cluster may mount (every user may read it)."""
    async with _pool(request).acquire() as conn:
        row = await repo.get_cluster(conn, name)
    if row is None:
        raise not_found("cluster", name)
    return HostPathPolicyOut(cluster=name, allow=list(row.spec.hostpath_allow))


@router.put(
    "/clusters/{name}/hostpath-policy", response_model=HostPathPolicyOut, responses=error_responses(403, 404)
)
async def set_hostpath_policy(
    request: Request, name: str, body: HostPathPolicy, _: AdminDep
) -> HostPathPolicyOut:
    """Replace the allow-list (admins only); jobs are checked against it from the next submission."""
    row = await handlers.update_cluster(_pool(request), name, {"hostpath_allow": body.allow})
    return HostPathPolicyOut(cluster=name, allow=list(row.spec.hostpath_allow))


@router.delete("/clusters/{name}", status_code=204, responses=error_responses(403, 404, 409))
async def delete_cluster(request: Request, name: str, _: AdminDep) -> Response:
    settings = _settings(request)

    async def revoke(cluster: str) -> None:
        await revoke_agent(settings.kafka_access(), TopicNames(settings.topic_prefix), cluster)

    await handlers.delete_cluster(_pool(request), name, revoke)
    return Response(status_code=204)


@router.post("/clusters/{name}/credential", response_model=CredentialOut, responses=error_responses(403, 404))
async def rotate_credential(request: Request, name: str, _: AdminDep) -> CredentialOut:
    rotated = await handlers.rotate_credential(_pool(request), name, _agent_provisioner(_settings(request)))
    return CredentialOut(
        cluster=name, agent_credential=rotated.credential, rotated_at=rotated.cluster.credential_rotated_at
    )


@router.get("/clusters/{name}/match", response_model=MatchOut, responses=error_responses(404))
async def match_nodes(
    request: Request,
    name: str,
    _: CallerDep,
    selector: str = "",
    gpus: Annotated[int, Query(ge=0, le=1024, description="Free GPUs a node must have")] = 0,
) -> MatchOut:
    result = await handlers.match(_pool(request), name, _selector(selector), gpus)
    return MatchOut.of(name, result)


# ------------------------------------------------------------------------------------------------- nodes


@router.get("/nodes", response_model=NodeList)
async def list_nodes(
    request: Request,
    _: CallerDep,
    cluster: str | None = None,
    status: Literal["ready", "not_ready", "cordoned", "gone"] | None = None,
    category: str | None = None,
    selector: str | None = None,
    q: Annotated[str | None, Query(max_length=200, description="Text in name, addresses or labels")] = None,
    sort: str = "cluster",
    page: PageNumber = 1,
    page_size: PageSize = 50,
) -> NodeList:
    key, descending = _sort(sort, repo.NODE_SORTS)
    flt = repo.NodeFilter(
        cluster=cluster or None,
        status=status,
        category=category or None,
        selector=_selector(selector) or None,
        q=(q or "").strip() or None,
    )
    async with _pool(request).acquire() as conn:
        rows, total = await repo.list_nodes(
            conn, flt, sort=key, descending=descending, limit=page_size, offset=(page - 1) * page_size
        )
    return NodeList(items=[NodeOut.of(r) for r in rows], total=total, page=page, page_size=page_size)


@router.get("/clusters/{cluster}/nodes/{node}", response_model=NodeDetail, responses=error_responses(404))
async def get_node(request: Request, cluster: str, node: str, _: CallerDep) -> NodeDetail:
    async with _pool(request).acquire() as conn:
        row = await repo.get_node(conn, cluster, node)
        if row is None:
            if not await repo.cluster_exists(conn, cluster):
                raise not_found("cluster", cluster)
            raise not_found("node", f"{cluster}/{node}")
        workers = await repo.active_workers_on(conn, cluster, node)
    return NodeDetail.model_validate(
        {
            **NodeOut.fields_of(row),
            "workers": [
                WorkerOut(worker_id=w.worker_id, job_id=w.job_id, phase=w.phase, reported_at=w.reported_at)
                for w in workers
            ],
        }
    )


@router.post(
    "/clusters/{cluster}/nodes/{node}/cordon",
    status_code=202,
    response_model=NodeOut,
    responses=error_responses(403, 404, 409),
)
async def cordon(request: Request, cluster: str, node: str, caller: AdminDep) -> NodeOut:
    return NodeOut.of(await handlers.request_cordon(_pool(request), cluster, node, True, caller))


@router.post(
    "/clusters/{cluster}/nodes/{node}/uncordon",
    status_code=202,
    response_model=NodeOut,
    responses=error_responses(403, 404, 409),
)
async def uncordon(request: Request, cluster: str, node: str, caller: AdminDep) -> NodeOut:
    return NodeOut.of(await handlers.request_cordon(_pool(request), cluster, node, False, caller))


@router.get("/labels", response_model=LabelCatalog)
async def labels(request: Request, _: CallerDep, cluster: str | None = None) -> LabelCatalog:
    async with _pool(request).acquire() as conn:
        counts = await repo.label_catalog(conn, cluster or None)
    return LabelCatalog.of(counts)


# ------------------------------------------------------------------------------------------------ agents


@router.post("/agent/session", response_model=AgentSessionOut)
async def agent_session(
    request: Request, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> AgentSessionOut:
    """Trade the cluster's agent credential (``Authorization: Bearer rlark-agent-...``) for an agent
    token and the Kafka coordinates the agent publishes its reports to."""
    scheme, _, credential = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise ApiError(401, "invalid_credential", text("invalid_credential.header"))
    settings = _settings(request)
    session = await handlers.open_agent_session(
        _pool(request),
        credential.strip(),
        internal_secret=settings.internal_secret.get_secret_value(),
        ttl_s=settings.agent_token_ttl_s,
        provision=_agent_provisioner(settings),
    )
    return AgentSessionOut(
        cluster=session.cluster,
        token=session.token,
        expires_at=session.expires_at,
        kafka_bootstrap=settings.agent_kafka_bootstrap or settings.kafka_bootstrap,
        kafka_username=agent_principal(settings.topic_prefix, session.cluster),
        kafka_password=session.kafka_password,
        topic_prefix=settings.topic_prefix,
    )


@router.post("/agent/lease", response_model=AgentLeaseOut)
async def agent_lease(
    request: Request,
    body: AgentLeaseIn,
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> AgentLeaseOut:
    """Take, renew or release the agent lease of the cluster named by the agent token
    (``Authorization: Bearer <token from /agent/session>``): one active agent per cluster (ADR 0018)."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "invalid_credential", text("invalid_credential.header"))
    settings = _settings(request)
    ttl_s = settings.agent_lease_ttl_s
    grant = await handlers.agent_lease(
        _pool(request),
        token.strip(),
        body.holder,
        internal_secret=settings.internal_secret.get_secret_value(),
        ttl_s=ttl_s,
        release=body.release,
    )
    return AgentLeaseOut(
        cluster=grant.cluster,
        held=grant.held,
        holder=grant.holder,
        epoch=grant.epoch,
        expires_in_s=grant.expires_in_s,
        ttl_s=ttl_s,
    )


def _agent_provisioner(settings: InventorySettings) -> handlers.AgentProvisioner:
    """The broker side of agent sessions and rotations: the agent's Kafka principal and ACLs exist
    before it learns its password (ADR 0004), derived from the internal secret and the credential's
    epoch, so nothing is stored, a renewal hands out the same and a rotation a new one."""

    async def provision(cluster: str, epoch: str) -> str:
        return await provision_agent(
            settings.kafka_access(),
            TopicNames(settings.topic_prefix),
            settings.internal_secret.get_secret_value(),
            cluster,
            epoch=epoch,
            layout=settings.topic_layout(),
        )

    return provision


def build_api(ctx: ServiceContext[InventorySettings, None]) -> FastAPI:
    settings = ctx.settings
    app = create_app(
        "inventory",
        internal_secret=settings.internal_secret.get_secret_value(),
        ready_checks=[database_ready(ctx.require_pool())],
    )
    app.state.pool = ctx.require_pool()
    app.state.settings = settings
    app.include_router(router)
    return app
