"""One worker contract: a placement renders the same worker on the local runtime and on Kubernetes.

The same `WorkerPlaced` goes through the agent's translation into both runtimes: the local driver's
environment and script files, and the Kubernetes pod's env and worker ConfigMap. Their shared variables
are equal, or differ only in the runtime facts named below (addresses, where home and scripts live);
what one runtime adds on its own is exactly what `RUNTIME_PRIVATE` lists for it.
"""

from __future__ import annotations

import asyncio
from ipaddress import IPv4Interface
from pathlib import Path
from typing import Any

import pytest
import yaml
from local_runtime_helpers import CLUSTER, make_options, plain_spec, process_env
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.placements import to_worker_spec
from rlark_tunnel_agent.runtime.bootstrap import BOOTSTRAP_DIR, BOOTSTRAP_FILES
from rlark_tunnel_agent.runtime.contract import (
    COMM_DEVICE_VARIABLES,
    KUBERNETES,
    LOCAL,
    RUNTIME_PRIVATE,
    compose_env,
    worker_contract,
)
from rlark_tunnel_agent.runtime.driver import RayPorts, WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import manifests
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig
from rlark_tunnel_agent.runtime.kubernetes.network import SidecarAccess
from rlark_tunnel_agent.runtime.local.allocation import PORT_BLOCK
from rlark_tunnel_agent.runtime.local.driver import LocalDriver
from rlark_tunnel_agent.runtime.local.record import WorkerRecord

pytestmark = pytest.mark.unit

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv2TSqGvpmqLhJLgaETmq2Jm1kfBpvGb0aZ1Y3kq7Qq alice@laptop"
HEADER_IP = "10.254.7.2"
OWNER = manifests.owner_reference({"metadata": {"name": "rlark-job-c-job", "uid": "uid-1"}})
K8S = KubernetesDriverConfig()


def _placed(rank: int, **fields: Any) -> WorkerSpec:
    """Worker `rank` of a 2-node, 12-GPU job, as the agent translates its placement."""
    role = "actor" if rank == 0 else "rollout"
    index = 0
    placed = worker_placed(
        job_id="job-c",
        worker_id=f"job-c-{role}-{index}",
        cluster="local-test",
        node="node-a" if rank == 0 else "node-b",
        role=role,
        index=index,
        rank=rank,
        num_nodes=2,
        is_header=rank == 0,
        gpus=8 if rank == 0 else 4,
        total_gpus=12,
        prepare_script="pip list",
        run_script="python train.py --config-path /code\n" if rank == 0 else "",
        env={"CONFIG": "ppo.yaml", "PRICE": "$(HOME) costs $5", "RLARK_ROLE": "mine"},
        ssh_public_keys=[KEY],
        outputs=["/data/outputs", "ckpt"],
        tensorboard_dir="/data/outputs/tb",
        join_deadline_s=300,
        header_address="",
        **fields,
    )
    # The local agent fills in the Header's address it knows; Kubernetes gets the scheduler's.
    return to_worker_spec(placed, header_address="" if rank == 0 else HEADER_IP)


def _local_record(driver: LocalDriver, spec: WorkerSpec, *, tun_device: str | None = None) -> WorkerRecord:
    """The record of a worker in a network namespace (root mode: fixed ports, one address each)."""
    return WorkerRecord(
        spec=spec,
        slot=spec.rank,
        header_slot=0,
        address=f"10.254.7.{2 + spec.rank}",
        header_address=HEADER_IP,
        gcs_port=spec.ray_port,
        ports=RayPorts(),
        netns=f"rlark-{driver.tag}-{spec.rank}",
        veth_host=f"rlk{spec.rank}",
        ray_temp_dir=f"/tmp/rlark-{driver.tag}-{spec.rank}",
        tun_device=tun_device,
    )


def _pod_env(spec: WorkerSpec, **pod: Any) -> dict[str, Any]:
    container = manifests.worker_pod(spec, K8S, OWNER, **pod)["spec"]["containers"][0]
    return {
        e["name"]: e["value"].replace("$$", "$") if "value" in e else e["valueFrom"] for e in container["env"]
    }


def _private(runtime: str) -> set[str]:
    return set(RUNTIME_PRIVATE[runtime].defaults | RUNTIME_PRIVATE[runtime].own)


