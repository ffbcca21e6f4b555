"""Composition root of the tunnel-agent: `python -m rlark_tunnel_agent all` (one active agent per cluster:
a second one stands by until the cluster's lease frees, ADR 0018).

The agent has no database (its desired state comes from Kafka and its runtime; see ADR 0001), so
`migrate` only checks the settings. The HTTP API serves health and metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rlark_platform.observability import configure_logging
from rlark_platform.service import Runnable, ServiceContext, ServiceDefinition, main

from rlark_tunnel_agent.agent.durable import DurableStore, SecretStore
from rlark_tunnel_agent.agent.loop import Agent
from rlark_tunnel_agent.agent.sidecars import PodSidecars, SidecarOptions, files_secrets
from rlark_tunnel_agent.agent.tunnels import DomainTunnels, TunnelOptions
from rlark_tunnel_agent.api import build_api
from rlark_tunnel_agent.runtime.driver import RuntimeDriver
from rlark_tunnel_agent.settings import TunnelAgentSettings


def make_driver_factory(settings: TunnelAgentSettings):  # type: ignore[no-untyped-def]
    """The runtime of this cluster: the local driver (a YAML file of virtual nodes) or Kubernetes."""

    def make(cluster: str, tunnels: DomainTunnels | None, sidecars: PodSidecars | None) -> RuntimeDriver:
        """The driver, given what carries network domains on it (the agent's tunnels, or its pod sidecars)."""
        if settings.runtime == "kubernetes":
            from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
            from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver

            # Pod shape and driver tuning come from RLARK_K8S_* (the KubernetesDriverConfig settings);
            # the agent's own settings name the workers' two namespaces and the kubeconfig.
            return KubernetesDriver(
                KubernetesDriverConfig(
                    namespace=settings.namespace,
                    privileged_namespace=settings.privileged_namespace,
                    kubeconfig=settings.kubeconfig,
                    # Workers report their own GPUs as often as the agent samples (where DCGM does not).
                    gpu_sample_interval_s=settings.usage_interval_s,
                ),
                files_secret=files_secrets(settings.agent_credential.get_secret_value()),
                sidecar_hooks=sidecars,
            )
        from rlark_tunnel_agent.runtime.local.cluster import load_cluster
        from rlark_tunnel_agent.runtime.local.driver import LocalDriver, LocalDriverOptions

        if settings.config is None:
            raise SystemExit(
                "the local runtime needs its cluster file: RLARK_CONFIG=path/to/local-cluster.yaml"
            )
        declared = load_cluster(settings.config)
        if declared.cluster != cluster:
            raise SystemExit(
                f"the credential belongs to cluster {cluster!r} but {settings.config} declares {declared.cluster!r}"
            )
        return LocalDriver(
            declared,
            LocalDriverOptions(
                state_dir=settings.state_dir / cluster,
                bridge=settings.local_bridge,
                subnet=settings.local_subnet,
                use_netns=None if settings.local_netns else False,
            ),
            virtual_ip_hooks=tunnels,
        )

    return make


def make_durable_store(settings: TunnelAgentSettings) -> Callable[[str], DurableStore] | None:
    """Where the agent keeps its tunnel host keys (ADR 0018): the Secret ``RLARK_STATE_SECRET`` on
    Kubernetes when set, else None (the state directory)."""
    if settings.runtime != "kubernetes" or settings.state_secret is None:
        return None
    from rlark_tunnel_agent.runtime.kubernetes.kube import Kube, load_api_client

    secret = settings.state_secret
    kube = Kube(load_api_client(settings.kubeconfig))
    return lambda _cluster: SecretStore(kube, settings.state_secret_namespace, secret, prefix="tunnel-key.")


def build_agent(settings: TunnelAgentSettings) -> Agent:
    """The cluster's agent, as the settings describe it (no I/O until it runs)."""
    return Agent(
        gateway_url=settings.gateway_url,
        credential=settings.agent_credential.get_secret_value(),
        make_driver=make_driver_factory(settings),
        runtime=settings.runtime,
        state_dir=settings.state_dir,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        observe_interval_s=settings.observe_interval_s,
        tensorboard_idle_s=settings.tensorboard_idle_s,
        usage_interval_s=settings.usage_interval_s,
        max_download_bytes=settings.files_max_download_bytes,
        durable=make_durable_store(settings),
        tunnels=TunnelOptions(
            listen_host=settings.tunnel_listen_host,
            advertise_host=settings.tunnel_advertise_host,
            listen_port=settings.tunnel_listen_port,
            listen_ports=settings.tunnel_listen_ports,
            netns=settings.tunnel_netns,
            dataplane=settings.tunnel_dataplane,
            profile_dir=settings.tunnel_profile_dir,
            ping_interval_s=settings.tunnel_ping_interval_s,
            dead_after_s=settings.tunnel_dead_after_s,
            backoff_max_s=settings.tunnel_backoff_max_s,
        )
        if settings.tunnels
        else None,
        # Only the Kubernetes driver takes sidecar hooks: its workers' TUNs live in their pods.
        sidecars=SidecarOptions(
            listen_host=settings.tunnel_sidecar_listen_host,
            listen_port=settings.tunnel_sidecar_listen_port,
            advertise_host=settings.tunnel_sidecar_advertise_host,
            advertise_port=settings.tunnel_sidecar_advertise_port,
        )
        if settings.tunnels and settings.runtime == "kubernetes"
        else None,
    )


async def start(ctx: ServiceContext[TunnelAgentSettings, None]) -> Agent:
    """The process's one agent, shared by its worker part and its readiness check."""
    return build_agent(ctx.settings)


def build_workers(ctx: ServiceContext[TunnelAgentSettings, Agent]) -> list[Runnable]:
    return [ctx.parts]


def add_commands(app: typer.Typer, _settings: Callable[[], TunnelAgentSettings]) -> None:
    @app.command("csi-node")
    def _csi_node(
        driver_name: Annotated[str, typer.Option(help="The CSI driver's name (the CSIDriver object's)")],
        node_id: Annotated[str, typer.Option(envvar="NODE_NAME", help="This node's name (NODE_NAME)")],
        kubelet_dir: Annotated[str, typer.Option(help="The kubelet's --root-dir")] = "/var/lib/kubelet",
        state_dir: Annotated[str, typer.Option(help="rclone's caches and logs")] = "/var/lib/rlark-csi",
        rclone: Annotated[str, typer.Option(help="The rclone executable")] = "rclone",
        drain_s: Annotated[
            float, typer.Option(help="How long an unpublish waits for uploads to finish")
        ] = 60.0,
        log_level: Annotated[str, typer.Option(envvar="RLARK_LOG_LEVEL")] = "INFO",
    ) -> None:
        """Serve RLark's CSI node plugin: buckets of `objectStorage` mounts mounted by rclone for the pods of
        this node (ADR 0024), registered with the kubelet through its plugins_registry directory. Runs as
        root in the node's mount namespace (deploy/agent/csi); needs none of the agent's settings."""
        from rlark_tunnel_agent.csi.node import NodeService, RcloneVolumes
        from rlark_tunnel_agent.csi.server import run_until_signalled, start

        configure_logging("csi-node", log_level)
        volumes = RcloneVolumes(Path(state_dir), rclone=rclone, drain_s=drain_s)
        run_until_signalled(start(NodeService(driver_name, node_id, volumes), Path(kubelet_dir)))


DEFINITION = ServiceDefinition(
    name="tunnel-agent",
    settings_type=TunnelAgentSettings,
    migrations=None,
    build_api=build_api,
    build_workers=build_workers,
    on_start=start,
    needs_database=False,
    relay=False,
    kafka=False,
    uvloop=False,  # its TUN devices, namespaces and child processes are driven on asyncio's loop
    extra_commands=add_commands,
)


def run() -> None:
    main(DEFINITION)
