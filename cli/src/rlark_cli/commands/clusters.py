"""``rlark clusters list | show | register | update | rm | rotate-credential | hostpaths``: the GPU clusters.

Registering a cluster (admins) prints its agent credential once: the cluster's tunnel-agent needs it to
open sessions, and the server keeps only a hash of it, so store it right away (e.g. in the agent's
Kubernetes Secret). ``rotate-credential`` issues a new one and retires the old.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rlark_cli.client import Gateway, err, fail
from rlark_cli.commands import hostpaths
from rlark_cli.output import Column, Format, OutputOpt, emit, gpus_in_use, print_text

app = typer.Typer(help="GPU clusters: list, inspect, register (admins).", no_args_is_help=True)
app.add_typer(hostpaths.app, name="hostpaths")

ClusterName = Annotated[
    str, typer.Argument(metavar="CLUSTER", help="The cluster's name (see rlark clusters list)")
]


def _summary(item: dict[str, Any], key: str) -> Any:
    return (item.get("summary") or {}).get(key)


def _since(value: Any) -> str:
    return str(value or "-")[:19].replace("T", " ")


COLUMNS: list[Column] = [
    ("NAME", "name"),
    ("CATEGORY", "category"),
    ("REGION", "region"),
    ("RUNTIME", "runtime"),
    ("ONLINE", "online"),
    ("NODES ONLINE", lambda c: f"{_summary(c, 'nodes_online')}/{_summary(c, 'nodes_total')}"),
    ("GPUS FREE", lambda c: f"{_summary(c, 'gpus_free')}/{_summary(c, 'gpus_allocatable')}"),
    (
        "GPUS IN USE",
        lambda c: gpus_in_use(_summary(c, "gpus_allocated"), _summary(c, "gpus_allocated_foreign")),
    ),
    ("JOBS", lambda c: _summary(c, "running_jobs")),
    ("LAST SEEN", lambda c: _since(c.get("last_seen"))),
]


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from repeated ``--label`` options; usage error on a pair without ``=``."""
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--label")
        labels[key.strip()] = value.strip()
    return labels


def _show_credential(cluster: str, credential: str) -> None:
    print_text(("agent credential", "bold"), f"  {credential}")
    print_text(
        ("warning:", "bold yellow"),
        " this credential is shown once and cannot be retrieved later. Store it "
        f"now where the tunnel-agent of {cluster!r} reads it (e.g. a Kubernetes Secret); "
        "`rlark clusters rotate-credential` issues a new one.",
        console=err,
    )


def _credential_warning() -> None:
    print_text(("warning:", "bold yellow"), " the agent credential is shown once; store it now.", console=err)


@app.command("list")
def list_clusters(
    sort: Annotated[
        str,
        typer.Option(
            help="name, category, region, online, last_seen, nodes, gpus, gpus_free, gpus_allocated; "
            "-field for descending"
        ),
    ] = "name",
    page: Annotated[int, typer.Option(min=1, help="Page number")] = 1,
    page_size: Annotated[int, typer.Option(min=1, max=500, help="Clusters per page")] = 50,
    output: OutputOpt = Format.table,
) -> None:
    """List clusters with their node, GPU and job summary, and the totals of every cluster.

    GPUs free count where a worker could land now (ready, schedulable nodes of online clusters); GPUs in
    use are what every pod or worker holds now ("others": workloads RLark did not place)."""
    params: dict[str, str | int] = {"sort": sort, "page": page, "page_size": page_size}
    listing = Gateway().get("/api/v1/clusters", params=params)
    emit(listing, output, COLUMNS)
    if output is Format.table and listing.get("totals"):
        print_text(totals_line(listing["totals"]))


def totals_line(totals: dict[str, Any]) -> str:
    """The overview in one line: clusters, nodes, GPUs free and in use, running jobs."""
    return (
        f"all clusters: {totals['clusters_online']}/{totals['clusters']} online, "
        f"{totals['nodes_online']}/{totals['nodes_total']} nodes online, "
        f"GPUs {totals['gpus_free']} free of {totals['gpus_allocatable']}, "
        f"{gpus_in_use(totals['gpus_allocated'], totals['gpus_allocated_foreign'])} in use, "
        f"{totals['running_jobs']} running jobs"
    )