@pytest.mark.parametrize("rank", [0, 1], ids=["header", "worker"])
def test_one_placement_gives_the_same_environment_keys_and_scripts_on_both_runtimes(
    tmp_path: Path, rank: int
) -> None:
    spec = _placed(rank)
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=True))
    record = _local_record(driver, spec)
    local = driver.worker_env(record)
    pod = _pod_env(spec)

    # Each runtime adds exactly the variables it lists as its own; everything else is shared.
    local_only, pod_only = set(local) - set(pod), set(pod) - set(local)
    assert local_only == _private(LOCAL) & set(local)
    assert pod_only == _private(KUBERNETES)
    assert {"PATH", "TMPDIR", "RLARK_STATUS_FILE", "RLARK_BOOTSTRAP_TOKEN"} <= local_only

    # Shared variables are equal but for these runtime facts, each what its runtime says.
    wdir = driver.worker_dir(spec.worker_id)
    facts = {
        "HOME": (str(wdir / "home"), "/home/rlark"),
        "RLARK_WORKDIR": (str(wdir / "work"), "/home/rlark/work"),
        "RLARK_RAY_TEMP_DIR": (record.ray_temp_dir, "/tmp/ray"),
        "RLARK_AUTHORIZED_KEYS_FILE": (
            str(wdir / "scripts/authorized_keys"),
            "/opt/rlark/worker/authorized_keys",
        ),
        "RLARK_PREPARE_SCRIPT": (str(wdir / "scripts/prepare.sh"), "/opt/rlark/worker/prepare.sh"),
        "RLARK_NODE_IP": (record.address, {"fieldRef": {"fieldPath": "status.podIP"}}),
        "RLARK_SSH_PORT": ("22", "2222"),
    }
    if rank == 0:
        facts["RLARK_RUN_SCRIPT"] = (str(wdir / "scripts/run.sh"), "/opt/rlark/worker/run.sh")
    for name in sorted(set(local) & set(pod)):
        if name in facts:
            assert (local[name], pod[name]) == facts[name], name
        else:
            assert local[name] == pod[name], name

    # The values that matter most, spelled out (the same on both).
    assert local["RLARK_CLUSTER"] == "local-test"
    assert local["RLARK_EXPECTED_GPUS"] == "12"
    assert local["RLARK_GPUS"] == ("8" if rank == 0 else "4")
    assert local["RLARK_OUTPUTS"] == "/data/outputs:ckpt"  # container paths, as the job names them
    assert local["RLARK_TENSORBOARD_DIR"] == "/data/outputs/tb"
    assert local["RLARK_JOIN_DEADLINE_S"] == "300"
    assert local["RLARK_ROLE"] == spec.role  # the platform's variables win over the job's
    assert (local["CONFIG"], local["PRICE"]) == ("ppo.yaml", "$(HOME) costs $5")
    assert [local[v] for v in COMM_DEVICE_VARIABLES] == ["eth0"] * 3
    assert local["RLARK_RAY_DASHBOARD_PORT"] == "8265"
    assert ("RLARK_HEADER_ADDRESS" in local) is (rank == 1)

    # The files: what the local driver writes into scripts/ is the worker ConfigMap's data.
    config_map = manifests.worker_config_map(spec, "ns", OWNER)["data"]
    assert driver.worker_contract(record).files == {
        k: v for k, v in config_map.items() if k != manifests.SPEC_KEY
    }
    assert config_map["authorized_keys"] == KEY + "\n"
    assert config_map["prepare.sh"] == "pip list\n"


def test_both_runtimes_ship_the_same_bootstrap() -> None:
    shipped = manifests.job_config_map(
        "job-c", "ns", {n: (BOOTSTRAP_DIR / n).read_text() for n in BOOTSTRAP_FILES}
    )
    assert set(BOOTSTRAP_FILES) == {"bootstrap.sh", "rlark_node.py"}
    assert {k: v for k, v in shipped["data"].items() if k in BOOTSTRAP_FILES} == {
        n: (BOOTSTRAP_DIR / n).read_text() for n in BOOTSTRAP_FILES
    }


