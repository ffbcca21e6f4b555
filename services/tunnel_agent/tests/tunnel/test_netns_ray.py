"""Ray 2.60 spanning two clusters over the tunnel: head in a1, workers in b1 and b2.

The workers' namespaces have no interface but ``lo`` and their TUN device, so every byte Ray
exchanges between nodes crosses the SSH tunnel between the two agents. Needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rlark_devinfra.tunnel_testbed import TunnelBed

pytestmark = pytest.mark.netns

RAY = str(Path(sys.executable).with_name("ray"))

DRIVER = """
import hashlib, json, sys, time, ray
ray.init(address=sys.argv[1], _node_ip_address=sys.argv[2], logging_level="ERROR")
deadline = time.monotonic() + 90
while len([n for n in ray.nodes() if n["Alive"]]) < 3 and time.monotonic() < deadline:
    time.sleep(0.5)
ips = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
if len(ips) < 3:
    sys.exit(f"only {len(ips)} of 3 Ray nodes joined in 90 s: {ips}")

@ray.remote(resources={"b1": 1})
def make():
    import os
    data = os.urandom(100 << 20)
    return data, hashlib.sha256(data).hexdigest()

data_ref, digest_ref = make.options(num_returns=2).remote()
started = time.monotonic()
data = ray.get(data_ref)
seconds = time.monotonic() - started
print(json.dumps({"ips": ips, "size": len(data), "intact": hashlib.sha256(data).hexdigest() == ray.get(digest_ref), "get_s": round(seconds, 2)}))
"""


def ray_env() -> dict[str, str]:
    # Under `uv run`, Ray would rebuild the uv project on every node (and fetch build tools):
    # the nodes share this machine's venv, so turn that off.
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}


@pytest.fixture(scope="module")
def ray_bed() -> Iterator[TunnelBed]:
    with TunnelBed(f"r{os.getpid() % 100000}") as bed:
        procs: list[subprocess.Popen[bytes]] = []
        # Short: Ray's Unix sockets live under it and a socket path has 107 bytes at most (pytest's temporary
        # directories under xdist, ".../pytest-N/popen-gw0/ray0/a1/session_<date>_<pid>/sockets/…", pass that).
        temp = Path(tempfile.mkdtemp(prefix="rlkray-"))
        env = ray_env()
        common = ["--block", "--num-cpus=1", "--disable-usage-stats"]
        try:
            head = bed.vip("a1")
            procs.append(
                bed.popen(
                    "a1",
                    *[RAY, "start", "--head", f"--node-ip-address={head}", "--port=6379"],
                    "--include-dashboard=false",
                    *common,
                    f"--temp-dir={temp}/a1",
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            time.sleep(3)
            for worker in ("b1", "b2"):
                procs.append(
                    bed.popen(
                        worker,
                        *[RAY, "start", f"--address={head}:6379"],
                        f"--node-ip-address={bed.vip(worker)}",
                        f"--resources={json.dumps({worker: 1})}",
                        *common,
                        f"--temp-dir={temp}/{worker}",
                        env=env,
                        start_new_session=True,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            yield bed
        finally:
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            # anything Ray left in the namespaces dies with the bed (namespace pids are killed)
            shutil.rmtree(temp, ignore_errors=True)


def test_ray_nodes_on_virtual_ips_across_clusters_move_a_100_mib_object(ray_bed: TunnelBed) -> None:
    head = ray_bed.vip("a1")
    out = ray_bed.run(
        "a1",
        sys.executable,
        "-c",
        DRIVER,
        f"{head}:6379",
        head,  # the driver's own address; Ray would guess one outside the namespace
        timeout_s=240,
        env=ray_env(),
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ips"] == sorted([head, ray_bed.vip("b1"), ray_bed.vip("b2")])
    assert result["size"] == 100 << 20
    assert result["intact"] is True
    carried = ray_bed.peer_state("b", "a")["counters"]["bytes_out"]
    assert carried > 100 << 20  # the object crossed the tunnel from cluster b to cluster a
    print(f"100 MiB B→A in {result['get_s']} s")
