"""Small TCP/UDP probes run inside worker namespaces by tests and the benchmark.

``python -m rlark_tunnel_agent.tunnel.probe <command> ...``:

- ``serve PORT``: TCP server; each connection is either an echo (first byte ``E``) or a sink
  (first byte ``S``) that replies with ``<bytes> <sha256>`` of everything after that byte.
- ``send HOST PORT MIB``: send MIB MiB of seeded pseudo-random bytes to a sink and print
  ``<bytes> <sha256>`` as sent, then the sink's reply (they must match).
- ``rtt HOST PORT COUNT``: COUNT one-byte round trips on one connection; print the median and
  p99 in microseconds as JSON.
- ``udp-count PORT SECONDS [STOP_AFTER]``: count UDP datagrams by source for SECONDS, or until
  STOP_AFTER datagrams arrived; print ``{source: count}`` as JSON.
- ``udp-send SRC DST PORT COUNT``: send COUNT UDP datagrams with a raw socket and the *given*
  source address (forged when SRC is not ours).
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import socketserver
import statistics
import struct
import sys
import time


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = sock.recv(1)
        if mode == b"E":
            while data := sock.recv(65536):
                sock.sendall(data)
        elif mode == b"S":
            digest = hashlib.sha256()
            total = 0
            while data := sock.recv(1 << 20):
                digest.update(data)
                total += len(data)
                if total >= self.server.expect:  # type: ignore[attr-defined]
                    break
            sock.sendall(f"{total} {digest.hexdigest()}\n".encode())


class _Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
    expect = 1 << 62


def serve(port: int) -> None:
    with _Server(("0.0.0.0", port), _Handler) as server:  # noqa: S104 - worker's own namespace
        print("LISTENING", flush=True)
        server.serve_forever()


def send(host: str, port: int, mib: int) -> None:
    rng = random.Random(mib)
    block = rng.randbytes(1 << 20)
    digest = hashlib.sha256()
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(b"S")
        for index in range(mib):
            chunk = block[index % 7 :] + block[: index % 7]  # not the same MiB twice in a row
            digest.update(chunk)
            sock.sendall(chunk)
        sock.shutdown(socket.SHUT_WR)
        reply = sock.makefile().readline().strip()
    print(f"{mib << 20} {digest.hexdigest()}")
    print(reply)


def rtt(host: str, port: int, count: int) -> None:
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"E")
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            sock.sendall(b"x")
            sock.recv(1)
            samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    result = {
        "median_us": round(statistics.median(samples), 1),
        "p99_us": round(samples[int(len(samples) * 0.99) - 1], 1),
    }
    print(json.dumps(result))


def udp_count(port: int, seconds: float, stop_after: int | None = None) -> None:
    sources: dict[str, int] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("0.0.0.0", port))  # noqa: S104 - worker's own namespace
        print("LISTENING", flush=True)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                _, (source, _) = sock.recvfrom(2048)
            except TimeoutError:
                break
            sources[source] = sources.get(source, 0) + 1
            if stop_after is not None and sum(sources.values()) >= stop_after:
                break
    print(json.dumps(sources))


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return int(~total & 0xFFFF)


def udp_datagram(source: str, destination: str, port: int, payload: bytes) -> bytes:
    """An IPv4 packet carrying one UDP datagram, with a valid IP header checksum."""
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload
    header = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(udp),
        0,
        0,
        64,
        socket.IPPROTO_UDP,
        0,
        socket.inet_aton(source),
        socket.inet_aton(destination),
    )
    return header[:10] + struct.pack("!H", _checksum(header)) + header[12:] + udp


def udp_send(source: str, destination: str, port: int, count: int) -> None:
    packet = udp_datagram(source, destination, port, b"rlark-probe")
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as sock:
        for _ in range(count):
            sock.sendto(packet, (destination, 0))


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "serve":
        serve(int(args[0]))
    elif command == "send":
        send(args[0], int(args[1]), int(args[2]))
    elif command == "rtt":
        rtt(args[0], int(args[1]), int(args[2]))
    elif command == "udp-count":
        udp_count(int(args[0]), float(args[1]), int(args[2]) if len(args) > 2 else None)
    elif command == "udp-send":
        udp_send(args[0], args[1], int(args[2]), int(args[3]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
