"""Helpers for the scheduler's integration tests: the other services and the agents, simulated by
publishing their events on the test's prefixed topics exactly as they would, a topic reader, job
documents, and polling until the service shows what a test waits for."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import asyncpg
import httpx
import yaml
from aiokafka import AIOKafkaProducer
from pydantic import BaseModel
from rlark_contracts import Envelope, TopicNames, encode, new_envelope, topic_for
from rlark_contracts.events.agent import WorkerLogsEmitted, WorkerOutputsListed, WorkerStatusChanged
from rlark_contracts.events.inventory import ClusterWentOffline, ClusterWentOnline, NodeUpdated
from rlark_contracts.events.keys import KeyAdded, KeyDeleted, SecretSet
from rlark_contracts.events.netdomain import (
    AddressAllocationFailed,
    AddressesAllocated,
    AddressesReleased,
    DomainCreated,
    WorkerAddress,
)
from rlark_devinfra.testing import RunningService, TopicReader

T = TypeVar("T")

IMAGE = "registry.example.com/rlinf/rlinf:v0.3.0"
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1q0B2m1QeW2cF5k7q3j3XzZbqk1bq0S4mJ3x9YbQm alice@laptop"


class World:
    """Publishes what inventory, keys, netdomain and the agents would, on the test's topics."""

    def __init__(self, producer: AIOKafkaProducer, names: TopicNames) -> None:
        self.producer = producer
        self.names = names

    async def publish(
        self,
        data: BaseModel,
        subject: str,
        *,
        source: str,
        causation_id: str | None = None,
        topic: str | None = None,
    ) -> Envelope:
        """Publish ``data`` on its topic (a per-cluster one: of the cluster its data names), or on ``topic``."""
        envelope = new_envelope(data, source=source, subject=subject, causation_id=causation_id)
        await self.producer.send_and_wait(
            topic or self.names.physical(topic_for(envelope)), value=encode(envelope), key=subject.encode()
        )
        return envelope

    # -- inventory ------------------------------------------------------------------------------

    async def cluster(
        self,
        name: str,
        *,
        online: bool = True,
        runtime: str = "kubernetes",
        hostpath_allow: Sequence[str] = (),
        labels: dict[str, str] | None = None,
        region: str = "",
    ) -> None:
        kind = ClusterWentOnline if online else ClusterWentOffline
        state = kind(
            name=name,
            runtime=runtime,
            online=online,
            last_seen=datetime.now(UTC),
            hostpath_allow=list(hostpath_allow),
            labels=labels or {},
            region=region,
        )
        await self.publish(
            state,
            name,
            source="inventory",
        )

    async def node(
        self,
        cluster: str,
        name: str,
        *,
        gpus: int = 8,
        gpu_allocated: int = 0,
        labels: dict[str, str] | None = None,
        ready: bool = True,
        schedulable: bool = True,
        gone: bool = False,
        address: str = "",
        gpu_model: str = "A100",
    ) -> None:
        await self.publish(
            NodeUpdated(
                cluster=cluster,
                name=name,
                ready=ready,
                schedulable=schedulable,
                gone=gone,
                gpu_count=gpus,
                gpu_model=gpu_model,
                gpu_allocatable=gpus,
                gpu_allocated=gpu_allocated,
                labels=labels if labels is not None else {"rlark.io/gpu-model": "A100"},
                addresses=[address or f"192.168.{len(cluster)}.{abs(hash(name)) % 250 + 1}"],
                observed_at=datetime.now(UTC),
            ),
            f"{cluster}/{name}",
            source="inventory",
        )

    # -- keys and netdomain ---------------------------------------------------------------------

    async def key(self, owner: str, name: str, public_key: str = PUBLIC_KEY, *, deleted: bool = False) -> str:
        key_id = f"{owner}-{name}"
        kind = KeyDeleted if deleted else KeyAdded
        await self.publish(
            kind(
                key_id=key_id,
                owner=owner,
                name=name,
                key_type="ssh-ed25519",
                fingerprint=f"SHA256:{name}",
                public_key=public_key,
            ),
            key_id,
            source="keys",
        )
        return key_id

    async def secret(self, owner: str, name: str, version: int = 1) -> str:
        """A user's secret as the keys service announces it (its name and version, never a value)."""
        secret_id = f"{owner}-{name}"
        await self.publish(
            SecretSet(secret_id=secret_id, scope="user", owner=owner, name=name, version=version),
            secret_id,
            source="keys",
        )
        return secret_id

    async def domain(self, name: str, cidr: str, clusters: Sequence[str] = ()) -> None:
        """A domain, joining ``clusters`` (every cluster when empty)."""
        await self.publish(
            DomainCreated(name=name, cidr=cidr, clusters=list(clusters)), name, source="netdomain"
        )

    async def allocate(self, request: Envelope, cidr: str, first_host: int = 2) -> dict[str, str]:
        """Answer an ``addresses_requested`` event the way netdomain does (causation = request id)."""
        data = request.data
        base = cidr.split("/")[0].rsplit(".", 1)[0]
        addresses = {w["worker_id"]: f"{base}.{first_host + i}" for i, w in enumerate(data["workers"])}
        await self.publish(
            AddressesAllocated(
                job_id=data["job_id"],
                domain=data["domain"],
                cidr=cidr,
                addresses=[
                    WorkerAddress(
                        worker_id=w["worker_id"], cluster=w["cluster"], address=addresses[w["worker_id"]]
                    )
                    for w in data["workers"]
                ],
            ),
            data["job_id"],
            source="netdomain",
            causation_id=request.id,
        )
        return addresses

    async def refuse_allocation(self, request: Envelope, code: str, reason: str) -> None:
        data = request.data
        await self.publish(
            AddressAllocationFailed(job_id=data["job_id"], domain=data["domain"], code=code, reason=reason),
            data["job_id"],
            source="netdomain",
            causation_id=request.id,
        )

    async def released(self, job_id: str, domain: str) -> None:
        await self.publish(AddressesReleased(job_id=job_id, domain=domain), job_id, source="netdomain")

    # -- agents ---------------------------------------------------------------------------------

    async def report(
        self, data: BaseModel, cluster: str, *, on: str | None = None, source: str | None = None
    ) -> Envelope:
        """``data`` as ``cluster``'s agent reports it, on its topic ``agent.reports.<cluster>``; ``on`` and
        ``source`` write it on another cluster's topic, or as another source (the broker's admin can)."""
        topic = self.names.for_cluster("agent.reports", on or cluster)
        return await self.publish(data, cluster, source=source or f"agent/{cluster}", topic=topic)

    async def worker(self, placed: dict[str, Any], phase: str, **fields: Any) -> Envelope:
        cluster = fields.pop("cluster", placed["cluster"])
        on, source = fields.pop("on", None), fields.pop("source", None)
        return await self.report(
            WorkerStatusChanged(
                cluster=cluster,
                job_id=placed["job_id"],
                worker_id=placed["worker_id"],
                node=placed["node"],
                phase=phase,
                at=datetime.now(UTC),
                **fields,
            ),
            cluster,
            on=on,
            source=source,
        )

    async def logs(self, placed: dict[str, Any], first_seq: int, lines: list[str]) -> None:
        await self.report(
            WorkerLogsEmitted(
                cluster=placed["cluster"],
                job_id=placed["job_id"],
                worker_id=placed["worker_id"],
                first_seq=first_seq,
                lines=lines,
            ),
            placed["cluster"],
        )

    async def outputs(self, placed: dict[str, Any], files: list[tuple[str, int]]) -> None:
        await self.report(
            WorkerOutputsListed.model_validate(
                {
                    "cluster": placed["cluster"],
                    "job_id": placed["job_id"],
                    "worker_id": placed["worker_id"],
                    "files": [{"path": p, "size": s} for p, s in files],
                }
            ),
            placed["cluster"],
        )

    async def bring_up(self, placed: list[dict[str, Any]]) -> None:
        """Every worker created and joined, the Header's run script started."""
        header = next(p for p in placed if p["is_header"])
        for p in placed:
            await self.worker(p, "Created")
        for p in placed:
            if not p["is_header"]:
                await self.worker(p, "Joined", address=f"10.9.0.{p['rank'] + 1}")
        await self.worker(
            header,
            "Running",
            ray_nodes_joined=len(placed),
            ray_nodes_expected=len(placed),
            address="10.9.0.1",
        )


