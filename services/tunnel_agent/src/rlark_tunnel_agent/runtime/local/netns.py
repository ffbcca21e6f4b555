"""Network namespaces for local-runtime workers: one namespace, one veth, one IP per worker.

Layout (root only): the driver owns a Linux bridge holding the subnet's first address as gateway;
each worker gets a namespace `rlark-<tag>-<hash>` with `lo` up and an `eth0` (one end of a veth pair
whose other end sits on the bridge) carrying the worker's own address and a default route via the
gateway. Every worker can therefore bind the same fixed Ray ports, as pods do, and workers reach each
other over the bridge.

One bridge and subnet per local cluster (per driver state directory), so two clusters on one machine
never hand out the same address: unless set (`RLARK_LOCAL_BRIDGE`, `RLARK_LOCAL_SUBNET`), the bridge is
`rlkbr<tag>` (`default_bridge`) and the subnet is the one that bridge already holds, else the first /24
of `SUBNET_POOL`, in an order derived from the tag (`subnet_candidates`), that overlaps no address or
route of the machine (`choose_subnet`). The choice is made under a host-wide lock
(`/run/lock/rlark-local-networks.lock`), so two drivers starting at once cannot take the same one; a
subnet set explicitly that overlaps another interface's network is refused with the setting named.

Only namespaces and links carrying this driver's names are ever touched. All operations are
idempotent: creating over a half-built namespace rebuilds it; deleting a missing one succeeds.
Commands run through `ip` (iproute2); nothing here needs a Python netlink library.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import signal
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path

WORKER_DEVICE = "eth0"
"""The worker's side of its veth pair inside its namespace, as in a pod: the interface of its address."""


SUBNET_POOL = IPv4Network("10.208.0.0/12")
"""Where derived subnets come from (4,096 /24s)."""
SUBNET_PREFIX = 24
"""A derived subnet's size: 252 workers per cluster (the gateway, .0 and .255 excluded)."""
NETWORKS_LOCK = Path("/run/lock/rlark-local-networks.lock")


class NetnsError(RuntimeError):
    """An `ip` command failed."""


def default_bridge(tag: str) -> str:
    """The bridge of the driver whose tag (a hash of its state directory) is `tag` (at most 15 chars)."""
    return f"rlkbr{tag}"[:15]


def subnet_candidates(
    tag: str, pool: IPv4Network = SUBNET_POOL, prefixlen: int = SUBNET_PREFIX
) -> Iterator[IPv4Network]:
    """Every subnet of `pool`, starting at one derived from `tag` (distinct tags rarely start alike)."""
    count = 1 << (prefixlen - pool.prefixlen)
    start = int(hashlib.sha256(tag.encode()).hexdigest(), 16) % count
    size = 1 << (32 - prefixlen)
    for step in range(count):
        offset = ((start + step) % count) * size
        yield IPv4Network((int(pool.network_address) + offset, prefixlen))


def choose_subnet(candidates: Iterable[IPv4Network], taken: Iterable[IPv4Network]) -> IPv4Network:
    """The first candidate that overlaps none of `taken`."""
    used = list(taken)
    for candidate in candidates:
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise NetnsError("no free subnet for the local runtime's bridge: set RLARK_LOCAL_SUBNET")


def parse_networks(addr_output: str, route_output: str, exclude_device: str) -> list[IPv4Network]:
    """Networks in use on the machine, from `ip -o -4 addr show` and `ip -4 route show`, except those of
    `exclude_device` (the driver's own bridge) and the default route."""
    found: list[IPv4Network] = []
    for line in addr_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] == "inet" and fields[1] != exclude_device:
            found.append(IPv4Interface(fields[3]).network)
    for line in route_output.splitlines():
        fields = line.split()
        if not fields or fields[0] == "default":
            continue
        if "dev" in fields and fields[fields.index("dev") + 1] == exclude_device:
            continue
        with contextlib.suppress(ValueError):
            found.append(IPv4Network(fields[0], strict=False))
    return found


@contextlib.asynccontextmanager
async def networks_lock(path: Path = NETWORKS_LOCK) -> AsyncIterator[None]:
    """Held while a driver picks its subnet and puts it on its bridge (one machine, many drivers)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


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

    def __init__(self, bridge: str, subnet: IPv4Network | None, netns_prefix: str) -> None:
        """`subnet` None: chosen by `ensure_bridge` (see the module docstring)."""
        if len(bridge) > 15:
            raise ValueError("bridge names are at most 15 characters")
        self.bridge = bridge
        self.netns_prefix = netns_prefix
        self._explicit = subnet is not None
        self.use_subnet(subnet or next(subnet_candidates(bridge)))

    def use_subnet(self, subnet: IPv4Network) -> None:
        if subnet.num_addresses < 4:
            raise ValueError("subnet too small")
        self.subnet = subnet
        self.gateway = subnet.network_address + 1

    async def bridge_subnet(self) -> IPv4Network | None:
        """The network of the address the bridge holds now, if it exists and holds one."""
        out = await _ip("-o", "-4", "addr", "show", "dev", self.bridge, check=False)
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[2] == "inet":
                return IPv4Interface(fields[3]).network
        return None

    async def networks_in_use(self) -> list[IPv4Network]:
        """Every network of the machine's addresses and routes but the bridge's own."""
        addrs = await _ip("-o", "-4", "addr", "show")
        routes = await _ip("-4", "route", "show")
        return parse_networks(addrs, routes, self.bridge)

    async def ensure_network(self, candidates: Iterable[IPv4Network]) -> None:
        """Settle the subnet (explicit, the bridge's, or the first free candidate) and ensure the bridge.

        Refuses an explicit subnet that overlaps another interface's network or route: two bridges with
        one subnet would hand out the same addresses.
        """
        async with networks_lock():
            taken = await self.networks_in_use()
            if self._explicit:
                clash = next((net for net in taken if net.overlaps(self.subnet)), None)
                if clash is not None:
                    raise NetnsError(
                        f"RLARK_LOCAL_SUBNET {self.subnet} overlaps {clash}, in use on this machine: "
                        "choose another, or leave it unset to get a free one"
                    )
            else:
                held = await self.bridge_subnet()
                self.use_subnet(held if held is not None else choose_subnet(candidates, taken))
            await self.ensure_bridge()

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
            await _ip(*ns, "link", "set", net.veth_peer, "name", WORKER_DEVICE)
            await _ip(*ns, "addr", "add", f"{net.address}/{self.subnet.prefixlen}", "dev", WORKER_DEVICE)
            await _ip(*ns, "link", "set", WORKER_DEVICE, "up")
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
