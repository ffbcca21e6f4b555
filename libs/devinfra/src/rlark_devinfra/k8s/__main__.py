"""``python -m rlark_devinfra.k8s build|up|down|status``: the multi-cluster Kubernetes test bed."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from rlark_devinfra.k8s import build as build_mod
from rlark_devinfra.k8s import realnode, testbed

app = typer.Typer(
    help=(
        "A Kubernetes test bed without Docker: etcd, kube-apiserver and KWOK built from Go modules, "
        "several API servers (clusters) sharing one etcd."
    ),
    no_args_is_help=True,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


@app.command()
def build() -> None:
    """Build etcd, kube-apiserver and kwok once into the versioned cache (about 20 min cold)."""
    found = build_mod.build()
    for path in (found.etcd, found.kube_apiserver, found.kwok, found.kwok_stages):
        typer.echo(str(path))


@app.command()
def up(
    clusters: Annotated[
        int, typer.Option(min=1, max=len(testbed.CLUSTER_NAMES), help="How many clusters.")
    ] = 2,
    real_nodes: Annotated[
        int,
        typer.Option(
            min=0,
            max=realnode.MAX_PER_CLUSTER,
            help="Real nodes (containerd + kubelet, running real pods; root only) per cluster.",
        ),
    ] = 0,
) -> None:
    """Start etcd, the API servers and their KWOKs (idempotent; builds missing binaries first), and real
    nodes when asked; print each kubeconfig."""
    build_mod.ensure_built()
    result = testbed.up(clusters)
    for item in result.clusters:
        typer.echo(f"{item.name}\t{item.server}\t{item.kubeconfig}")
    if result.started:
        typer.echo(f"started: {', '.join(result.started)}", err=True)
    if real_nodes:
        if reason := realnode.unavailable():
            typer.echo(f"no real nodes: {reason}", err=True)
            raise typer.Exit(1)
        for node in realnode.up_all(result.clusters, real_nodes):
            typer.echo(f"{node.cluster.name}\t{node.name}\t{node.subnet}\t{node.directory}")


@app.command()
def down() -> None:
    """Stop every test-bed process of this checkout."""
    stopped = testbed.down()
    typer.echo(f"stopped: {', '.join(stopped) or 'nothing was running'}", err=True)


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Show each component; exit 1 unless all run."""
    current = testbed.status()
    real = [
        realnode.status(node)
        for node in realnode.configured([s.name.split("/")[1] for s in current.apiservers])
    ]
    rows = [current.etcd, *current.apiservers, *current.kwoks]
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "name": r.name,
                        "running": r.running,
                        "pid": r.pid,
                        "address": r.address,
                        "log": str(r.log_file),
                    }
                    for r in rows
                ],
                indent=2,
            )
        )
    else:
        for r in rows:
            state = "running" if r.running else "stopped"
            typer.echo(f"{r.name:<24} {state:<8} {r.address or '-':<28} {r.log_file}")
        for node in real:
            state = "running" if node.running else "stopped"
            typer.echo(f"{node.name:<24} {state:<8} {'-':<28} {node.log_file}")
    raise typer.Exit(0 if current.running else 1)


if __name__ == "__main__":
    app(prog_name="python -m rlark_devinfra.k8s")
