"""A stand-alone tunnel node: one domain's forwarder in its own process, driven over a socket.

Role: run the data path of one (cluster, domain) as its own process — inside the cluster's
network namespace in the test bed and the benchmark (``ip netns exec <ns> python -m
rlark_tunnel_agent.tunnel.node --config <file>``), so each agent gets its own CPU like a real
agent would. The forwarder is ``new_forwarder``'s pick: the Go data path when the config names
``dataplane`` (its ``rlark-tunnel-dp`` then runs as this node's child), else the asyncio
``TunnelForwarder``. The tunnel-agent service builds its forwarders the same way, in-process.

The config file is JSON (see ``NodeConfig.from_json``). The node prints ``READY <port>`` once its
SSH endpoint listens and its initial workers are attached, then answers one JSON request per line
on the Unix socket ``control``: ``{"op": "state"}``, ``{"op": "attach", "worker", "netns",
"address"}``, ``{"op": "detach", "worker"}``, ``{"op": "remote", "cluster", "addresses"}``,
``{"op": "stop"}``. Replies are ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
SIGTERM stops it cleanly (TUN devices removed, tunnels closed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.tunnel.dataplane import new_forwarder
from rlark_tunnel_agent.tunnel.forwarder import ForwarderConfig, PeerSpec, TunnelForwarder
from rlark_tunnel_agent.tunnel.keys import read_private_key
from rlark_tunnel_agent.tunnel.sidecar import SidecarServer
from rlark_tunnel_agent.tunnel.supervisor import Forwarder

_TUNABLES = (
    "listen_host",
    "listen_port",
    "mtu",
    "txqueuelen",
    "tun_name",
    "offload",
    "batch_packets",
    "ping_interval_s",
    "dead_after_s",
    "connect_timeout_s",
    "backoff_max_s",
    "dataplane",
    "dataplane_transport",
    "dataplane_profile_dir",
)


@dataclass(frozen=True, slots=True)
class NodeConfig:
    forwarder: ForwarderConfig
    private_key_file: Path
    control: Path
    peers: list[PeerSpec]
    remote: dict[str, list[IPv4Address]]
    workers: list[tuple[str, str, IPv4Address]]
    sidecar_listen: tuple[str, int] | None
    sidecars: list[tuple[str, IPv4Address, str]]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NodeConfig:
        """Keys: domain, network, cluster, private_key_file, control, peers (cluster,
        public_key, endpoint [host, port] or null, via, addresses), workers (worker, netns,
        address), optionally sidecar_listen [host, port] and sidecars (worker, address, token),
        and any ``ForwarderConfig`` tunable."""
        tunables = {name: raw[name] for name in _TUNABLES if name in raw}
        forwarder = ForwarderConfig(
            domain=raw["domain"],
            network=IPv4Network(raw["network"]),
            cluster=raw["cluster"],
            **tunables,
        )
        peers = [
            PeerSpec(
                cluster=p["cluster"],
                public_key=p["public_key"],
                endpoint=(p["endpoint"][0], int(p["endpoint"][1])) if p.get("endpoint") else None,
                via=p.get("via"),
            )
            for p in raw.get("peers", [])
        ]
        remote = {
            p["cluster"]: [IPv4Address(a) for a in p.get("addresses", [])] for p in raw.get("peers", [])
        }
        workers = [(w["worker"], w["netns"], IPv4Address(w["address"])) for w in raw.get("workers", [])]
        listen = raw.get("sidecar_listen")
        sidecars = [(c["worker"], IPv4Address(c["address"]), c["token"]) for c in raw.get("sidecars", [])]
        return cls(
            sidecar_listen=(listen[0], int(listen[1])) if listen else None,
            sidecars=sidecars,
            forwarder=forwarder,
            private_key_file=Path(raw["private_key_file"]),
            control=Path(raw["control"]),
            peers=peers,
            remote=remote,
            workers=workers,
        )


async def _handle(forwarder: Forwarder, request: dict[str, Any], stop: asyncio.Event) -> Any:
    op = request.get("op")
    if op == "state":
        return {"state": forwarder.state().as_dict()}
    if op == "attach":
        await forwarder.attach_worker(request["worker"], request["netns"], IPv4Address(request["address"]))
        return {}
    if op == "detach":
        await forwarder.detach_worker(request["worker"])
        return {}
    if op == "remote":
        addresses = [IPv4Address(a) for a in request["addresses"]]
        forwarder.set_remote_addresses(request["cluster"], addresses)
        return {}
    if op == "stop":
        stop.set()
        return {}
    raise ValueError(f"unknown op {op!r}")


async def serve(config: NodeConfig) -> None:
    forwarder = new_forwarder(config.forwarder, read_private_key(config.private_key_file))
    if not isinstance(forwarder, TunnelForwarder) and config.sidecars:
        raise ValueError("sidecars: a worker's sidecar stream needs the asyncio forwarder (no dataplane)")
    sidecars = SidecarServer(forwarder if isinstance(forwarder, TunnelForwarder) else None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                try:
                    reply = {"ok": True, **await _handle(forwarder, json.loads(line), stop)}
                except Exception as exc:
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        writer.close()

    with contextlib.suppress(FileNotFoundError):
        config.control.unlink()
    server = await asyncio.start_unix_server(client, path=str(config.control))
    try:
        port = await forwarder.start()
        await forwarder.set_peers(config.peers)
        for cluster, addresses in config.remote.items():
            forwarder.set_remote_addresses(cluster, addresses)
        for worker, netns, address in config.workers:
            await forwarder.attach_worker(worker, netns, address)
        if config.sidecar_listen is not None:
            await sidecars.start(*config.sidecar_listen)
            for worker, address, token in config.sidecars:
                sidecars.expect(worker, address, token)
        print(f"READY {port}", flush=True)
        await stop.wait()
    finally:
        server.close()
        await sidecars.stop()
        await forwarder.stop()
        with contextlib.suppress(FileNotFoundError):
            config.control.unlink()


def request(control: Path, message: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one control request to a node and return its reply (blocking; for tests and tools)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(str(control))
        sock.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    reply: dict[str, Any] = json.loads(data)
    if not reply.get("ok"):
        raise RuntimeError(f"tunnel node: {reply.get('error')}")
    return reply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_tunnel_agent.tunnel.node")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    config = NodeConfig.from_json(json.loads(args.config.read_text()))
    try:
        asyncio.run(serve(config))
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
