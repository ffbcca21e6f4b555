"""A full test-bed cluster's Service data path and DNS: what kube-proxy and CoreDNS do there (ADR 0027).

Role: the deployment test bed's clusters get real Services — ClusterIPs allocated by their API server,
EndpointSlices kept by their kube-controller-manager from pod readiness — and this process makes them
reachable: it routes each ClusterIP port to the ready endpoints of its slices (nftables DNAT, a random
endpoint per connection, the connection masqueraded so replies come back through it), rejects connections
to a Service with none, and answers DNS for ``<service>.<namespace>.svc.cluster.local`` (the ClusterIP; a
headless Service's ready endpoints). kube-proxy cannot do it here: its iptables and nftables modes own
machine-wide chains and a table named ``kube-proxy``, and the three clusters' nodes share this machine's
network namespace, so three kube-proxies would rewrite each other's rules; CoreDNS is a large build for an
answer this small. Each cluster has its own Service range (`testbed.service_cidr`), so one nftables table
per cluster (``rlark-svc-<tag>-<cluster>``) never overlaps another's.

The cluster DNS is itself a Service, as kube-dns is: ``kube-system/kube-dns`` at ``<range>.10`` (the kubelets'
``clusterDNS``) with an EndpointSlice naming this process's own address and port.

Concurrency: one asyncio loop; the sync task polls Services and EndpointSlices every ``POLL_S`` and applies
a changed ruleset in one ``nft -f`` transaction; the DNS servers (UDP and TCP) read the last snapshot.
SIGTERM removes the table. Run as ``python -m rlark_devinfra.k8s.netsvc <cluster>``; started and stopped by
`deployment` (and `testbed.down`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import struct
import subprocess
import sys
import time
import urllib.error
from dataclasses import dataclass, field
from typing import Any, cast

from rlark_devinfra.k8s.testbed import Cluster, cluster, request, service_cidr, service_ip

POLL_S = 0.5
DNS_SERVICE = ("kube-system", "kube-dns")
CLUSTER_DOMAIN = "cluster.local"
MASQUERADE_MARK = 0x00400000
"""Set on every connection this table DNATs; its postrouting chain masquerades those."""


def table_name(cluster_name: str) -> str:
    from rlark_devinfra.k8s.realnode import _machine_tag

    return f"rlark-svc-{_machine_tag()}-{cluster_name}"


@dataclass(frozen=True)
class ServicePort:
    protocol: str
    port: int
    endpoints: tuple[tuple[str, int], ...]


@dataclass
class Snapshot:
    """What the API server says now: routes per ClusterIP and the DNS names."""

    routes: dict[str, list[ServicePort]] = field(default_factory=dict)
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)


def snapshot(services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> Snapshot:
    """Routes and names from Services and EndpointSlices (only ready endpoints, as kube-proxy)."""
    ready: dict[tuple[str, str], dict[str, set[tuple[str, int]]]] = {}
    addresses: dict[tuple[str, str], set[str]] = {}
    for item in slices:
        meta = item["metadata"]
        owner = (meta["namespace"], (meta.get("labels") or {}).get("kubernetes.io/service-name", ""))
        for endpoint in item.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                addresses.setdefault(owner, set()).add(address)
                for port in item.get("ports") or []:
                    key = f"{port.get('name') or ''}/{port.get('protocol') or 'TCP'}"
                    ready.setdefault(owner, {}).setdefault(key, set()).add((address, int(port["port"])))
    found = Snapshot()
    for service in services:
        meta, spec = service["metadata"], service["spec"]
        owner = (meta["namespace"], meta["name"])
        fqdn = f"{meta['name']}.{meta['namespace']}.svc.{CLUSTER_DOMAIN}"
        ip = spec.get("clusterIP") or ""
        if ip in ("", "None"):
            found.names[fqdn] = tuple(sorted(addresses.get(owner, ())))
            continue
        found.names[fqdn] = (ip,)
        ports = []
        for port in spec.get("ports") or []:
            protocol = port.get("protocol") or "TCP"
            key = f"{port.get('name') or ''}/{protocol}"
            ports.append(
                ServicePort(
                    protocol.lower(), int(port["port"]), tuple(sorted(ready.get(owner, {}).get(key, ())))
                )
            )
        found.routes[ip] = ports
    return found


def ruleset(name: str, cidr: str, routes: dict[str, list[ServicePort]]) -> str:
    """One nftables transaction replacing the cluster's table."""
    lines = []
    for ip, ports in sorted(routes.items()):
        for port in ports:
            if not port.endpoints:
                continue
            match = f"ip daddr {ip} {port.protocol} dport {port.port} meta mark set meta mark | {MASQUERADE_MARK:#010x}"
            if len(port.endpoints) == 1:
                address, target = port.endpoints[0]
                lines.append(f"    {match} dnat ip to {address} : {target}")
            else:
                mapping = ", ".join(f"{i} : {a} . {p}" for i, (a, p) in enumerate(port.endpoints))
                lines.append(
                    f"    {match} dnat ip to numgen random mod {len(port.endpoints)} map {{ {mapping} }}"
                )
    rejects = f"ip daddr {cidr} meta l4proto tcp reject with tcp reset; ip daddr {cidr} reject with icmp type port-unreachable;"
    services = "\n".join(lines)
    return f"""table ip {name} {{}}
delete table ip {name}
table ip {name} {{
  chain prerouting {{ type nat hook prerouting priority dstnat; policy accept; jump services; }}
  chain output {{ type nat hook output priority -100; policy accept; jump services; }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    meta mark & {MASQUERADE_MARK:#010x} == {MASQUERADE_MARK:#010x} masquerade;
  }}
  chain services {{
{services}
  }}
  chain no_endpoints_forward {{ type filter hook forward priority 0; policy accept; {rejects} }}
  chain no_endpoints_output {{ type filter hook output priority 0; policy accept; {rejects} }}
}}
"""


