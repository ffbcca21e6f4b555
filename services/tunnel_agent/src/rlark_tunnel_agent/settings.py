"""Settings of the tunnel-agent (environment prefix `RLARK_`). One agent per cluster."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from rlark_platform.settings import ServiceSettings


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
    namespace: str = Field(default="rlark-workers", description="Kubernetes namespace of worker objects")
    state_dir: Path = Field(default=Path(".state/agent"), description="Local runtime workers and agent state")
    tunnels: bool = Field(
        default=True, description="Carry network domains (TUN devices, SSH tunnels to peers)"
    )
    tunnel_listen_host: str = Field(default="0.0.0.0", description="Where peers' tunnels connect")  # noqa: S104
    tunnel_advertise_host: str = Field(default="127.0.0.1", description="The address peers dial")
    tunnel_listen_port: int = Field(default=0, ge=0, le=65535, description="0: an ephemeral port per domain")
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    observe_interval_s: float = Field(default=10.0, gt=0)