# ------------------------------------------------------------------------------------------- documents


def role(name: str, cluster: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "cluster": cluster, "image": IMAGE, **fields}


def job_doc(
    *roles: dict[str, Any], header: str | None = None, name: str = "it job", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "header": header or roles[0]["name"],
            "runScript": "python train.py\n",
            "tasks": list(roles),
            **spec,
        },
    }


def as_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


async def submit(client: httpx.AsyncClient, doc: dict[str, Any] | str) -> httpx.Response:
    if isinstance(doc, str):
        return await client.post("/api/v1/jobs", content=doc, headers={"Content-Type": "application/yaml"})
    return await client.post("/api/v1/jobs", json=doc)


async def submitted(svc: RunningService, doc: dict[str, Any], user: str = "alice") -> dict[str, Any]:
    async with svc.client(user) as client:
        response = await submit(client, doc)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


async def get_job(svc: RunningService, job_id: str, user: str = "alice") -> dict[str, Any]:
    async with svc.client(user) as client:
        response = await client.get(f"/api/v1/jobs/{job_id}")
    assert response.status_code == 200, response.text
    job: dict[str, Any] = response.json()
    return job


async def job_status(
    svc: RunningService, job_id: str, status: str, timeout_s: float = 20.0
) -> dict[str, Any]:
    return await eventually(
        lambda: get_job(svc, job_id), lambda j: j["status"] == status, timeout_s=timeout_s
    )