def apply(text: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=text, text=True, check=True, capture_output=True)


def remove(cluster_name: str) -> None:
    """Delete the cluster's table (a no-op when there is none)."""
    subprocess.run(
        ["nft", "delete", "table", "ip", table_name(cluster_name)], capture_output=True, check=False
    )


# --- DNS -------------------------------------------------------------------------------------------------


def _question(packet: bytes) -> tuple[str, int, int]:
    """The first question's name, type and the offset after it."""
    labels, offset = [], 12
    while True:
        length = packet[offset]
        offset += 1
        if length == 0:
            break
        labels.append(packet[offset : offset + length].decode("ascii", "replace").lower())
        offset += length
    qtype = struct.unpack("!H", packet[offset : offset + 2])[0]
    return ".".join(labels), qtype, offset + 4


def answer(packet: bytes, names: dict[str, tuple[str, ...]]) -> bytes:
    """The reply to one DNS query: A records of a known name; NXDOMAIN for an unknown one (the search list
    tries several before the real one, so it must be quick); no records for other types of a known name."""
    ident, flags = struct.unpack("!HH", packet[:4])
    try:
        name, qtype, end = _question(packet)
    except (IndexError, struct.error):
        return struct.pack("!HHHHHH", ident, 0x8000 | 0x0001, 0, 0, 0, 0)  # FORMERR
    question = packet[12:end]
    addresses = names.get(name)
    rcode = 3 if addresses is None else 0
    records = b""
    count = 0
    if addresses and qtype == 1:
        for address in addresses:
            octets = bytes(int(part) for part in address.split("."))
            records += struct.pack("!HHHIH", 0xC00C, 1, 1, 5, 4) + octets
            count += 1
    reply_flags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode  # QR, AA, RD copied, RA
    return struct.pack("!HHHHHH", ident, reply_flags, 1, count, 0, 0) + question + records


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, state: Snapshot) -> None:
        self.state = state
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(answer(data, self.state.names), addr)


async def _tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, state: Snapshot) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            reply = answer(await reader.readexactly(length), state.names)
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
    writer.close()


# --- the process -------------------------------------------------------------------------------------------


def _publish_dns(target: Cluster, host: str, port: int) -> None:
    """``kube-system/kube-dns`` at ``<range>.10`` with an EndpointSlice naming this process."""
    namespace, name = DNS_SERVICE
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "clusterIP": service_ip(target.name, 10),
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": port},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": port},
            ],
        },
    }
    with contextlib.suppress(urllib.error.HTTPError):
        request(target, "POST", f"/api/v1/namespaces/{namespace}/services", service)
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-testbed",
            "namespace": namespace,
            "labels": {
                "kubernetes.io/service-name": name,
                "endpointslice.kubernetes.io/managed-by": "netsvc.rlark.io",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [host], "conditions": {"ready": True}}],
        "ports": [
            {"name": "dns", "port": port, "protocol": "UDP"},
            {"name": "dns-tcp", "port": port, "protocol": "TCP"},
        ],
    }
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    with contextlib.suppress(urllib.error.HTTPError):
        request(target, "DELETE", f"{path}/{name}-testbed")
    request(target, "POST", path, endpoints)


async def run(cluster_name: str) -> None:
    from rlark_devinfra.k8s.realnode import node_address
    from rlark_devinfra.process import free_port

    target = cluster(cluster_name)
    host = node_address()
    port = free_port()
    state = Snapshot()
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: _Udp(state), local_addr=(host, port))
    server = await asyncio.start_server(lambda r, w: _tcp(r, w, state), host, port)
    await asyncio.to_thread(_publish_dns, target, host, port)
    name, cidr = table_name(cluster_name), service_cidr(cluster_name)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    applied = ""
    print(f"netsvc {cluster_name}: DNS on {host}:{port}, table {name}", flush=True)
    while not stop.is_set():
        try:
            services = await asyncio.to_thread(request, target, "GET", "/api/v1/services")
            slices = await asyncio.to_thread(
                request, target, "GET", "/apis/discovery.k8s.io/v1/endpointslices"
            )
            fresh = snapshot(services["items"], slices["items"])
            state.names = fresh.names
            text = ruleset(name, cidr, fresh.routes)
            if text != applied:
                await asyncio.to_thread(apply, text)
                applied = text
                print(f"{time.strftime('%T')} applied {len(fresh.routes)} service addresses", flush=True)
        except Exception as exc:  # the API server restarting, a bad answer: try again next round
            print(f"{time.strftime('%T')} sync failed: {exc!r}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_S)
    server.close()
    remove(cluster_name)


def main() -> None:
    if len(sys.argv) != 2:
        print("usage: python -m rlark_devinfra.k8s.netsvc <cluster>", file=sys.stderr)
        raise SystemExit(2)
    asyncio.run(run(sys.argv[1]))


if __name__ == "__main__":
    main()
