"""``rlark nodes list | show | match | cordon | uncordon``: the nodes the clusters' agents report.

Filters mirror the console: ``--cluster``, ``--status`` (ready, not_ready, cordoned, gone),
``--category`` (the cluster's), ``--selector k=v,k2=v2`` (the labels a job's node selector would use)
and ``-q`` free text over names, addresses and labels. Cordoning reaches the cluster's agent; the node
shows as cordoned once the agent reports it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import quote

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Column, Format, OutputOpt, emit, gpus_in_use, print_text

app = typer.Typer(
    help="Nodes of the clusters: list, inspect, match selectors, cordon (admins).", no_args_is_help=True
)

ClusterArg = Annotated[str, typer.Argument(metavar="CLUSTER", help="The node's cluster")]
NodeArg = Annotated[str, typer.Argument(metavar="NODE", help="The node's name")]


class Status(StrEnum):
    ready = "ready"
    not_ready = "not_ready"
    cordoned = "cordoned"
    gone = "gone"


def gib(value: Any) -> str:
    return f"{int(value or 0) / (1 << 30):.0f}Gi"


def cores(millis: Any) -> str:
    return f"{int(millis or 0) / 1000:g}"


def _status(node: dict[str, Any]) -> str:
    pending = node.get("cordon_requested")
    if pending is None:
        return str(node.get("status"))
    return f"{node.get('status')} ({'cordon' if pending else 'uncordon'} pending)"


def _gpus(node: dict[str, Any]) -> str:
    """Free of allocatable GPUs, and the model: ``6/8 A100``."""
    if not node.get("gpu_count"):
        return "-"
    total = node.get("gpu_allocatable", node.get("gpu_count"))
    return f"{node.get('gpu_free')}/{total} {node.get('gpu_model') or ''}".strip()


COLUMNS: list[Column] = [
    ("CLUSTER", "cluster"),
    ("NAME", "name"),
    ("STATUS", _status),
    ("GPUS FREE", _gpus),
    ("CPU", lambda n: f"{cores(n.get('cpu_allocatable_millis'))} cores"),
    ("MEMORY", lambda n: gib(n.get("memory_allocatable_bytes"))),
    ("ADDRESS", lambda n: (n.get("addresses") or ["-"])[0]),
    ("LABELS", "labels"),
]


@app.command("list")
def list_nodes(
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Only this cluster")] = None,
    selector: Annotated[
        str | None, typer.Option("--selector", "-l", help="Labels, e.g. rlark.io/gpu-model=A100,zone=z1")
    ] = None,
    status: Annotated[
        Status | None, typer.Option("--status", help="ready, not_ready, cordoned or gone")
    ] = None,
    category: Annotated[
        str | None, typer.Option("--category", help="The cluster's category, e.g. cloud")
    ] = None,
    query: Annotated[
        str | None, typer.Option("--query", "-q", help="Text in the name, an address or a label")
    ] = None,
    sort: Annotated[
        str,
        typer.Option(
            help="cluster, name, status, gpu_count, gpu_free, gpu_allocated, gpu_model, cpu, memory, "
            "observed_at; "
            "-field for descending"
        ),
    ] = "cluster",
    page: Annotated[int, typer.Option(min=1, help="Page number")] = 1,
    page_size: Annotated[int, typer.Option(min=1, max=500, help="Nodes per page")] = 50,
    output: OutputOpt = Format.table,
) -> None:
    """List nodes with status, free GPUs (of the allocatable), resources and labels.

    Free = allocatable − what every pod or worker on the node holds now, RLark's and others'
    (`gpu_allocated`; `gpu_allocated_foreign`: workloads RLark did not place) — see `-o json`."""
    params: dict[str, str | int] = {"sort": sort, "page": page, "page_size": page_size}
    for key, value in (("cluster", cluster), ("selector", selector), ("category", category), ("q", query)):
        if value:
            params[key] = value
    if status is not None:
        params["status"] = status.value
    gateway = Gateway()
    found = gateway.get("/api/v1/nodes", params=params)
    if cluster and not found.get("items"):
        gateway.get(f"/api/v1/clusters/{quote(cluster, safe='')}")  # an unknown cluster is refused, named
    emit(found, output, COLUMNS)


@app.command("show")
def show(cluster: ClusterArg, node: NodeArg, output: OutputOpt = Format.table) -> None:
    """Show one node: resources (capacity, allocatable, allocated), GPUs, labels, addresses, workers."""
    detail = Gateway().get(f"/api/v1/clusters/{cluster}/nodes/{node}")
    if output is not Format.table:
        emit(detail, output)
        return
    workers = detail.pop("workers", [])
    emit(detail, output)
    if workers:
        emit(
            workers,
            output,
            [("WORKER", "worker_id"), ("JOB", "job_id"), ("PHASE", "phase"), ("SINCE", "reported_at")],
            title="workers",
        )
    else:
        print_text("no workers on this node")


@app.command("match")
def match(
    cluster: ClusterArg,
    selector: Annotated[
        str, typer.Option("--selector", "-l", help="Labels, e.g. rlark.io/gpu-model=A100")
    ] = "",
    gpus: Annotated[int, typer.Option(min=0, help="Free GPUs a node must have")] = 0,
    output: OutputOpt = Format.table,
) -> None:
    """How many nodes of CLUSTER a selector matches, and how many are ready, schedulable, with the GPUs."""
    result = Gateway().get(f"/api/v1/clusters/{cluster}/match", params={"selector": selector, "gpus": gpus})
    if output is not Format.table:
        emit(result, output)
        return
    print_text(
        f"{result['total']} nodes → {result['matching']} match → {result['ready']} ready → "
        f"{result['schedulable']} schedulable → {result['with_free_gpus']} with ≥ {gpus} free GPUs"
    )
    emit(
        result["nodes"],
        output,
        [
            ("NAME", "name"),
            ("READY", "ready"),
            ("SCHEDULABLE", "schedulable"),
            ("GPU", "gpu_model"),
            ("FREE", lambda n: f"{n.get('gpu_free')}/{n.get('gpu_allocatable', '-')}"),
            ("IN USE", lambda n: gpus_in_use(n.get("gpu_allocated"), n.get("gpu_allocated_foreign"))),
            ("FITS", "fits"),
        ],
    )


def _cordon(cluster: str, node: str, cordoned: bool, output: Format) -> None:
    path = f"/api/v1/clusters/{cluster}/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"
    result = Gateway().post(path)
    if output is not Format.table:
        emit(result, output)
        return
    verb = "cordon" if cordoned else "uncordon"
    if result.get("cordon_requested") is None:
        print_text(f"node {cluster}/{node} is already {'cordoned' if cordoned else 'schedulable'}")
    else:
        print_text(
            f"{verb} of {cluster}/{node} sent to the cluster's agent; "
            "`rlark nodes show` shows it once the agent applied it"
        )


@app.command("cordon")
def cordon(cluster: ClusterArg, node: NodeArg, output: OutputOpt = Format.table) -> None:
    """Mark a node unschedulable (admins): no new workers land on it."""
    _cordon(cluster, node, True, output)


@app.command("uncordon")
def uncordon(cluster: ClusterArg, node: NodeArg, output: OutputOpt = Format.table) -> None:
    """Make a cordoned node schedulable again (admins)."""
    _cordon(cluster, node, False, output)
