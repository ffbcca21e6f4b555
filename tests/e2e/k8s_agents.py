"""Kubernetes-runtime agents for end-to-end tests, against the Go-built test bed (real API servers, KWOK).

Two ways to run the real agent with the real `KubernetesDriver`:

- `kubernetes_agent`: the `Agent` class in the test's event loop; `InProcessAgent.kill()` cancels its task
  (the agent's own shutdown path runs, pods stay);
- `AgentProcess`: ``python -m rlark_tunnel_agent all`` as its own process, configured only through the
  environment as a deployed agent is (``RLARK_RUNTIME=kubernetes``, ``RLARK_KUBECONFIG``,
  ``RLARK_AGENT_CREDENTIAL``, ``RLARK_GATEWAY_URL``, ``RLARK_K8S_*``); `kill()` sends SIGKILL.

KWOK simulates kubelets: pods bound to a node go Running, but no container runs, so there is no bootstrap,
no marker line and no container log. `KWOK_DRIVER` says so to the driver (``running_without_markers``: a
running container is reported as worker phase Joined, with a reason saying why) and turns log following
off. Everything else is the driver's default pod shape.

Also here: a namespace per test (the driver does not create its namespace; the test bed has no namespace
controller, so namespaces are left behind) and listing what the driver created, by the job's label.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client
from rlark_devinfra.k8s import testbed
from rlark_devinfra.testing import free_port
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.sidecars import SidecarOptions
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, KubernetesDriverConfig, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube, load_api_client

KWOK_DRIVER: dict[str, Any] = {
    "running_without_markers": True,
    "follow_logs": False,
    "resync_interval_s": 2.0,
    "termination_grace_period_s": 5,
}
"""Driver settings for KWOK clusters (module docstring); the subprocess gets them as ``RLARK_K8S_*``."""

JOB_OBJECT_KINDS = ("pod", "service", "config_map")


def admin(cluster: testbed.Cluster) -> Kube:
    """An admin client of a test-bed cluster (to look at, or tamper with, what the agent created)."""
    return Kube(load_api_client(cluster.kubeconfig))


def create_namespace(kube: Kube, prefix: str = "e2e", name: str | None = None) -> str:
    name = name or f"{prefix}-{uuid.uuid4().hex[:8]}"
    metadata = k8s_client.V1ObjectMeta(name=name, labels={"rlark.io/test": "true"})
    kube.core.create_namespace(k8s_client.V1Namespace(metadata=metadata))
    return name


def privileged_namespace(namespace: str) -> str:
    """The test's own privileged worker namespace (hostPath and sidecar workers; none in these jobs, so
    it need not exist: listing and watching an absent namespace finds nothing). Never the deployed
    default, which other tests' agents on the same test bed would share."""
    return f"{namespace}-priv"


def job_objects(kube: Kube, namespace: str, job_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every pod, service and config map carrying the job's label in ``namespace``, by kind."""
    selector = names.job_selector(job_id)
    return {kind: kube.list_items(kind, namespace, selector)[0] for kind in JOB_OBJECT_KINDS}


@dataclass
class InProcessAgent:
    agent: Agent
    task: asyncio.Task[None]

    async def kill(self) -> None:
        """Cancel the agent's task, as a crashing event loop would; its pods stay."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 60)


@contextlib.asynccontextmanager
async def kubernetes_agent(
    gateway_url: str,
    credential: str,
    cluster: testbed.Cluster,
    namespace: str,
    state_dir: Path,
    driver: dict[str, Any] | None = None,
    tunnels: TunnelOptions | None = None,
    sidecars: SidecarOptions | None = None,
) -> AsyncIterator[InProcessAgent]:
    """The real agent with the Kubernetes driver in this event loop; stopped (not its pods) on exit.
    ``driver``: the driver's settings beyond its namespaces and kubeconfig (default `KWOK_DRIVER`);
    ``tunnels`` and ``sidecars``: network domains' tunnels and the pods' network sidecars (default none)."""

    def make(name: str, _tunnels: Any, pod_sidecars: Any) -> KubernetesDriver:
        assert name == cluster.name, f"the credential is {name!r}'s, the kubeconfig {cluster.name!r}'s"
        config = KubernetesDriverConfig(
            namespace=namespace,
            privileged_namespace=privileged_namespace(namespace),
            kubeconfig=cluster.kubeconfig,
            **(KWOK_DRIVER if driver is None else driver),
        )
        return KubernetesDriver(config, sidecar_hooks=pod_sidecars)

    agent = Agent(
        gateway_url=gateway_url,
        credential=credential,
        make_driver=make,
        runtime="kubernetes",
        state_dir=state_dir,
        heartbeat_interval_s=0.5,
        observe_interval_s=1.0,
        tunnels=tunnels,
        sidecars=sidecars,
    )
    task = asyncio.create_task(agent.run(), name=f"agent {cluster.name}")
    try:
        waiter = asyncio.create_task(agent.ready.wait())
        done, _ = await asyncio.wait([waiter, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
        assert agent.ready.is_set(), f"the {cluster.name} agent did not start"
        yield InProcessAgent(agent, task)
    finally:
        agent.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)


class AgentProcess:
    """``python -m rlark_tunnel_agent all`` for one test-bed cluster, configured by environment only."""

    def __init__(
        self, gateway_url: str, credential: str, cluster: testbed.Cluster, namespace: str, state_dir: Path
    ) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = state_dir / f"agent-{cluster.name}.log"
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("RLARK_")}
        self.env = {
            **inherited,
            "RLARK_RUNTIME": "kubernetes",
            "RLARK_KUBECONFIG": str(cluster.kubeconfig),
            "RLARK_NAMESPACE": namespace,
            "RLARK_PRIVILEGED_NAMESPACE": privileged_namespace(namespace),
            "RLARK_AGENT_CREDENTIAL": credential,
            "RLARK_GATEWAY_URL": gateway_url,
            "RLARK_STATE_DIR": str(state_dir),
            "RLARK_HTTP_PORT": str(free_port()),
            # The network sidecars' listener on a port of its own (the default, 8106, is one for the whole
            # host: a replacement agent, or one in the other test process, found it taken and stopped).
            "RLARK_TUNNEL_SIDECAR_LISTEN_PORT": "0",
            "RLARK_HEARTBEAT_INTERVAL_S": "0.5",
            "RLARK_OBSERVE_INTERVAL_S": "1.0",
            "RLARK_LOG_JSON": "false",
            **{f"RLARK_K8S_{key.upper()}": str(value).lower() for key, value in KWOK_DRIVER.items()},
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_file.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rlark_tunnel_agent", "all"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (no offset commit, no driver close)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
