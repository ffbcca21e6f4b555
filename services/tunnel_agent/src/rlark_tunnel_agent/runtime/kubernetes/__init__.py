"""The Kubernetes runtime of the tunnel-agent: worker pods on the placed nodes (ARCHITECTURE §4)."""

from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.driver import KubernetesDriver

__all__ = ["KubernetesDriver", "KubernetesDriverConfig"]
