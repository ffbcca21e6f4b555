"""A test bed of emulated clusters built from Linux network namespaces (root only).

Role: give tunnel tests and benchmarks real, isolated networks on one machine. Each cluster is an
agent namespace; clusters reach each other only through the veth links listed in ``links`` (one
/30 each from 172.31.254.0/24); workers are empty namespaces (only ``lo``) whose sole way out is
what their cluster's tunnel-agent gives them (a TUN device it creates there). Nothing is routed to
or from the host's own namespace.

Every name starts with ``prefix`` (default ``rlktb-``) so ``cleanup`` can find and remove exactly
what a test bed made — after killing the processes still running inside those namespaces — even
after a crashed test run::

    python -m rlark_devinfra.netns create --tag demo
    python -m rlark_devinfra.netns show
    python -m rlark_devinfra.netns cleanup

Needs iproute2 (``ip``); the tunnel tests also use iperf3, iputils-ping and OpenSSH.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from ipaddress import IPv4Interface, IPv4Network

DEFAULT_PREFIX = "rlktb-"
UNDERLAY = IPv4Network("172.31.254.0/24")


class NetnsError(RuntimeError):
    """An ``ip`` command failed."""


def ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


@dataclass(frozen=True, slots=True)
class Link:
    """A veth pair between two agent namespaces."""

    a: str
    b: str
    dev_a: str
    dev_b: str
    addr_a: str
    addr_b: str


@dataclass(slots=True)
class TestBed:
    """Names and addresses of one test bed; ``agents[c]`` / ``workers[w]`` are namespace names."""

    tag: str
    prefix: str
    agents: dict[str, str] = field(default_factory=dict)
    workers: dict[str, str] = field(default_factory=dict)
    worker_cluster: dict[str, str] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)

    def link(self, a: str, b: str) -> Link:
        return next(lk for lk in self.links if {lk.a, lk.b} == {a, b})

    def address_of(self, cluster: str, towards: str) -> str:
        """The underlay address of ``cluster``'s agent on its link towards ``towards``."""
        lk = self.link(cluster, towards)
        return (lk.addr_a if lk.a == cluster else lk.addr_b).split("/")[0]

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Cut (``up=False``) or restore the link between two clusters, on both ends."""
        lk = self.link(a, b)
        state = "up" if up else "down"
        ip("-n", self.agents[lk.a], "link", "set", "dev", lk.dev_a, state)
        ip("-n", self.agents[lk.b], "link", "set", "dev", lk.dev_b, state)

    def exec_argv(self, namespace: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", namespace, *argv]

    def destroy(self) -> None:
        for namespace in [*self.workers.values(), *self.agents.values()]:
            remove_namespace(namespace)


def _ns_name(prefix: str, tag: str, role: str) -> str:
    return f"{prefix}{tag}-{role}"


def _add_namespace(name: str) -> None:
    remove_namespace(name)
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "lo", "up")


def create(
    tag: str,
    clusters: dict[str, Sequence[str]],
    links: Sequence[tuple[str, str]] | None = None,
    *,
    prefix: str = DEFAULT_PREFIX,
) -> TestBed:
    """Build the test bed: one agent namespace per cluster, one namespace per worker, and a veth
    link per pair in ``links`` (default: every pair). Rebuilds over leftovers of the same tag."""
    if links is None:
        names = sorted(clusters)
        links = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    bed = TestBed(tag=tag, prefix=prefix)
    try:
        for cluster, workers in clusters.items():
            bed.agents[cluster] = _ns_name(prefix, tag, f"ag{cluster}")
            _add_namespace(bed.agents[cluster])
            for worker in workers:
                bed.workers[worker] = _ns_name(prefix, tag, worker)
                bed.worker_cluster[worker] = cluster
                _add_namespace(bed.workers[worker])
        subnets = UNDERLAY.subnets(new_prefix=30)
        for index, (a, b) in enumerate(links):
            net = next(subnets)
            hosts = list(net.hosts())
            lk = Link(
                a=a,
                b=b,
                dev_a=f"tb{index}{a}"[:15],
                dev_b=f"tb{index}{b}"[:15],
                addr_a=str(IPv4Interface(f"{hosts[0]}/30")),
                addr_b=str(IPv4Interface(f"{hosts[1]}/30")),
            )
            tmp_a, tmp_b = f"rlktmp{index}a", f"rlktmp{index}b"
            ip("link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
            ip("link", "set", tmp_a, "netns", bed.agents[a], "name", lk.dev_a)
            ip("link", "set", tmp_b, "netns", bed.agents[b], "name", lk.dev_b)
            for cluster, dev, addr in ((a, lk.dev_a, lk.addr_a), (b, lk.dev_b, lk.addr_b)):
                ip("-n", bed.agents[cluster], "addr", "add", addr, "dev", dev)
                ip("-n", bed.agents[cluster], "link", "set", dev, "up")
            bed.links.append(lk)
    except BaseException:
        bed.destroy()
        raise
    return bed


def namespace_pids(name: str) -> list[int]:
    out = ip("netns", "pids", name, check=False)
    return [int(pid) for pid in out.split() if pid.isdigit()]


def remove_namespace(name: str, grace_s: float = 3.0) -> None:
    """Kill what still runs inside ``name`` (SIGTERM, then SIGKILL), then delete it. Idempotent."""
    if name not in list_namespaces(prefix=""):
        return
    pids = namespace_pids(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = namespace_pids(name)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ip("netns", "del", name, check=False)


def list_namespaces(prefix: str = DEFAULT_PREFIX) -> list[str]:
    out = ip("netns", "list", check=False)
    names = (line.split()[0] for line in out.splitlines() if line.strip())
    return [name for name in names if name.startswith(prefix)]


def cleanup(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove every namespace named with ``prefix`` (and stray veths we name); returns them."""
    if not prefix:
        raise ValueError("an empty prefix would match every namespace")
    removed = list_namespaces(prefix)
    for name in removed:
        remove_namespace(name)
    for line in ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":")
        if len(parts) > 1 and parts[1].strip().startswith("rlktmp"):
            ip("link", "del", parts[1].strip().split("@")[0], check=False)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_devinfra.netns", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("create", help="two clusters: a (worker a1) and b (workers b1, b2)")
    make.add_argument("--tag", default="demo")
    make.add_argument("--prefix", default=DEFAULT_PREFIX)
    for name in ("show", "cleanup"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--prefix", default=DEFAULT_PREFIX)
    args = parser.parse_args(argv)
    if args.command == "create":
        bed = create(args.tag, {"a": ["a1"], "b": ["b1", "b2"]}, prefix=args.prefix)
        print(json.dumps(asdict(bed), indent=2))
    elif args.command == "show":
        print("\n".join(list_namespaces(args.prefix)))
    else:
        for name in cleanup(args.prefix):
            print(f"removed {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