# ------------------------------------------------------------------------------------------- waiting


async def eventually(
    probe: Callable[[], Awaitable[T]], until: Callable[[T], bool], *, timeout_s: float = 20.0
) -> T:
    """Call ``probe`` until ``until(result)`` holds; fail with the last result after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = await probe()
        if until(result):
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s; last result: {result!r}")
        await asyncio.sleep(0.05)


async def synced(database_url: str, sql: str, *args: Any, expect: Any, timeout_s: float = 20.0) -> None:
    """Wait until the scheduler's consumers stored what a test published (``sql`` returns ``expect``)."""
    conn = await asyncpg.connect(database_url)
    try:
        await eventually(lambda: conn.fetchval(sql, *args), lambda v: v == expect, timeout_s=timeout_s)
    finally:
        await conn.close()


async def nodes_synced(database_url: str, cluster: str, count: int) -> None:
    await synced(database_url, "SELECT count(*) FROM nodes WHERE cluster = $1", cluster, expect=count)


def placed_count(job_id: str, count: int) -> Callable[[list[Envelope]], bool]:
    return lambda events: (
        sum(e.type == "scheduler.worker.placed.v1" and e.subject == job_id for e in events) >= count
    )


def has_event(event_type: str, job_id: str, **fields: Any) -> Callable[[list[Envelope]], bool]:
    def check(events: list[Envelope]) -> bool:
        return any(
            e.type == event_type
            and e.data.get("job_id") == job_id
            and all(e.data.get(k) == v for k, v in fields.items())
            for e in events
        )

    return check


async def start_job(
    scheduler: RunningService,
    world: World,
    placements: TopicReader,
    database_url: str,
    *,
    rollouts: int = 2,
    nodes: int = 3,
    **spec: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A cluster with ``nodes`` nodes and a placed job: an actor Header plus ``rollouts`` workers."""
    await world.cluster("gpu-a")
    for i in range(nodes):
        await world.node("gpu-a", f"n{i}")
    await nodes_synced(database_url, "gpu-a", nodes)
    doc = job_doc(
        role("actor", "gpu-a", gpusPerWorker=8),
        role("rollout", "gpu-a", replicas=rollouts, gpusPerWorker=8),
        header="actor",
        **spec,
    )
    job = await submitted(scheduler, doc)
    await placements.until(placed_count(job["id"], rollouts + 1))
    placed = sorted(placements.of("scheduler.worker.placed.v1", job["id"]), key=lambda p: p["rank"])
    return job, placed


def stops_for(placements: TopicReader, job_id: str) -> set[str]:
    return {s["worker_id"] for s in placements.of("scheduler.worker.stop_requested.v1", job_id)}


def sse_events(text: str) -> list[dict[str, Any]]:
    """Parse a server-sent events body into ``{event, id, data}`` dicts (data JSON-decoded)."""
    found: list[dict[str, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":") or ":" not in line:
                continue
            field, _, value = line.partition(":")
            event[field] = value.removeprefix(" ")
        if "data" in event:
            with contextlib.suppress(ValueError):
                event["data"] = json.loads(event["data"])
            found.append(event)
    return found
