"""Jobs apart on the local runtime's bridge: nftables rules keyed by job (issue 31, ADR 0022).

Role: every worker of a local cluster sits on the cluster's one bridge (`netns.py`). Without rules, any
worker reaches any other worker's ports (a Ray head without a token ran code as its owner for whoever
asked) and every service of the host bound to all addresses. `JobFirewall` keeps, for one driver:

- **bridge family, forward hook**: a frame from one of this driver's worker ports may leave only through
  a port of the same job (a chain per job, reached by a verdict map keyed by the input port); a frame from
  any other port to one of ours is dropped. ARP, IPv6 and broadcasts included: the bridge evaluates the
  hook once per output port.
- **inet family, input hook**: what arrives from the bridge is accepted only as part of a connection the
  host opened (conntrack established/related); everything else a worker sends to the host is dropped.
- **inet family, forward hook**: nothing is routed between the bridge and another interface (another
  local cluster's bridge, the host's uplink). With `br_netfilter` bridged frames pass this hook too, in and
  out through the bridge itself: those are the bridge rules' business and stay untouched here.

The host → worker direction stays open: the agent reaches a worker's sshd, its Ray dashboard and its
TensorBoard for the platform's relays, and their answers come back as established traffic. Network
domains do not cross the bridge at all (each worker's TUN device is read by the agent).

Each change applies the whole ruleset from the driver's mapping in one `nft -f -` transaction (the
tables are deleted and rebuilt atomically), so rules never half-exist. A port is named in the rules
before its veth joins the bridge and removed only after its namespace is gone: no port is ever on the
bridge without its job's rule. Rules outlive the agent process (the kernel keeps them), so a restarted
agent's workers stay apart until it applies the same mapping again.

Concurrency: one asyncio lock per firewall; the driver calls it from its event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)


class FirewallError(RuntimeError):
    """nftables refused the ruleset, or is not installed."""


def _quoted(name: str) -> str:
    # Interface names are at most 15 bytes of [A-Za-z0-9_-] here (the driver makes them); JSON quoting
    # keeps nft's parser safe whatever arrives.
    return json.dumps(name)


def _chain(job_id: str) -> str:
    return "job_" + hashlib.sha256(job_id.encode()).hexdigest()[:16]


def render(table: str, bridge: str, ports: Mapping[str, str]) -> str:
    """The nft script that makes the tables named `table` hold exactly the rules for `ports`.

    `ports`: host side veth name → job id, for every worker port of this driver's bridge.
    """
    jobs: dict[str, list[str]] = {}
    for port, job_id in sorted(ports.items()):
        jobs.setdefault(job_id, []).append(port)
    br = _quoted(bridge)
    lines = [
        # Declaring a table first makes `delete` succeed when it does not exist yet; one transaction.
        f"table bridge {table}",
        f"delete table bridge {table}",
        f"table inet {table}",
        f"delete table inet {table}",
        f"table bridge {table} {{",
    ]
    for job_id, members in sorted(jobs.items()):
        names = ", ".join(_quoted(port) for port in members)
        lines.append(f"  chain {_chain(job_id)} {{ oifname {{ {names} }} accept; drop; }}")
    lines.append("  map port_job { type ifname : verdict;")
    if ports:
        elements = ", ".join(f"{_quoted(port)} : jump {_chain(job)}" for port, job in sorted(ports.items()))
        lines.append(f"    elements = {{ {elements} }}")
    lines.append("  }")
    lines.append("  set ours { type ifname;")
    if ports:
        lines.append(f"    elements = {{ {', '.join(_quoted(port) for port in sorted(ports))} }}")
    lines.append("  }")
    lines += [
        "  chain forward { type filter hook forward priority 0; policy accept;",
        "    iifname vmap @port_job",
        "    oifname @ours drop",
        "  }",
        "}",
        f"table inet {table} {{",
        "  chain input { type filter hook input priority 0; policy accept;",
        f"    iifname {br} ct state established,related accept",
        f"    iifname {br} drop",
        "  }",
        "  chain forward { type filter hook forward priority 0; policy accept;",
        f"    iifname {br} oifname != {br} drop",
        f"    oifname {br} iifname != {br} drop",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def removal(table: str) -> str:
    """The nft script that removes this driver's tables (whether they exist or not)."""
    return (
        f"table bridge {table}\ndelete table bridge {table}\ntable inet {table}\ndelete table inet {table}\n"
    )


async def _nft(script: str) -> None:
    nft = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin")
    if nft is None:
        raise FirewallError(
            "nftables is not installed (`nft`): the local runtime needs it to keep jobs apart on its bridge "
            "(Debian: apt-get install nftables)"
        )
    proc = await asyncio.create_subprocess_exec(
        nft,
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate(script.encode())
    if proc.returncode != 0:
        raise FirewallError(
            f"nft refused the local runtime's rules: {err.decode(errors='replace').strip()[:500]}"
        )


class JobFirewall:
    """The rules of one driver's bridge (see the module docstring)."""

    def __init__(self, table: str, bridge: str) -> None:
        self.table = table
        self.bridge = bridge
        self._ports: dict[str, str] = {}
        self._lock = asyncio.Lock()

    @property
    def ports(self) -> dict[str, str]:
        """Port → job id as last applied."""
        return dict(self._ports)

    async def reset(self, ports: Mapping[str, str]) -> None:
        """Apply exactly `ports` (at start: the live workers adopted)."""
        async with self._lock:
            await self._apply(dict(ports))

    async def admit(self, port: str, job_id: str) -> None:
        """Rule `port` into `job_id`'s chain; call before the port joins the bridge."""
        async with self._lock:
            if self._ports.get(port) == job_id:
                return
            await self._apply({**self._ports, port: job_id})

    async def release(self, port: str) -> None:
        """Drop `port` from the rules; call after its namespace (and so its veth) is gone."""
        async with self._lock:
            if port not in self._ports:
                return
            await self._apply({name: job for name, job in self._ports.items() if name != port})

    async def remove(self) -> None:
        """Remove this driver's tables (the bridge goes too)."""
        async with self._lock:
            await _nft(removal(self.table))
            self._ports = {}

    async def _apply(self, ports: dict[str, str]) -> None:
        await _nft(render(self.table, self.bridge, ports))
        self._ports = ports
        log.debug("local_runtime.firewall_applied", table=self.table, ports=len(ports))
