"""Settings of the tunnel-agent (environment prefix `RLARK_`). One agent per cluster."""

from __future__ import annotations

from ipaddress import IPv4Network
from pathlib import Path

from pydantic import Field, SecretStr
from rlark_platform.settings import ServiceSettings

from rlark_tunnel_agent.agent.files import DEFAULT_MAX_DOWNLOAD_BYTES


class TunnelAgentSettings(ServiceSettings):
    service_name: str = "tunnel-agent"
    http_port: int = Field(default=8105, ge=0, le=65535)
    gateway_url: str = Field(default="http://127.0.0.1:8080", description="Where the agent opens its session")
    agent_credential: SecretStr = Field(
        default=SecretStr(""), description="The cluster's agent credential, shown once at registration"
    )
    config: Path | None = Field(default=None, description="Local-cluster file (the local runtime's nodes)")
    runtime: str = Field(default="local", pattern="^(local|kubernetes)$")
    kubeconfig: Path | None = Field(default=None, description="kubeconfig; in-cluster config when unset")
    namespace: str = Field(
        default="rlark-workers",
        description="Kubernetes: namespace of the workers that meet Pod Security restricted (enforce: restricted)",
    )
    privileged_namespace: str = Field(
        default="rlark-workers-privileged",
        description=(
            "Kubernetes: namespace of the workers with a hostPath volume or a network sidecar (enforce: "
            "privileged, warn/audit restricted); the same name as RLARK_NAMESPACE: one namespace for all"
        ),
    )
    state_dir: Path = Field(default=Path(".state/agent"), description="Local runtime workers and agent state")
    state_secret: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description=(
            "Kubernetes: the Secret (in RLARK_STATE_SECRET_NAMESPACE, created by the manifests) that keeps "
            "the agent's durable state — its tunnel host keys — across restarts and replacements; unset: "
            "the state directory"
        ),
    )
    state_secret_namespace: str = Field(
        default="rlark-agent", description="Kubernetes: the namespace of RLARK_STATE_SECRET (the agent's own)"
    )
    local_netns: bool = Field(
        default=True,
        description="Local runtime as root: workers in network namespaces; false: plain processes on 127.0.0.1",
    )
    local_bridge: str | None = Field(
        default=None,
        max_length=15,
        description="Local runtime as root: the cluster's bridge; unset: rlkbr<hash of its state dir>",
    )
    local_subnet: IPv4Network | None = Field(
        default=None,
        description="Local runtime as root: the bridge's subnet; unset: the one it holds, else a free /24",
    )
    tunnels: bool = Field(
        default=True, description="Carry network domains (TUN devices, SSH tunnels to peers)"
    )
    tunnel_listen_host: str = Field(default="0.0.0.0", description="Where peers' tunnels connect")  # noqa: S104
    tunnel_advertise_host: str = Field(default="127.0.0.1", description="The address peers dial")
    tunnel_listen_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="0: an ephemeral port per domain; else the first port of a range",
    )
    tunnel_listen_ports: int = Field(
        default=64,
        ge=1,
        le=4096,
        description="With a fixed port: the range's size — one port per domain with workers in this cluster",
    )
    tunnel_netns: str | None = Field(
        default=None,
        description="Network namespace (name or /run/netns path) of the tunnel sockets; unset: the agent's",
    )
    tunnel_dataplane: str | None = Field(
        default=None,
        description=(
            "Local runtime: path of the rlark-tunnel-dp binary (Go data path, ADR 0008; `make prereqs` "
            "builds it); unset: the asyncio forwarder"
        ),
    )
    tunnel_profile_dir: str | None = Field(
        default=None,
        description="With the Go data path: each domain's data path writes a CPU profile (pprof) into this directory",
    )
    tunnel_ping_interval_s: float = Field(default=1.0, gt=0, description="A PING on every link this often")
    tunnel_dead_after_s: float = Field(default=4.0, gt=0, description="A link silent this long is down")
    tunnel_backoff_max_s: float = Field(default=2.0, gt=0, description="Longest wait between two dials")
    tunnel_sidecar_listen_host: str = Field(
        default="0.0.0.0",  # noqa: S104 - pods reach the agent through its Service
        description="Kubernetes: where the workers' network sidecars connect",
    )
    tunnel_sidecar_listen_port: int = Field(
        default=8106, ge=0, le=65535, description="Kubernetes: the network sidecars' port (0: ephemeral)"
    )
    tunnel_sidecar_advertise_host: str = Field(
        default="rlark-tunnel-agent.rlark-agent.svc",
        description="Kubernetes: what the network sidecars dial (the agent's Service)",
    )
    tunnel_sidecar_advertise_port: int | None = Field(
        default=None, ge=1, le=65535, description="The Service's sidecar port; unset: the listen port"
    )
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    observe_interval_s: float = Field(default=10.0, gt=0)
    usage_interval_s: float = Field(
        default=15.0, ge=1, le=3600, description="Each worker's CPU, memory and GPU use is sampled this often"
    )
    tensorboard_idle_s: float = Field(
        default=600.0, gt=0, description="A job's TensorBoard server nobody asked for this long is stopped"
    )
    files_max_download_bytes: int = Field(
        default=DEFAULT_MAX_DOWNLOAD_BYTES,
        ge=1,
        description=(
            "The largest output download this agent sends (a file's apparent size, a directory's files "
            "together; 2 GiB by default); more is refused 413 download_too_large"
        ),
    )