@app.command("show")
def show(cluster: ClusterName, output: OutputOpt = Format.table) -> None:
    """Show one cluster: declared fields, health and summary."""
    emit(Gateway().get(f"/api/v1/clusters/{cluster}"), output)


@app.command("register")
def register(
    name: Annotated[str, typer.Argument(help="DNS label: lower-case letters, digits and '-'")],
    runtime: Annotated[str, typer.Option(help="kubernetes or local")] = "kubernetes",
    display_name: Annotated[str, typer.Option("--display-name", help="Human-friendly name")] = "",
    category: Annotated[str, typer.Option(help="e.g. cloud, edge, on-prem")] = "",
    region: Annotated[str, typer.Option(help="e.g. cn-north-1")] = "",
    pod_cidr: Annotated[
        list[str] | None, typer.Option("--pod-cidr", help="Pod network (repeatable), e.g. 10.244.0.0/16")
    ] = None,
    service_cidr: Annotated[
        list[str] | None,
        typer.Option("--service-cidr", help="Service network (repeatable), e.g. 10.96.0.0/12"),
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE (repeatable)")] = None,
    hostpath: Annotated[
        list[str] | None,
        typer.Option("--allow-hostpath", help="Host directory workers may mount (repeatable; default none)"),
    ] = None,
    output: OutputOpt = Format.table,
) -> None:
    """Register a cluster (admins) and print its agent credential — once."""
    body = {
        "name": name,
        "runtime": runtime,
        "display_name": display_name,
        "category": category,
        "region": region,
        "pod_cidrs": pod_cidr or [],
        "service_cidrs": service_cidr or [],
        "labels": parse_labels(label),
        "hostpath_allow": hostpath or [],
    }
    created = Gateway().post("/api/v1/clusters", json=body)
    if output is not Format.table:
        emit(created, output)  # scripts get the credential in the document
        _credential_warning()
        return
    credential = created.pop("agent_credential", "")
    created.pop("summary", None)
    emit(created, output)
    _show_credential(name, credential)


@app.command("update")
def update(
    cluster: ClusterName,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    category: Annotated[str | None, typer.Option()] = None,
    region: Annotated[str | None, typer.Option()] = None,
    pod_cidr: Annotated[
        list[str] | None, typer.Option("--pod-cidr", help="Replaces all pod networks")
    ] = None,
    service_cidr: Annotated[
        list[str] | None, typer.Option("--service-cidr", help="Replaces all service networks")
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="KEY=VALUE; replaces all labels")
    ] = None,
    output: OutputOpt = Format.table,
) -> None:
    """Change a cluster's declared fields (admins). Name and runtime cannot change."""
    body: dict[str, Any] = {
        "display_name": display_name,
        "category": category,
        "region": region,
        "pod_cidrs": pod_cidr,
        "service_cidrs": service_cidr,
        "labels": parse_labels(label) if label is not None else None,
    }
    changes = {k: v for k, v in body.items() if v is not None}
    if not changes:
        fail("nothing to change; see rlark clusters update --help", 2)
    emit(Gateway().patch(f"/api/v1/clusters/{cluster}", json=changes), output)


@app.command("rm")
def remove(
    cluster: ClusterName,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
) -> None:
    """Delete a cluster (admins); refused while workers run on it."""
    if not yes:
        typer.confirm(f"Delete cluster {cluster!r} and forget its nodes?", abort=True)
    Gateway().delete(f"/api/v1/clusters/{cluster}")
    print_text(f"cluster {cluster} deleted")


@app.command("rotate-credential")
def rotate_credential(
    cluster: ClusterName,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation")] = False,
    output: OutputOpt = Format.table,
) -> None:
    """Issue a new agent credential (admins); the old one opens no new agent session."""
    if not yes:
        typer.confirm(f"Rotate the agent credential of {cluster!r}? Its agent needs the new one.", abort=True)
    rotated = Gateway().post(f"/api/v1/clusters/{cluster}/credential")
    if output is not Format.table:
        emit(rotated, output)
        _credential_warning()
        return
    _show_credential(cluster, rotated["agent_credential"])
