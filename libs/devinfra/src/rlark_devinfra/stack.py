"""The whole platform on this machine: infrastructure, migrations and every service as its own process.

``python -m rlark_devinfra.stack up|down|status``. Each service runs ``python -m rlark_<svc> all`` (API and
worker in one process to save memory on a laptop) in its own process group, logging to
``.state/logs/<service>.log``; PIDs in ``.state/pids``. The platform's internal secret is generated once into
``.state/internal-secret`` (mode 600) and never printed.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer

from rlark_devinfra import kafka, postgres
from rlark_devinfra.paths import state_dir
from rlark_devinfra.process import read_pid, stop_process_group


@dataclass(frozen=True)
class ServiceProcess:
    name: str
    module: str
    port: int


# Start order matters only for readiness output: every service tolerates the others being down.
SERVICES = [
    ServiceProcess("inventory", "rlark_inventory", 8101),
    ServiceProcess("keys", "rlark_keys", 8102),
    ServiceProcess("netdomain", "rlark_netdomain", 8103),
    ServiceProcess("scheduler", "rlark_scheduler", 8104),
    ServiceProcess("gateway", "rlark_gateway", 8080),
]

app = typer.Typer(
    help="Run the whole RLark platform on this machine.", no_args_is_help=True, add_completion=False
)


def _dirs() -> tuple[Path, Path]:
    logs, pids = state_dir() / "logs", state_dir() / "pids"
    logs.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    return logs, pids


def internal_secret() -> str:
    path = state_dir() / "internal-secret"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip()


def environment() -> dict[str, str]:
    """What every service process gets: where the servers are, and the shared internal secret."""
    database = os.environ.get("RLARK_DATABASE_URL") or postgres.start().url
    bootstrap = os.environ.get("RLARK_KAFKA_BOOTSTRAP") or kafka.start().bootstrap
    assert database
    assert bootstrap
    env = {
        **os.environ,
        "RLARK_DATABASE_URL": database,
        "RLARK_KAFKA_BOOTSTRAP": bootstrap,
        "RLARK_INTERNAL_SECRET": internal_secret(),
        "RLARK_LOG_JSON": "true",
    }
    for service in SERVICES:
        env.setdefault(f"RLARK_{service.name.upper()}_URL", f"http://127.0.0.1:{service.port}")
    return env


def _run_migrations(env: dict[str, str]) -> None:
    for service in SERVICES:
        result = subprocess.run(
            [sys.executable, "-m", service.module, "migrate"], env=env, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{service.name} migrate failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )


def start_service(service: ServiceProcess, env: dict[str, str]) -> int:
    logs, pids = _dirs()
    pid_file = pids / f"{service.name}.pid"
    running = read_pid(pid_file)
    if running is not None:
        return running
    with (logs / f"{service.name}.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", service.module, "all"],
            env={**env, "RLARK_HTTP_PORT": str(service.port)},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(str(process.pid))
    return process.pid


def wait_ready(service: ServiceProcess, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"http://127.0.0.1:{service.port}/readyz"
    while time.monotonic() < deadline:
        pid = read_pid(_dirs()[1] / f"{service.name}.pid")
        if pid is None:
            raise RuntimeError(f"{service.name} exited; see {state_dir() / 'logs' / service.name}.log")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{service.name} not ready at {url} after {timeout_s:.0f}s")


def up() -> dict[str, str]:
    env = environment()
    _run_migrations(env)
    for service in SERVICES:
        start_service(service, env)
    for service in SERVICES:
        wait_ready(service)
    return env


def down() -> None:
    _, pids = _dirs()
    for service in reversed(SERVICES):
        pid = read_pid(pids / f"{service.name}.pid")
        if pid is not None:
            stop_process_group(pid, grace_s=20)
        (pids / f"{service.name}.pid").unlink(missing_ok=True)


@app.command("up")
def up_command() -> None:
    """Start PostgreSQL, Kafka and every service (idempotent); print where things are."""
    typer.echo("starting PostgreSQL and Kafka …")
    env = up()
    typer.echo(f"PostgreSQL  {env['RLARK_DATABASE_URL']}")
    typer.echo(f"Kafka       {env['RLARK_KAFKA_BOOTSTRAP']}")
    for service in SERVICES:
        typer.echo(
            f"{service.name:<11} http://127.0.0.1:{service.port}  (log: .state/logs/{service.name}.log)"
        )


@app.command("down")
def down_command(infra: bool = typer.Option(True, help="Also stop PostgreSQL and Kafka")) -> None:
    """Stop every service (and the infrastructure)."""
    down()
    if infra:
        kafka.stop()
        postgres.stop()


@app.command("status")
def status_command() -> None:
    """Show which parts run."""
    _, pids = _dirs()
    typer.echo(f"postgres    {'running' if postgres.status().running else 'stopped'}")
    typer.echo(f"kafka       {'running' if kafka.status().running else 'stopped'}")
    for service in SERVICES:
        pid = read_pid(pids / f"{service.name}.pid")
        typer.echo(f"{service.name:<11} {'running pid ' + str(pid) if pid else 'stopped'}")


if __name__ == "__main__":
    app()
