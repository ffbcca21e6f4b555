"""``rlark ssh``, ``rlark ssh-config`` and the hidden ``rlark ssh-proxy``: SSH to a job's workers through the
platform (ADR 0010).

The system's ``ssh`` does everything SSH does — keys, agent forwarding, ``scp``, ``rsync``, VS Code
Remote-SSH — with ``ProxyCommand`` set to ``rlark ssh-proxy JOB/WORKER``, which carries its stdin and stdout
over a WebSocket to the gateway, which the worker's cluster agent connects to the worker's sshd. The
encryption stays between ``ssh`` and the worker's sshd: the platform relays bytes only. Host keys are kept
under the worker's id (``HostKeyAlias``), accepted on first use.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Annotated, Any
from urllib.parse import quote

import typer

from rlark_cli import ssh_proxy as proxy
from rlark_cli.client import Gateway, fail
from rlark_cli.ssh_proxy import websocket_url as websocket_url

ATTACHABLE = ("Scheduled", "Running")


def split_target(target: str) -> tuple[str, str | None]:
    """``JOB`` or ``JOB/WORKER`` (WORKER: ``ROLE-INDEX`` or a worker id)."""
    job, _, worker = target.partition("/")
    if not job or "/" in worker:
        fail(f"{target!r} is not JOB or JOB/ROLE-INDEX (for example job-1a2b3c4d5e6f/actor-0)")
    return job, worker or None


def running_job(gateway: Gateway, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = gateway.get(f"/api/v1/jobs/{quote(job_id, safe='')}")
    if job["status"] not in ATTACHABLE:
        fail(f"job {job_id} is {job['status']}: only a running job's workers take SSH")
    if not job.get("workers"):
        fail(f"job {job_id} has no workers yet; wait until it runs (rlark jobs show {job_id})")
    return job


def pick_worker(job: dict[str, Any], name: str | None) -> dict[str, Any]:
    """The worker named ``name`` (``ROLE-INDEX`` or its id); the Header when no name is given."""
    workers: list[dict[str, Any]] = job["workers"]
    for worker in workers:
        if name is None and worker.get("is_header"):
            return worker
        if name is not None and name in (worker["id"], f"{worker['role']}-{worker['index']}"):
            return worker
    if name is None:
        return workers[0]
    known = ", ".join(f"{w['role']}-{w['index']}" for w in workers)
    fail(f"job {job['id']} has no worker {name!r} (workers: {known})")


def proxy_command(job_id: str, worker_id: str) -> str:
    """What ``ssh`` runs to reach the worker: this CLI's ``ssh-proxy``, by this very interpreter."""
    return f"{shlex.quote(sys.executable)} -m rlark_cli.ssh_proxy {shlex.quote(f'{job_id}/{worker_id}')}"


def login_user(worker: dict[str, Any]) -> str:
    return str(worker.get("login_user") or "rlark")


def ssh_argv(job_id: str, worker: dict[str, Any], identity: str | None, command: list[str]) -> list[str]:
    argv = [
        "ssh",
        "-o",
        f"ProxyCommand={proxy_command(job_id, worker['id'])}",
        "-o",
        f"HostKeyAlias={worker['id']}",
        "-o",
        "StrictHostKeyChecking=accept-new",
    ]
    if identity:
        argv += ["-i", identity, "-o", "IdentitiesOnly=yes"]
    return [*argv, f"{login_user(worker)}@{worker['id']}", *command]


def config_block(job_id: str, worker: dict[str, Any], identity: str | None) -> str:
    """One OpenSSH ``Host`` block: ``ssh <worker id>`` (and scp, rsync, VS Code) reach the worker."""
    lines = [
        f"Host {worker['id']}",
        f"  # job {job_id}, {worker['role']}-{worker['index']} on cluster {worker['cluster']}",
        f"  User {login_user(worker)}",
        f"  ProxyCommand {proxy_command(job_id, worker['id'])}",
        f"  HostKeyAlias {worker['id']}",
        "  StrictHostKeyChecking accept-new",
    ]
    if identity:
        lines += [f"  IdentityFile {identity}", "  IdentitiesOnly yes"]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    @app.command(
        "ssh",
        context_settings={"allow_extra_args": False},
        epilog="Examples: rlark ssh job-1a2b3c4d5e6f   ·   rlark ssh job-1a2b3c4d5e6f/rollout-1 -- nvidia-smi",
    )
    def ssh(
        target: Annotated[
            str, typer.Argument(help="JOB, or JOB/ROLE-INDEX (or JOB/WORKER-ID); JOB alone: its Header")
        ],
        command: Annotated[
            list[str] | None, typer.Argument(help="A command to run instead of a shell (after --)")
        ] = None,
        identity: Annotated[
            str | None,
            typer.Option("-i", "--identity", help="Private key file (ssh -i), one of the job's keys"),
        ] = None,
    ) -> None:
        """Log in to a worker of your running job with your own SSH key, through the platform (end-to-end
        encrypted: the gateway and the agent relay bytes only)."""
        job_id, name = split_target(target)
        job = running_job(Gateway(), job_id)
        worker = pick_worker(job, name)
        try:
            code = subprocess.call(ssh_argv(job_id, worker, identity, list(command or [])))
        except FileNotFoundError:
            fail("no `ssh` on this machine: install OpenSSH's client")
        raise typer.Exit(code)

    @app.command("ssh-config")
    def ssh_config(
        job_id: Annotated[str, typer.Argument(help="The job")],
        identity: Annotated[
            str | None, typer.Option("-i", "--identity", help="Private key file to name (IdentityFile)")
        ] = None,
    ) -> None:
        """Print an OpenSSH config block per worker of a running job (Host = the worker's id). Append it to
        ~/.ssh/config, or save it and use `ssh -F FILE`: then ssh, scp, rsync and VS Code Remote-SSH
        reach the workers. The proxy uses the gateway and token of `rlark login` (or RLARK_URL/RLARK_TOKEN)."""
        job = running_job(Gateway(), job_id)
        typer.echo("\n".join(config_block(job_id, w, identity) for w in job["workers"]), nl=False)

    @app.command("ssh-proxy", hidden=True)
    def ssh_proxy(target: Annotated[str, typer.Argument(help="JOB/WORKER")]) -> None:
        """ssh's ProxyCommand: stdin and stdout over a WebSocket to the worker's sshd (the configs this CLI
        writes run the lean ``python -m rlark_cli.ssh_proxy`` instead; this stays for older ones)."""
        raise typer.Exit(proxy.run(target))
