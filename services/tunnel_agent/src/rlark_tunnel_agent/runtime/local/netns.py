"""Network namespaces for local-runtime workers: one namespace, one veth, one IP per worker.

Layout (root only): the driver owns a Linux bridge (default `rlark-br0`) holding the subnet's
first address as gateway; each worker gets a namespace `rlark-<tag>-<hash>` with `lo` up and an
`eth0` (one end of a veth pair whose other end sits on the bridge) carrying the worker's own
address and a default route via the gateway. Every worker can therefore bind the same fixed Ray
ports, as pods do, and workers reach each other over the bridge.

Only namespaces and links carrying this driver's names are ever touched. All operations are
idempotent: creating over a half-built namespace rebuilds it; deleting a missing one succeeds.
Commands run through `ip` (iproute2); nothing here needs a Python netlink library.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network


class NetnsError(RuntimeError):
    """An `ip` command failed."""


@dataclass(frozen=True, slots=True)
class WorkerNetwork:
    """The names and address of one worker's network."""

    netns: str
    veth_host: str
    veth_peer: str
    address: IPv4Address


async def _ip(*args: str, check: bool = True) -> str:
    proc = await asyncio.create_subprocess_exec(
        "ip",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


class NetnsManager:
    """Creates and removes the bridge and per-worker namespaces of one local driver."""

    def __init__(self, bridge: str, subnet: IPv4Network, netns_prefix: str) -> None:
        if len(bridge) > 15:
            raise ValueError("bridge names are at most 15 characters")
        if subnet.num_addresses < 4:
            raise ValueError("subnet too small")
        self.bridge = bridge
        self.subnet = subnet
        self.gateway = subnet.network_address + 1
        self.netns_prefix = netns_prefix

    async def ensure_bridge(self) -> None:
        """The bridge exists, is up and holds the gateway address."""
        links = await _ip("-o", "link", "show", "dev", self.bridge, check=False)
        if self.bridge not in links:
            await _ip("link", "add", self.bridge, "type", "bridge")
        gateway = IPv4Interface(f"{self.gateway}/{self.subnet.prefixlen}")
        await _ip("addr", "replace", str(gateway), "dev", self.bridge)
        await _ip("link", "set", self.bridge, "up")

    async def remove_bridge(self) -> None:
        await _ip("link", "del", self.bridge, check=False)

    async def list_namespaces(self) -> list[str]:
        """Our namespaces (by prefix) that exist now."""
        out = await _ip("netns", "list", check=False)
        names = (line.split()[0] for line in out.splitlines() if line.strip())
        return [name for name in names if name.startswith(self.netns_prefix)]

    async def create(self, net: WorkerNetwork) -> None:
        """Build the worker's namespace from scratch (a leftover one is removed first)."""
        await self.delete(net)
        await _ip("netns", "add", net.netns)
        try:
            await _ip(
                "link", "add", net.veth_host, "type", "veth", "peer", "name", net.veth_peer,
                "netns", net.netns,
            )  # fmt: skip
            await _ip("link", "set", net.veth_host, "master", self.bridge, "up")
            ns = ("-n", net.netns)
            await _ip(*ns, "link", "set", net.veth_peer, "name", "eth0")
            await _ip(*ns, "addr", "add", f"{net.address}/{self.subnet.prefixlen}", "dev", "eth0")
            await _ip(*ns, "link", "set", "eth0", "up")
            await _ip(*ns, "link", "set", "lo", "up")
            await _ip(*ns, "route", "add", "default", "via", str(self.gateway))
        except BaseException:
            await self.delete(net)
            raise

    async def pids(self, netns: str) -> list[int]:
        out = await _ip("netns", "pids", netns, check=False)
        return [int(tok) for tok in out.split() if tok.isdigit()]

    async def kill_all(self, netns: str) -> None:
        """SIGKILL every process inside the namespace."""
        for pid in await self.pids(netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    async def delete_namespace(self, netns: str, veth_host: str | None = None) -> None:
        """Kill what runs inside, then remove the namespace (its veth pair goes with it)."""
        await self.kill_all(netns)
        await _ip("netns", "del", netns, check=False)
        if veth_host:
            await _ip("link", "del", veth_host, check=False)

    async def delete(self, net: WorkerNetwork) -> None:
        await self.delete_namespace(net.netns, net.veth_host)
