"""The data path of network domains: virtual IPs, TUN devices and SSH tunnels between clusters.

Each worker of a job in a domain holds its virtual IP on a TUN device in its own network
namespace, with the route for the domain network. The cluster's tunnel-agent owns the device's
file descriptor and forwards by destination address: to the local worker's TUN, or framed over
one SSH-authenticated link per peer cluster (directly, or through a relay cluster when the two
cannot reach each other). See README.md beside this file for the design, the measurements and the
packages the test bed needs.

Layers (dependencies point down):

- ``supervisor``  — tunnels of a domain up with its first local worker, down with its last;
- ``dataplane``   — ``DataplaneForwarder``: the same API, packets moved by the Go ``rlark-tunnel-dp``
  (ADR 0008); ``new_forwarder`` picks it when ``ForwarderConfig.dataplane`` names the binary;
- ``forwarder``   — ``TunnelForwarder``: one domain in one agent, wiring core and adapters;
- ``sshlink`` / ``tun`` — I/O adapters: peer links over asyncssh, TUN devices in namespaces;
- ``routing`` / ``frames`` — the pure core: decisions, anti-spoofing, framing (no I/O);
- ``health``      — reachability check for the Header; ``keys`` — per (domain, cluster) keys;
- ``sidecar``     — the worker link on Kubernetes: TUN in the pod, frame stream to the agent;
- ``node`` / ``probe`` — stand-alone node process and probes (the namespace test bed and the
  benchmark live in devinfra: ``rlark_devinfra.tunnel_testbed``, ``rlark_devinfra.benches.tunnel``).
"""

from rlark_tunnel_agent.tunnel.forwarder import (
    ForwarderConfig,
    PeerSpec,
    TunnelForwarder,
    TunnelState,
    WorkerState,
)
from rlark_tunnel_agent.tunnel.health import Reachability, check_reachability
from rlark_tunnel_agent.tunnel.routing import Drop, Router
from rlark_tunnel_agent.tunnel.sshlink import LinkState, PeerState
from rlark_tunnel_agent.tunnel.supervisor import TunnelSupervisor

__all__ = [
    "Drop",
    "ForwarderConfig",
    "LinkState",
    "PeerSpec",
    "PeerState",
    "Reachability",
    "Router",
    "TunnelForwarder",
    "TunnelState",
    "TunnelSupervisor",
    "WorkerState",
    "check_reachability",
]
