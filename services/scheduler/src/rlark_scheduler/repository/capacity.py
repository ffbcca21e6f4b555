"""The capacity model as the tables state it: the one :class:`CapacityModel` the placement loop
decides on, and the one submission's checks ask (issue 16: one feasibility engine).

:func:`capacity_model` builds it whole — nodes with the GPUs others use on them, offline clusters,
the allocations of every job that holds capacity — for every cluster (the placement loop's rebuild)
or for a job's clusters only (a submission's check, built once per check). :func:`capacity_node`
is a stored node as the model sees it; the placement loop also uses it to apply node changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlark_platform.db.pool import Connection

from rlark_scheduler.domain.capacity import CapacityModel, NodeState, gpus_used_by_others
from rlark_scheduler.repository.read_models import (
    NodeRow,
    all_nodes,
    cluster_facts,
    domain_clusters,
    nodes_of_clusters,
    offline_clusters,
)
from rlark_scheduler.repository.tunnels import round_trips
from rlark_scheduler.repository.workers import allocations


def used_by_others(node: NodeRow) -> int:
    """GPUs of ``node`` that the scheduler's allocations do not account for (``gpus_used_by_others``)."""
    return gpus_used_by_others(node.gpu_allocated, node.gpu_allocated_foreign, node.present_gpus)


def capacity_node(node: NodeRow) -> NodeState:
    """The capacity model's view of a stored node: its GPUs minus what others use (the scheduler's
    own allocations are authoritative for its own workers and are held in the model; see
    ``domain.capacity.gpus_used_by_others`` for the rest)."""
    return NodeState(
        cluster=node.cluster,
        name=node.name,
        labels=node.labels,
        ready=node.ready,
        schedulable=node.schedulable,
        gpu_allocatable=max(node.gpu_allocatable, 0),
        gpu_used_external=used_by_others(node),
        gone=node.gone,
        gpu_model=node.gpu_model,
    )


async def capacity_model(conn: Connection, clusters: Sequence[str] | None = None) -> CapacityModel:
    """The model of every cluster, or of ``clusters`` only, as the tables hold it now — with the clusters'
    facts, the network domains and the measured round trips the placer chooses clusters by (ADR 0026)."""
    if clusters is None:
        nodes = await all_nodes(conn)
    else:
        nodes = await nodes_of_clusters(conn, clusters)
    offline = [c for c in await offline_clusters(conn) if clusters is None or c in clusters]
    model = CapacityModel.from_nodes((capacity_node(n) for n in nodes), offline=offline)
    for job_id, held in (await allocations(conn, clusters)).items():
        model.allocate(job_id, held)
    await load_choices(conn, model, clusters)
    return model


async def load_choices(conn: Connection, model: CapacityModel, clusters: Sequence[str] | None = None) -> None:
    """Give ``model`` what the placer chooses clusters by: the facts of ``clusters`` (every one when None),
    every network domain with the clusters it joins, every measured round trip."""
    for name, facts in (await cluster_facts(conn, clusters)).items():
        model.set_cluster_facts(name, facts)
    model.set_domains(await domain_clusters(conn))
    for (a, b), rtt in (await round_trips(conn)).items():
        model.set_round_trip(a, b, rtt)