def test_in_a_network_domain_both_runtimes_put_ray_and_collectives_on_the_tun_device(tmp_path: Path) -> None:
    domain = {"virtual_ip": "10.200.0.3", "domain": "d1", "domain_cidr": "10.200.0.0/16"}
    spec = _placed(1, **domain).model_copy(update={"header_address": "10.200.0.2"})
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=True))
    local = driver.worker_env(_local_record(driver, spec, tun_device=manifests.TUN_DEVICE))
    access = SidecarAccess(
        agent_host="agent", agent_port=8106, address=IPv4Interface("10.200.0.3/16"), mtu=1500, token="t"
    )
    config = KubernetesDriverConfig(network_sidecar_image="registry.example.com/net:1")
    container = manifests.worker_pod(spec, config, OWNER, access)["spec"]["containers"][0]
    pod = {e["name"]: e.get("value") for e in container["env"]}
    for env in (local, pod):
        assert env["RLARK_NODE_IP"] == env["RLARK_VIRTUAL_IP"] == "10.200.0.3"
        assert env["RLARK_HEADER_ADDRESS"] == "10.200.0.2"  # the Header's virtual IP
        assert [env[v] for v in COMM_DEVICE_VARIABLES] == ["rlark0"] * 3
        # Ray outlasts an outage of the domain's link as long as the scheduler does (60 s, 3 s a check).
        assert env["RAY_health_check_failure_threshold"] == "20"


def test_ray_keeps_its_own_health_check_outside_a_domain_and_a_jobs_own_threshold_wins_in_one() -> None:
    assert "RAY_health_check_failure_threshold" not in _pod_env(_placed(0))
    domain = {"virtual_ip": "10.200.0.3", "domain": "d1", "domain_cidr": "10.200.0.0/16"}
    spec = _placed(0, **domain).model_copy(update={"env": {"RAY_health_check_failure_threshold": "7"}})
    assert _pod_env(spec)["RAY_health_check_failure_threshold"] == "7"


@pytest.mark.parametrize(
    ("job_env", "expected"),
    [
        ({}, ["eth0", "eth0", "eth0"]),
        ({"NCCL_SOCKET_IFNAME": "ib0"}, ["eth0", "eth0", "ib0"]),
        ({"RLINF_COMM_NET_DEVICES": "eth1"}, ["eth1", "eth1", "eth1"]),
        ({"RLINF_COMM_NET_DEVICES": "eth1", "GLOO_SOCKET_IFNAME": "eth2"}, ["eth1", "eth2", "eth1"]),
    ],
)
def test_a_jobs_own_interface_variables_win_and_the_others_follow_its_rlinf_device(
    job_env: dict[str, str], expected: list[str]
) -> None:
    spec = _placed(0).model_copy(update={"env": job_env})
    env = _pod_env(spec)
    assert [env[v] for v in COMM_DEVICE_VARIABLES] == expected


def test_a_runtime_may_add_only_the_variables_listed_as_its_own() -> None:
    contract = worker_contract(_placed(0), manifests.runtime_facts(_placed(0), K8S, tun=False))
    with pytest.raises(ValueError, match="PATH not listed as its default variables"):
        compose_env(contract, KUBERNETES, defaults={"PATH": "/bin"})
    with pytest.raises(ValueError, match="RLARK_STATUS_FILE not listed as its own variables"):
        compose_env(contract, KUBERNETES, own={"RLARK_STATUS_FILE": "/x"})
    # No runtime lists a variable of the contract as its own: the contract sets it, once.
    for private in RUNTIME_PRIVATE.values():
        assert not (private.defaults | private.own) & set(contract.env)


def test_the_headers_dashboard_port_is_declared_to_every_worker_and_opened_on_the_headers_pod() -> None:
    header, worker = _placed(0), _placed(1)
    header_pod = manifests.worker_pod(header, K8S, OWNER)["spec"]["containers"][0]
    worker_pod = manifests.worker_pod(worker, K8S, OWNER)["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in header_pod["ports"]} == {
        "ray-dashboard": 8265,
        "ray-gcs": 6379,
        "ssh": 2222,
    }
    assert {p["name"] for p in worker_pod["ports"]} == {"ssh"}
    assert (
        _pod_env(header)["RLARK_RAY_DASHBOARD_PORT"] == _pod_env(worker)["RLARK_RAY_DASHBOARD_PORT"] == "8265"
    )


