"""What the bootstrap hands `ray start`: the Header's head serves the dashboard on its declared port bound
to its address; every node's Ray (and the run script) gets the contract's environment, the API server
address and the communication devices — exported before `ray start`, which freezes them.

`ray` and `python3` are stand-ins that record their arguments and environment, so no Ray runs here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR
from rlark_tunnel_agent.runtime.bootstrap.rlark_node import EXIT_TIMEOUT
from rlark_tunnel_agent.runtime.contract import LOCAL, RuntimeFacts, compose_env, worker_contract
from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec

pytestmark = pytest.mark.unit

FAKE_RAY = """#!/bin/bash
n=$(ls "$FAKE_LOG" | grep -c '^ray\\.' || true)
printf '%s\\n' "$@" >"$FAKE_LOG/ray.$n.args"
env >"$FAKE_LOG/ray.$n.env"
[[ $1 == start && " $* " == *" --head "* ]]  # a head starts; a join fails (the worker gives up)
"""
FAKE_PYTHON = "#!/bin/bash\nexit 0\n"  # the helper's wait-nodes, probe, reap, manifest: all fine
RUN = 'env >"$FAKE_LOG/run.env"\n'
PORTS = RayPorts(dashboard_port=26001, node_manager_port=26002, object_manager_port=26003)


def _spec(rank: int, join_deadline_s: int = 1) -> WorkerSpec:
    return WorkerSpec(
        job_id="job-b",
        worker_id=f"job-b-w-{rank}",
        cluster="local-test",
        role="w",
        index=rank,
        rank=rank,
        num_nodes=1 if rank == 0 else 2,
        is_header=rank == 0,
        node_name="node-a",
        gpus=2,
        total_gpus=4,
        run_script=RUN if rank == 0 else "",
        header_address="" if rank == 0 else "10.9.0.1",
        join_deadline_s=join_deadline_s,
    )


def _bootstrap(
    tmp_path: Path, spec: WorkerSpec, address: str, ray: str = FAKE_RAY
) -> subprocess.CompletedProcess[str]:
    """Run the bootstrap with the contract's environment and the stand-ins (their log dir: ``logs``)."""
    logs, bin_dir = tmp_path / "logs", tmp_path / "bin"
    for directory in (logs, bin_dir, tmp_path / "files"):
        directory.mkdir()
    for name, text in (("ray", ray), ("python3", FAKE_PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    facts = RuntimeFacts(
        node_ip=address,
        header_address="10.9.0.1",
        comm_device="eth0",
        gcs_port=26000,
        ports=PORTS,
        home_dir=str(tmp_path / "home"),
        workdir=str(tmp_path / "work"),
        ray_temp_dir=str(tmp_path / "ray"),
        files_dir=str(tmp_path / "files"),
        secrets_dir=str(tmp_path / "secrets"),
        start_sshd=False,
    )
    contract = worker_contract(spec, facts)
    for name, text in contract.files.items():
        (tmp_path / "files" / name).write_text(text)
    env = compose_env(contract, LOCAL, defaults={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    env.update(RLARK_RAY=str(bin_dir / "ray"), RLARK_PYTHON=str(bin_dir / "python3"), FAKE_LOG=str(logs))
    return subprocess.run(
        ["bash", str(BOOTSTRAP_DIR / "bootstrap.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_the_headers_ray_head_serves_the_dashboard_on_its_declared_port_and_address(tmp_path: Path) -> None:
    assert _bootstrap(tmp_path, _spec(0), "10.9.0.1").returncode == 0
    logs = tmp_path / "logs"
    args = (logs / "ray.0.args").read_text().splitlines()
    assert args[:2] == ["start", "--head"]
    for expected in (
        "--port=26000",
        "--include-dashboard=true",
        "--dashboard-host=10.9.0.1",
        "--dashboard-port=26001",
        "--node-ip-address=10.9.0.1",
        "--node-manager-port=26002",
        "--num-gpus=2",
    ):
        assert expected in args
    ray_env, run_env = _env(logs / "ray.0.env"), _env(logs / "run.env")
    for env in (ray_env, run_env):
        assert env["RAY_ADDRESS"] == "10.9.0.1:26000"
        assert env["RAY_API_SERVER_ADDRESS"] == "http://10.9.0.1:26001"
        assert (env["RLINF_COMM_NET_DEVICES"], env["GLOO_SOCKET_IFNAME"], env["NCCL_SOCKET_IFNAME"]) == (
            "eth0",
            "eth0",
            "eth0",
        )
        assert (env["RLINF_NODE_RANK"], env["RLARK_EXPECTED_GPUS"], env["RLARK_CLUSTER"]) == (
            "0",
            "4",
            "local-test",
        )


def test_a_worker_joins_without_a_dashboard_and_knows_the_headers(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert (
        _bootstrap(tmp_path, _spec(1), "10.9.0.2").returncode == EXIT_TIMEOUT
    )  # the stand-in refuses every join until the 1 s deadline
    args = (logs / "ray.0.args").read_text().splitlines()
    assert args[:2] == ["start", "--address=10.9.0.1:26000"]
    assert not [
        a for a in args if a.startswith(("--include-dashboard", "--dashboard-host", "--dashboard-port"))
    ]
    env = _env(logs / "ray.0.env")
    assert env["RAY_API_SERVER_ADDRESS"] == "http://10.9.0.1:26001"  # the Header's dashboard
    assert (env["RLARK_NODE_IP"], env["RLINF_COMM_NET_DEVICES"], env["RLINF_NODE_RANK"]) == (
        "10.9.0.2",
        "eth0",
        "1",
    )


# A head that fails its first start, as Ray's does when its raylet misses the 30 s to register on a loaded
# node, then starts; and one that never starts.
FLAKY_HEAD = """#!/bin/bash
n=$(ls "$FAKE_LOG" | grep -c '^ray\\.' || true)
printf '%s\\n' "$@" >"$FAKE_LOG/ray.$n.args"
((n > 0)) || { echo 'Exception: The current node timed out during startup.' >&2; exit 1; }
"""
BROKEN_HEAD = FAKE_RAY.replace("[[ $1 == start", "exit 1\n[[ $1 == start")


def test_a_heads_failed_start_is_cleaned_up_and_started_again(tmp_path: Path) -> None:
    done = _bootstrap(tmp_path, _spec(0, join_deadline_s=30), "10.9.0.1", ray=FLAKY_HEAD)
    assert done.returncode == 0, done.stderr
    starts = sorted((tmp_path / "logs").glob("ray.*.args"))
    assert [p.read_text().splitlines()[:2] for p in starts] == [["start", "--head"]] * 2
    assert "ray start --head failed with 1 (attempt 1 of 3); cleaning up and starting again" in done.stderr
    assert '"event":"ray_head_up"' in done.stdout
    assert "ray_start_failed" not in done.stdout


def test_a_head_that_never_starts_fails_after_its_attempts_with_rays_exit_code(tmp_path: Path) -> None:
    done = _bootstrap(tmp_path, _spec(0, join_deadline_s=30), "10.9.0.1", ray=BROKEN_HEAD)
    assert done.returncode == 1
    assert len(list((tmp_path / "logs").glob("ray.*.args"))) == 3
    assert done.stdout.count('##rlark {"event":"ray_start_failed","exit_code":1}') == 1
    assert "run_started" not in done.stdout
