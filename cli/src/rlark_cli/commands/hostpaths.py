"""``rlark clusters hostpaths show | set | clear``: which host directories a cluster's workers may mount.

A cluster's hostPath policy is an allow-list of directory prefixes (ADR 0006). Jobs whose ``hostPath``
sources lie outside it are refused at submission with the field named. Everyone may read a policy;
only admins change it. The server stores the list normalised and refuses protected host paths.
"""

from __future__ import annotations

from typing import Annotated

import typer

from rlark_cli.client import Gateway
from rlark_cli.output import Format, OutputOpt, emit, print_text

app = typer.Typer(
    help="A cluster's hostPath policy: the host directories workers may mount.", no_args_is_help=True
)

ClusterName = Annotated[
    str, typer.Argument(metavar="CLUSTER", help="The cluster's name (see rlark clusters list)")
]


def _path(cluster: str) -> str:
    return f"/api/v1/clusters/{cluster}/hostpath-policy"


def _shown(policy: dict[str, object], output: Format) -> None:
    if output is not Format.table:
        emit(policy, output)
        return
    allow = policy.get("allow") or []
    if not allow:
        print_text(f"cluster {policy['cluster']} allows no hostPath mounts")
        return
    print_text(f"cluster {policy['cluster']} allows hostPath mounts under:")
    for prefix in allow if isinstance(allow, list) else []:
        print_text(f"  {prefix}")


@app.command("show")
def show(cluster: ClusterName, output: OutputOpt = Format.table) -> None:
    """Show the directories workers of CLUSTER may mount."""
    _shown(Gateway().get(_path(cluster)), output)


@app.command("set")
def set_policy(
    cluster: ClusterName,
    prefixes: Annotated[list[str], typer.Argument(metavar="PREFIX...", help="Absolute host directories")],
    output: OutputOpt = Format.table,
) -> None:
    """Allow hostPath mounts under PREFIX... on CLUSTER, replacing the list (admins)."""
    _shown(Gateway().put(_path(cluster), json={"allow": prefixes}), output)


@app.command("clear")
def clear(cluster: ClusterName, output: OutputOpt = Format.table) -> None:
    """Allow no hostPath mounts on CLUSTER (admins); jobs already accepted keep theirs."""
    _shown(Gateway().put(_path(cluster), json={"allow": []}), output)