async def test_plain_processes_name_the_headers_dashboard_port_and_loopback_for_collectives(
    tmp_path: Path,
) -> None:
    # Processes on 127.0.0.1 each have a port block; the dashboard, like the GCS, is the Header's.
    options = make_options(tmp_path / "state", use_netns=False)
    driver = LocalDriver(CLUSTER, options)
    await driver.start()
    hold = 'while [ ! -e "$HOME/go" ]; do sleep 0.2; done\n'  # no Ray: the bootstrap waits here
    header = plain_spec("job-p", "header", 0, rank=0, num_nodes=2, prepare_script=hold, run_script="true")
    worker = plain_spec("job-p", "rollout", 0, rank=1, num_nodes=2, prepare_script=hold,
                        env={"GLOO_SOCKET_IFNAME": "mine"})  # fmt: skip
    try:
        await driver.ensure_worker(header)
        await driver.ensure_worker(worker)
        envs = []
        for spec in (header, worker):
            record = driver.record(spec.worker_id)
            assert record is not None
            assert record.pid is not None
            got = process_env(record.pid)
            assert got == driver.worker_env(record)  # what the bootstrap receives is the contract's render
            envs.append(got)
        header_record = driver.record(header.worker_id)
        assert header_record is not None
        header_dashboard = str(header_record.gcs_port + 1)
        assert header_record.gcs_port == options.port_base  # the Header's block is the first
        assert [env["RLARK_RAY_DASHBOARD_PORT"] for env in envs] == [header_dashboard] * 2
        assert envs[1]["RLARK_RAY_NODE_MANAGER_PORT"] == str(options.port_base + PORT_BLOCK + 2)
        assert [envs[0][v] for v in COMM_DEVICE_VARIABLES] == ["lo"] * 3
        assert [envs[1][v] for v in COMM_DEVICE_VARIABLES] == ["lo", "mine", "lo"]
        assert envs[0]["RLARK_START_SSHD"] == "0"
    finally:
        await asyncio.gather(driver.stop_worker(header.worker_id), driver.stop_worker(worker.worker_id))
        await driver.close()


def test_the_jobs_inline_rlinf_config_is_a_hydra_file_on_both_runtimes(tmp_path: Path) -> None:
    config = "cluster:\n  num_nodes: 2\nrunner:\n  save_interval: 10\n"
    spec = _placed(1, rlinf_config=config)
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=True))
    record = _local_record(driver, spec)
    local, pod = driver.worker_env(record), _pod_env(spec)
    wdir = driver.worker_dir(spec.worker_id)
    assert local["RLARK_RLINF_CONFIG"] == str(wdir / "scripts" / "rlinf.yaml")
    assert pod["RLARK_RLINF_CONFIG"] == "/opt/rlark/worker/rlinf.yaml"  # the worker ConfigMap's mount
    assert driver.worker_contract(record).files["rlinf.yaml"] == config
    assert manifests.worker_config_map(spec, "ns", OWNER)["data"]["rlinf.yaml"] == config
    # Without an inline config there is neither the file nor the variable.
    plain = _placed(1)
    assert "RLARK_RLINF_CONFIG" not in driver.worker_env(_local_record(driver, plain))
    assert "rlinf.yaml" not in manifests.worker_config_map(plain, "ns", OWNER)["data"]


def test_a_resuming_header_gets_its_checkpoint_as_a_variable_and_in_its_rlinf_config_on_both_runtimes(
    tmp_path: Path,
) -> None:
    config = (
        "cluster:\n  num_nodes: 2\nrunner:\n  save_interval: 10\n  lr: ${actor.lr}\nactor:\n  lr: 1.0e-05\n"
    )
    chosen = "/data/outputs/exp/checkpoints/global_step_8"
    spec = _placed(0, rlinf_config=config).model_copy(
        update={"resume_checkpoints_dir": "/data/outputs/exp/checkpoints", "resume_dir": chosen}
    )
    driver = LocalDriver(CLUSTER, make_options(tmp_path / "state", use_netns=True))
    record = _local_record(driver, spec)
    assert driver.worker_env(record)["RLARK_RESUME_DIR"] == chosen
    assert _pod_env(spec)["RLARK_RESUME_DIR"] == chosen
    for rendered in (
        driver.worker_contract(record).files["rlinf.yaml"],
        manifests.worker_config_map(spec, "ns", OWNER)["data"]["rlinf.yaml"],
    ):
        assert yaml.safe_load(rendered) == {
            "cluster": {"num_nodes": 2},
            "runner": {"save_interval": 10, "lr": "${actor.lr}", "resume_dir": chosen},
            "actor": {"lr": 1.0e-05},
        }
    # Starting fresh: no variable, the config as the scheduler checked it.
    fresh = spec.model_copy(update={"resume_dir": ""})
    assert "RLARK_RESUME_DIR" not in driver.worker_env(_local_record(driver, fresh))
    assert "RLARK_RESUME_DIR" not in _pod_env(fresh)
    assert driver.worker_contract(_local_record(driver, fresh)).files["rlinf.yaml"] == config
