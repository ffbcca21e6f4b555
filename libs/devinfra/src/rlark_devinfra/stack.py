"""The whole platform on this machine: infrastructure, migrations, every service and the local cluster's
tunnel-agent, each as its own process.

``python -m rlark_devinfra.stack up|down|status``. Each service runs ``python -m rlark_<svc> all`` (API and
worker in one process to save memory on a laptop) in its own process group, logging to
``.state/logs/<service>.log``; PIDs in ``.state/pids``. The platform's internal secret is generated once into
``.state/internal-secret`` (mode 600) and never printed.

Ports: the gateway listens on 8080 (and its tools origin, jobs' TensorBoard and Ray dashboard, on the
gateway's port + 1, 8081, or ``RLARK_TOOLS_PORT``), inventory, keys, netdomain and scheduler on 8101-8104, the
agent on 8105, the notifier on 8106; ``RLARK_<NAME>_PORT`` (``RLARK_GATEWAY_PORT``, ``RLARK_TUNNEL_AGENT_PORT``, ...) moves one, so a second
checkout can run beside the first (with its own ``RLARK_STATE_DIR``).

The tunnel-agent of the local cluster is started by ``rlark_devinfra.demo`` (it needs the cluster's
credential, which only a registration gives); ``down`` stops it, then the local workers it left running
(an agent leaves its workers running on purpose, so that a restarted agent adopts them), then the services.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer
from rlark_contracts import TopicNames
from rlark_contracts.services import SERVICES as PLATFORM_SERVICES
from rlark_platform.messaging.access import ADMIN_PRINCIPAL, KafkaAccess, derive_password
from rlark_platform.messaging.provision import provision_platform

from rlark_devinfra import kafka, postgres, tunnel_dp
from rlark_devinfra.paths import state_dir
from rlark_devinfra.process import read_pid, stop_process_group


@dataclass(frozen=True)
class ServiceProcess:
    name: str
    module: str
    default_port: int

    @property
    def port_variable(self) -> str:
        return f"RLARK_{self.name.upper().replace('-', '_')}_PORT"

    @property
    def port(self) -> int:
        """``RLARK_<NAME>_PORT`` when set, else the default."""
        configured = os.environ.get(self.port_variable)
        return int(configured) if configured else self.default_port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# Start order matters only for readiness output: every service tolerates the others being down.
SERVICES = [ServiceProcess(s.name, s.package, s.default_port) for s in PLATFORM_SERVICES]
GATEWAY = SERVICES[-1]
AGENT = ServiceProcess("tunnel-agent", "rlark_tunnel_agent", 8105)

app = typer.Typer(
    help="Run the whole RLark platform on this machine.", no_args_is_help=True, add_completion=False
)


def _dirs() -> tuple[Path, Path]:
    logs, pids = state_dir() / "logs", state_dir() / "pids"
    logs.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    return logs, pids


def write_secret_file(path: Path, value: str) -> None:
    """Create ``path`` with mode 600 before the secret goes in (never readable by others, not even briefly)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def internal_secret() -> str:
    path = state_dir() / "internal-secret"
    if not path.exists():
        write_secret_file(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def kafka_admin_password() -> str:
    """The dev broker's admin password: derived from the internal secret, like every principal's here."""
    return os.environ.get("RLARK_KAFKA_ADMIN_PASSWORD") or derive_password(internal_secret(), ADMIN_PRINCIPAL)


def start_kafka() -> KafkaAccess:
    """This checkout's broker (``RLARK_KAFKA_BOOTSTRAP`` when given), as its admin principal."""
    bootstrap = os.environ.get("RLARK_KAFKA_BOOTSTRAP") or kafka.start(kafka_admin_password()).bootstrap
    assert bootstrap
    return kafka.admin_access(bootstrap, kafka_admin_password())


def environment() -> dict[str, str]:
    """What every service process gets: where the servers are, and the shared internal secret (each
    service derives its Kafka password from it; the broker's admin password stays here)."""
    database = os.environ.get("RLARK_DATABASE_URL") or postgres.start().url
    bootstrap = start_kafka().bootstrap
    assert database
    env = {
        **os.environ,
        "RLARK_DATABASE_URL": database,
        "RLARK_KAFKA_BOOTSTRAP": bootstrap,
        "RLARK_INTERNAL_SECRET": internal_secret(),
        "RLARK_LOG_JSON": "true",
    }
    for service in SERVICES:
        env.setdefault(f"RLARK_{service.name.upper()}_URL", service.url)
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


_DETACH = 'log=$1; shift; setsid "$@" >>"$log" 2>&1 </dev/null & echo $!'
"""Run by ``sh``: start the command in a session of its own, print its PID, exit (see ``spawn_detached``)."""


def spawn_detached(argv: list[str], env: dict[str, str], log_file: Path) -> int:
    """Start ``argv`` as the leader of a new session (PID = process group id), output appended to
    ``log_file``, and return its PID. An intermediate shell starts it and exits at once, so the process
    is re-parented away from this one.

    Why not a plain child: the platform's processes must not inherit the ancestry of the command that
    started them. Ray looks for a ``uv run`` among the ancestors of a job's driver and, finding the one
    that runs ``make run``, would start that job's Ray workers through uv in the worker's directory —
    which fails as soon as that directory lies inside this checkout (the local agent's state does).
    """
    starter = subprocess.run(
        ["/bin/sh", "-c", _DETACH, "rlark-start", str(log_file), *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(starter.stdout.strip())
    # The PID is known before the child has become a session leader; stopping it by process group
    # needs that done, so wait for it (a few milliseconds).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.getpgid(pid) == pid:
                break
        except ProcessLookupError:
            break  # exited at once; the caller's readiness check says why
        time.sleep(0.01)
    return pid


def start_service(service: ServiceProcess, env: dict[str, str]) -> int:
    """Start ``python -m <module> all`` detached, unless its PID file names a live one."""
    logs, pids = _dirs()
    pid_file = pids / f"{service.name}.pid"
    running = read_pid(pid_file)
    if running is not None:
        return running
    pid = spawn_detached(
        [sys.executable, "-m", service.module, "all"],
        {**env, "RLARK_HTTP_PORT": str(service.port)},
        logs / f"{service.name}.log",
    )
    pid_file.write_text(str(pid))
    return pid


def running_pid(service: ServiceProcess) -> int | None:
    return read_pid(_dirs()[1] / f"{service.name}.pid")


def wait_ready(service: ServiceProcess, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    url = f"{service.url}/readyz"
    while time.monotonic() < deadline:
        if running_pid(service) is None:
            raise RuntimeError(f"{service.name} exited; see {state_dir() / 'logs' / service.name}.log")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{service.name} not ready at {url} after {timeout_s:.0f}s")


def provision_kafka(env: dict[str, str]) -> None:
    """Topics, service principals and ACLs on the broker (ADR 0004), as the deploy's provisioning job."""
    names = TopicNames(env.get("RLARK_TOPIC_PREFIX", ""))
    asyncio.run(provision_platform(start_kafka(), names, env["RLARK_INTERNAL_SECRET"]))


def up() -> dict[str, str]:
    env = environment()
    provision_kafka(env)
    _run_migrations(env)
    for service in SERVICES:
        start_service(service, env)
    for service in SERVICES:
        wait_ready(service)
    return env


# ------------------------------------------------------------------------------------- the local agent


def agent_state_dir() -> Path:
    """The local agent's state (its runtime keeps each worker's directory under ``<cluster>/workers``)."""
    return state_dir() / "agent"


def start_agent(cluster_file: Path, credential: str, gateway_url: str) -> int:
    """Start the local cluster's tunnel-agent (idempotent). It gets only what an agent needs: no database,
    no internal secret — the credential is its only key, and it is passed in its environment."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RLARK_DATABASE_URL", "RLARK_INTERNAL_SECRET", "RLARK_KAFKA_BOOTSTRAP")
    }
    env.update(
        {
            "RLARK_CONFIG": str(cluster_file.resolve()),
            "RLARK_AGENT_CREDENTIAL": credential,
            "RLARK_GATEWAY_URL": gateway_url,
            "RLARK_STATE_DIR": str(agent_state_dir()),
            "RLARK_RUNTIME": "local",
            "RLARK_LOG_JSON": "true",
        }
    )
    if tunnel_dp.is_built():  # network domains on the Go data path (ADR 0008); else the asyncio one
        env.setdefault("RLARK_TUNNEL_DATAPLANE", str(tunnel_dp.binary()))
    agent_state_dir().mkdir(parents=True, exist_ok=True)
    # Remembered for `down`, which stops the workers this agent's runtime left (see stop_local_workers).
    (agent_state_dir() / "cluster-file").write_text(str(cluster_file.resolve()))
    return start_service(AGENT, env)


def stop_agent() -> bool:
    """Stop the local agent; whether one ran."""
    _, pids = _dirs()
    pid = read_pid(pids / f"{AGENT.name}.pid")
    if pid is not None:
        stop_process_group(pid, grace_s=20)
    (pids / f"{AGENT.name}.pid").unlink(missing_ok=True)
    return pid is not None


def stop_local_workers() -> list[str]:
    """Stop the workers the local agent left running (processes, Ray nodes, network namespaces); their
    directories with logs and outputs stay. Returns the ids of the workers stopped.

    Uses the agent's own local driver on the agent's state directory, so it finds exactly what the agent
    would adopt; the agent must not run meanwhile. Imported here only: the rest of devinfra does not need
    the tunnel-agent package.
    """
    record = agent_state_dir() / "cluster-file"
    if not record.exists():
        return []
    from rlark_tunnel_agent.runtime.local.cluster import load_cluster
    from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions

    declared = load_cluster(Path(record.read_text().strip()))
    if not (agent_state_dir() / declared.cluster / "workers").is_dir():
        return []

    async def stop_all() -> list[str]:
        driver = LocalDriver(declared, LocalDriverOptions(state_dir=agent_state_dir() / declared.cluster))
        await driver.start()
        try:
            ids = await driver.list_workers()
            await asyncio.gather(*(driver.stop_worker(worker_id) for worker_id in ids))
            return ids
        finally:
            await driver.close()

    return asyncio.run(stop_all())


def down() -> list[str]:
    """Stop the local agent, its workers and every service; the names of what ran."""
    stopped = ["the local agent"] if stop_agent() else []
    workers = stop_local_workers()
    if workers:
        typer.echo(f"stopped {len(workers)} local worker(s): {', '.join(workers)}")
    _, pids = _dirs()
    for service in reversed(SERVICES):
        pid = read_pid(pids / f"{service.name}.pid")
        if pid is not None:
            stop_process_group(pid, grace_s=20)
            stopped.append(service.name)
        (pids / f"{service.name}.pid").unlink(missing_ok=True)
    return stopped


@app.command("up")
def up_command() -> None:
    """Start PostgreSQL, Kafka and every service (idempotent); print where things are."""
    typer.echo("starting PostgreSQL and Kafka …")
    env = up()
    typer.echo(f"PostgreSQL  {env['RLARK_DATABASE_URL']}")
    typer.echo(f"Kafka       {env['RLARK_KAFKA_BOOTSTRAP']}")
    for service in SERVICES:
        typer.echo(f"{service.name:<12} {service.url}  (log: {state_dir() / 'logs' / service.name}.log)")


@app.command("down")
def down_command(infra: bool = typer.Option(True, help="Also stop PostgreSQL and Kafka")) -> None:
    """Stop the local agent and its workers, every service (and the infrastructure)."""
    stopped = down()
    if infra:
        if kafka.status().running:
            stopped.append("Kafka")
        kafka.stop()
        if postgres.status().running:
            stopped.append("PostgreSQL")
        postgres.stop()
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    typer.echo(f"the data stays in {state_dir()}: `make run` starts again from it")


@app.command("status")
def status_command() -> None:
    """Show which parts run."""
    _, pids = _dirs()
    typer.echo(f"{'postgres':<12} {'running' if postgres.status().running else 'stopped'}")
    typer.echo(f"{'kafka':<12} {'running' if kafka.status().running else 'stopped'}")
    for service in [*SERVICES, AGENT]:
        pid = read_pid(pids / f"{service.name}.pid")
        where = f"running pid {pid} on {service.url}" if pid else "stopped"
        typer.echo(f"{service.name:<12} {where}")


if __name__ == "__main__":
    app()
