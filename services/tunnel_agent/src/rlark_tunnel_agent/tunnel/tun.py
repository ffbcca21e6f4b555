"""TUN devices for workers, created by the agent inside the worker's network namespace.

Role: the worker-side link of the data path on the local runtime (and in the network sidecar on
Kubernetes). The agent thread enters the worker's network namespace (``setns``), opens
``/dev/net/tun`` there and comes back: the device lives in the worker's namespace, holding the
worker's virtual IP and the route for the domain network, while the file descriptor stays with the
agent. Packets the worker sends into the domain network are read straight from that descriptor —
no veth hop, no second TUN, no process in the worker.

Devices are opened with ``IFF_VNET_HDR`` and, by default, checksum and TCP segmentation offload
(``TUNSETOFFLOAD``): the worker's TCP stack then hands out super-packets of up to 64 KiB even at
MTU 1500, each preceded by a 10-byte ``virtio_net_hdr`` describing how to segment it. The agent
forwards header and packet unchanged and the receiving kernel accepts them as they are, so the
per-packet cost of the (Python) forwarder is paid once per ~40 MTU-sized segments. The header
fields are in the host's byte order; all RLark hosts are little-endian (x86-64, arm64).

Only the calling thread changes namespace; the agent's event loop thread never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

TUNSETIFF = 0x400454CA
TUNSETOFFLOAD = 0x400454D0
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04
CLONE_NEWNET = 0x40000000

DEFAULT_MTU = 65000
"""Measured (README.md): with TSO the MTU matters less for TCP, yet 65000 beat 9000 and 1500."""
DEFAULT_TXQUEUELEN = 4000
READ_SIZE = 65536 + 64
"""Large enough for the biggest super-packet plus its virtio-net header."""

_libc = ctypes.CDLL(None, use_errno=True)


class TunError(RuntimeError):
    """Creating or configuring a TUN device failed."""


def netns_path(netns: str) -> str:
    """A namespace given by name (``ip netns``) or by path (``/proc/<pid>/ns/net``)."""
    return netns if netns.startswith("/") else f"/var/run/netns/{netns}"


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def run_in_netns(netns: str, fn: Callable[[], T]) -> T:
    """Run ``fn()`` on a short-lived thread that has entered ``netns``; return its result.

    Sockets and devices created by ``fn`` belong to that namespace for their whole life.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(netns_path(netns), os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                result.append(fn())
            finally:
                _setns(own)
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)
        finally:
            os.close(own)

    thread = threading.Thread(target=body, name=f"netns:{netns}", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def _create_tun(name: str, offload: bool) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI | IFF_VNET_HDR)
        fcntl.ioctl(fd, TUNSETIFF, ifr)
        if offload:
            fcntl.ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6)
    except OSError:
        os.close(fd)
        raise
    return fd


def open_tun(netns: str | None, name: str, *, offload: bool = True) -> int:
    """Create TUN device ``name`` in ``netns`` (``None``: the caller's own); return its fd.

    The fd is non-blocking and close-on-exec; closing it removes the device.
    """
    if not 0 < len(name) <= 15:
        raise TunError(f"interface name {name!r} must have 1 to 15 characters")
    try:
        if netns is None:
            return _create_tun(name, offload)
        return run_in_netns(netns, lambda: _create_tun(name, offload))
    except OSError as exc:
        raise TunError(f"cannot create TUN {name} in {netns or 'own namespace'}: {exc}") from exc


async def _ip(netns: str | None, *args: str) -> None:
    if netns is None:
        prefix = ["ip"]
    elif netns.startswith("/"):
        prefix = ["nsenter", f"--net={netns}", "ip"]
    else:
        prefix = ["ip", "-n", netns]
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise TunError(f"ip {' '.join(args)} in {netns}: {err.decode(errors='replace').strip()}")


def _disable_ipv6(name: str) -> None:
    # No IPv6 on the device: the kernel would otherwise send router solicitations and MLD
    # reports into the tunnel, which the router drops as not_ipv4 anyway.
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6").write_text("1")


async def configure_tun(
    netns: str | None,
    name: str,
    address: IPv4Interface,
    *,
    mtu: int = DEFAULT_MTU,
    txqueuelen: int = DEFAULT_TXQUEUELEN,
) -> None:
    """Give the device its virtual IP (the prefix adds the route for the domain network), MTU,
    queue length, and bring it up. Idempotent."""
    if netns is not None:
        await asyncio.to_thread(run_in_netns, netns, lambda: _disable_ipv6(name))
    else:
        _disable_ipv6(name)
    await _ip(netns, "link", "set", "dev", name, "mtu", str(mtu), "txqueuelen", str(txqueuelen))
    await _ip(netns, "addr", "replace", str(address), "dev", name)
    await _ip(netns, "link", "set", "dev", name, "up")


@dataclass(frozen=True, slots=True)
class TunDevice:
    """An open TUN device: its fd (owned by the agent), name and namespace."""

    fd: int
    name: str
    netns: str | None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
