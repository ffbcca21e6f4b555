"""Tunnel benchmark: RLark's tunnel against OpenSSH ``ssh -w``, same namespaces, same run.

``uv run python -m rlark_tunnel_agent.tunnel.bench [--mtu 1500 --mtu 65000] [--seconds 8]`` (root)

For each MTU it builds the two-cluster test bed (``testbed.TunnelBed``) and measures, worker A1 ↔
worker B1:

- RLark: A1's TUN → agent A → asyncssh (aes128-gcm) → agent B → B1's TUN;
- OpenSSH: ``ssh -w`` point-to-point tun between the two agent namespaces (aes128-gcm, MTU
  min(mtu, 16000) because ``-w`` loses a direction on larger packets), workers routed to it over
  a veth pair each (extra, cheap kernel hops; the workers are the same namespaces).

Numbers: single-stream iperf3 throughput both directions (Mbit/s), ping RTT (median of 20, ms)
and a one-byte TCP round trip (median of 500, µs). Prints one JSON line per MTU and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlark_tunnel_agent.tunnel.testbed import TunnelBed
from rlark_tunnel_agent.tunnel.tun import DEFAULT_MTU

OPENSSH_PORT = 2223
PROBE_PORT = 7100


def _iperf(bed: TunnelBed, client: str, server_address: str, seconds: int, reverse: bool) -> float:
    """Received throughput in Mbit/s; 0.0 (with the error on stderr) when iperf3 failed."""
    argv = ["iperf3", "-c", server_address, "-t", str(seconds), "-J"]
    if reverse:
        argv.append("-R")
    out = bed.run(client, *argv, timeout_s=seconds + 30, check=False).stdout
    result = json.loads(out or "{}")
    received = result.get("end", {}).get("sum_received")
    if received is None:
        print(f"iperf3 to {server_address} failed: {result.get('error', out)}", file=sys.stderr)
        return 0.0
    return round(float(received["bits_per_second"]) / 1e6, 1)


def _ping_ms(bed: TunnelBed, worker: str, address: str) -> float:
    out = bed.run(worker, "ping", "-c", "20", "-i", "0.05", "-q", address).stdout
    # rtt min/avg/max/mdev = a/b/c/d ms
    line = next(x for x in out.splitlines() if "min/avg/max" in x)
    return float(line.split("=")[1].split("/")[1])


def _tcp_rtt_us(bed: TunnelBed, worker: str, address: str) -> float:
    cmd = [sys.executable, "-m", "rlark_tunnel_agent.tunnel.probe", "rtt", address]
    out = bed.run(worker, *cmd, str(PROBE_PORT), "500").stdout
    return float(json.loads(out)["median_us"])


def _measure(bed: TunnelBed, address_a: str, address_b: str, seconds: int) -> dict[str, float]:
    server = bed.popen("b1", "iperf3", "-s", stdout=subprocess.DEVNULL)
    probe = bed.popen(
        "b1",
        sys.executable,
        "-m",
        "rlark_tunnel_agent.tunnel.probe",
        "serve",
        str(PROBE_PORT),
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)
        return {
            "a_to_b_mbps": _iperf(bed, "a1", address_b, seconds, reverse=False),
            "b_to_a_mbps": _iperf(bed, "a1", address_b, seconds, reverse=True),
            "ping_ms": _ping_ms(bed, "a1", address_b),
            "tcp_rtt_us": _tcp_rtt_us(bed, "a1", address_b),
        }
    finally:
        for proc in (server, probe):
            proc.terminate()
            proc.wait(timeout=10)


def _ip(bed: TunnelBed, where: str, *args: str) -> None:
    subprocess.run(bed.argv(where, "ip", *args), check=True, capture_output=True)


def _openssh(bed: TunnelBed, mtu: int, workdir: Path) -> subprocess.Popen[bytes]:
    """sshd in agent B, ``ssh -w 0:0`` from agent A; workers routed over veths. Returns ssh."""
    assert bed.bed is not None
    key = workdir / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    host_key = workdir / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    (workdir / "authorized_keys").write_text((workdir / "id_ed25519.pub").read_text())
    (workdir / "authorized_keys").chmod(0o600)
    config = workdir / "sshd_config"
    config.write_text(
        f"Port {OPENSSH_PORT}\nListenAddress 0.0.0.0\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {workdir}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitTunnel point-to-point\nCiphers aes128-gcm@openssh.com\nStrictModes no\n"
        f"PidFile {workdir}/sshd.pid\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    subprocess.run(bed.argv("b", sshd, "-f", str(config)), check=True)
    ssh = bed.popen(
        "a",
        "ssh",
        "-N",
        "-w",
        "0:0",
        "-o",
        "Tunnel=point-to-point",
        "-c",
        "aes128-gcm@openssh.com",
        "-i",
        str(key),
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        f"UserKnownHostsFile={workdir}/known_hosts",
        "-o",
        "BatchMode=yes",
        "-p",
        str(OPENSSH_PORT),
        f"root@{bed.bed.address_of('b', 'a')}",
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while True:
        ok = all(
            subprocess.run(bed.argv(c, "ip", "link", "show", "tun0"), capture_output=True).returncode == 0
            for c in ("a", "b")
        )
        if ok:
            break
        if time.monotonic() > deadline or ssh.poll() is not None:
            raise RuntimeError("ssh -w did not bring up tun0 on both sides")
        time.sleep(0.1)
    tun_mtu = str(min(mtu, 16000))
    for cluster, worker, local, peer, net, far in (
        ("a", "a1", "10.202.0.1", "10.202.0.2", "10.201.0", "10.201.1.0/30"),
        ("b", "b1", "10.202.0.2", "10.202.0.1", "10.201.1", "10.201.0.0/30"),
    ):
        _ip(bed, cluster, "addr", "add", local, "peer", peer, "dev", "tun0")
        _ip(bed, cluster, "link", "set", "tun0", "mtu", tun_mtu, "txqueuelen", "4000", "up")
        _ip(bed, cluster, "route", "add", far, "dev", "tun0")
        subprocess.run(bed.argv(cluster, "sysctl", "-qw", "net.ipv4.ip_forward=1"), check=True)
        veth_agent, veth_worker = f"bv{cluster}0", f"bv{cluster}1"
        _ip(bed, cluster, "link", "add", veth_agent, "type", "veth", "peer", "name", veth_worker)
        _ip(bed, cluster, "link", "set", veth_worker, "netns", bed.bed.workers[worker])
        _ip(bed, cluster, "addr", "add", f"{net}.1/30", "dev", veth_agent)
        _ip(bed, cluster, "link", "set", veth_agent, "mtu", tun_mtu, "up")
        _ip(bed, worker, "addr", "add", f"{net}.2/30", "dev", veth_worker)
        _ip(bed, worker, "link", "set", veth_worker, "mtu", tun_mtu, "up")
        _ip(bed, worker, "route", "add", "10.201.0.0/16", "via", f"{net}.1")
    return ssh


def run_once(mtu: int, seconds: int) -> dict[str, Any]:
    """Both data paths at one MTU, in one test bed."""
    result: dict[str, Any] = {"mtu": mtu, "loadavg_1m_before": round(os.getloadavg()[0], 2)}
    with TunnelBed(f"bench{mtu}", options={"mtu": mtu}) as bed:
        result["rlark"] = _measure(bed, bed.vip("a1"), bed.vip("b1"), seconds)
        workdir = Path(tempfile.mkdtemp(prefix="rlark-bench-ssh-"))
        ssh = _openssh(bed, mtu, workdir)
        try:
            result["openssh"] = _measure(bed, "10.201.0.2", "10.201.1.2", seconds)
            result["openssh"]["mtu"] = min(mtu, 16000)
        finally:
            ssh.terminate()
            ssh.wait(timeout=10)
            # sshd runs inside agent B's namespace: the bed's teardown kills it
            shutil.rmtree(workdir, ignore_errors=True)
    for direction in ("a_to_b_mbps", "b_to_a_mbps"):
        result[f"ratio_{direction.removesuffix('_mbps')}"] = round(
            result["rlark"][direction] / max(result["openssh"][direction], 0.001), 2
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_tunnel_agent.tunnel.bench")
    parser.add_argument("--mtu", type=int, action="append")
    parser.add_argument("--seconds", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    for mtu in args.mtu or [1500, DEFAULT_MTU]:
        rows.append(run_once(mtu, args.seconds))
        print(json.dumps(rows[-1]), flush=True)
    print(f"{'mtu':>6} {'path':>8} {'A→B Mbit/s':>12} {'B→A Mbit/s':>12} {'ping ms':>8} {'tcp rtt µs':>11}")
    for row in rows:
        for path in ("rlark", "openssh"):
            m = row[path]
            print(
                f"{row['mtu']:>6} {path:>8} {m['a_to_b_mbps']:>12} {m['b_to_a_mbps']:>12} "
                f"{m['ping_ms']:>8} {m['tcp_rtt_us']:>11}"
            )
    print(
        f"cores: {os.cpu_count()}, load average (1 min) before each MTU: "
        f"{[r['loadavg_1m_before'] for r in rows]}"
    )
    ratios = {r["mtu"]: min(r["ratio_a_to_b"], r["ratio_b_to_a"]) for r in rows}
    print(f"throughput rlark/openssh, worse direction, per MTU: {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
