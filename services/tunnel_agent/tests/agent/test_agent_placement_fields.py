"""Every field of a placement reaches the worker: nothing is lost between the event and the worker contract.

Walked over the fields of the typed models themselves, so a field added to `WorkerPlaced` or `WorkerSpec`
without being carried fails here (the job's GPU count was once lost between two copies of a worker's
fields). A placement goes the agent's way: `to_worker_spec`, then the worker contract with the facts a
runtime gives it (`manifests.runtime_facts`, the Kubernetes runtime's; the local driver's are compared with
those in `tests/runtime/test_worker_contract.py`).
"""

from __future__ import annotations

from typing import Any

import pytest
from rlark_contracts.events.scheduler import Mount as PlacedMount
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_tunnel_agent.agent.placements import TRANSLATED, to_worker_spec
from rlark_tunnel_agent.runtime.contract import WorkerContract, worker_contract
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.runtime.kubernetes import manifests
from rlark_tunnel_agent.runtime.kubernetes.config import KubernetesDriverConfig

pytestmark = pytest.mark.unit

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv2TSqGvpmqLhJLgaETmq2Jm1kfBpvGb0aZ1Y3kq7Qq alice@laptop"
OTHER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvYkKqZ3r1q0bQ8Yv8Xo3B8b1Ul0bJtJqVvG4mTn2dW bob@desk"
RESOLVED_HEADER = "10.254.7.2"
"""The Header's address the agent finds itself when a placement carries none (the local runtime)."""

# One placement of a 3-worker job in a network domain, every field set to something other than its default;
# the Header's placement is the same with these changes.
WORKER: dict[str, Any] = {
    "job_id": "job-f",
    "worker_id": "job-f-rollout-1",
    "cluster": "gpu-a",
    "node": "n2",
    "role": "rollout",
    "index": 1,
    "rank": 2,
    "num_nodes": 3,
    "is_header": False,
    "gpus": 4,
    "image": "registry.example.com/rl:v1",
    "prepare_script": "pip list",
    "run_script": "python train.py",
    "env": {"CONFIG": "ppo.yaml"},
    "secret_env": {"HF_TOKEN": "hf-token"},
    "secrets": ["hf-token", "wandb"],
    "mounts": [PlacedMount(name="data", type="hostPath", source="/mnt/d", path="/data")],
    "ssh_public_keys": [KEY],
    "virtual_ip": "10.9.0.4",
    "domain": "dom-a",
    "domain_cidr": "10.9.0.0/24",
    "header_address": "10.9.0.2",
    "ray_port": 6390,
    "outputs": ["/data/out"],
    "tensorboard_dir": "/data/out/tb",
    "join_deadline_s": 240,
    "total_gpus": 12,
    "rlinf_config": "runner: {max_epochs: 1}\n",
    "owner": "alice",
    "resume_checkpoints_dir": "/data/out/rlinf/checkpoints",
    "progress_deadline_s": 1800,
    "termination_grace_s": 120,
}
HEADER = {**WORKER, "worker_id": "job-f-actor-0", "role": "actor", "index": 0, "rank": 0, "is_header": True}

OTHER: dict[str, Any] = {
    "job_id": "job-g",
    "worker_id": "job-f-rollout-2",
    "cluster": "gpu-b",
    "node": "n3",
    "role": "learner",
    "index": 2,
    "rank": 1,
    "num_nodes": 4,
    "is_header": False,
    "gpus": 2,
    "image": "registry.example.com/rl:v2",
    "prepare_script": "pip freeze",
    "run_script": "python eval.py",
    "env": {"CONFIG": "grpo.yaml"},
    "secret_env": {"WANDB_API_KEY": "wandb"},
    "secrets": ["hf-token", "s3-creds"],
    "mounts": [PlacedMount(name="data", type="pvc", source="ckpt", path="/ckpt", read_only=True)],
    "ssh_public_keys": [OTHER_KEY],
    "virtual_ip": "10.9.0.5",
    "domain": "dom-b",
    "domain_cidr": "10.9.0.0/16",
    "header_address": "10.9.0.3",
    "ray_port": 6391,
    "outputs": ["/data/out", "/data/ckpt"],
    "tensorboard_dir": "/data/out/tb2",
    "join_deadline_s": 60,
    "total_gpus": 16,
    "rlinf_config": "runner: {max_epochs: 2}\n",
    "owner": "bob",
    "resume_checkpoints_dir": "/data/out/ckpt",
    "progress_deadline_s": 600,
    "termination_grace_s": 30,
}
"""Another value for every field of a placement, each a valid placement in place of one sample's at least."""

RUNTIME_READS = {
    "image": "the worker's container image (the Kubernetes pod's; the local runtime runs the host's)",
    "mounts": "volumes the driver mounts (pod volumes, bind mounts in the worker's namespace)",
    "owner": "the local runtime's uid per owner",
    "domain": "the network domain whose tunnels the worker's TUN device joins (kept for adoption)",
    "domain_cidr": "the route of the worker's TUN device",
    "resume_checkpoints_dir": "where the agent looks for the checkpoint the Header resumes from (agent/checkpoints.py)",
    "termination_grace_s": "the runtime's wait before killing a stopping worker; also RLARK_TERMINATION_GRACE_S",
    "progress_deadline_s": "the agent's stall watch over the Header (agent/progress.py); also RLARK_PROGRESS_DEADLINE_S",
}
"""Fields of `WorkerSpec` the agent or a runtime driver reads itself, not through the worker contract."""

AGENT_SETS = {
    "resume_dir": "the checkpoint the agent found under `resume_checkpoints_dir` before the Header starts",
    "ray_token": "the job attempt's Ray token, fetched from the control plane, never in a placement (ADR 0022)",
    "ray_authenticated": "set with `ray_token`",
    "secret_values": "the named secrets' values, fetched with the Ray token, never in a placement (ADR 0025)",
}
"""Fields of `WorkerSpec` the agent fills in itself after the translation; no placement field feeds them."""


def _spec(placed: WorkerPlaced) -> WorkerSpec:
    # As the agent's loop does: the placement's Header address, or the one the agent finds itself.
    return to_worker_spec(placed, placed.header_address or RESOLVED_HEADER)


def _contract(spec: WorkerSpec) -> WorkerContract:
    return worker_contract(
        spec, manifests.runtime_facts(spec, KubernetesDriverConfig(), tun=bool(spec.domain))
    )


def _spec_diff(one: WorkerSpec, other: WorkerSpec) -> set[str]:
    return {name for name in WorkerSpec.model_fields if getattr(one, name) != getattr(other, name)}


def test_the_samples_give_every_field_of_a_placement_a_value_of_its_own() -> None:
    # A field added to the placement without values here fails: give it two, and carry it to the worker.
    for sample in (WORKER, OTHER):
        missing = set(WorkerPlaced.model_fields) - set(sample)
        assert not missing, f"no value for {sorted(missing)}"
    for name, info in WorkerPlaced.model_fields.items():
        assert WORKER[name] != info.get_default(call_default_factory=True), f"{name} is left at its default"
        assert OTHER[name] != WORKER[name] or OTHER[name] != HEADER[name], name


@pytest.mark.parametrize("sample", [HEADER, WORKER], ids=["header", "worker"])
def test_every_field_not_translated_reaches_the_runtimes_spec_by_its_own_name_and_value(
    sample: dict[str, Any],
) -> None:
    placed = WorkerPlaced(**sample)
    carried = placed.model_dump(mode="json", exclude=set(TRANSLATED))
    spec = _spec(placed).model_dump(mode="json")
    assert {name: spec[name] for name in carried} == carried


def test_every_field_of_a_placement_changes_what_the_worker_receives() -> None:
    reached: set[str] = set()
    for name in WorkerPlaced.model_fields:
        changes: set[str] = set()
        contract_changed = False
        for sample in (HEADER, WORKER):
            before = _spec(WorkerPlaced(**sample))
            try:
                after = _spec(WorkerPlaced(**{**sample, name: OTHER[name]}))
            except ValueError:  # not a valid placement in this sample (a Header of rank 1)
                continue
            changes |= _spec_diff(before, after)
            contract_changed |= _contract(before) != _contract(after)
        assert changes, f"WorkerPlaced.{name} does not reach the runtime's WorkerSpec"
        # What changed reaches the worker: through its contract, or through a driver that reads it itself.
        assert contract_changed or changes <= set(RUNTIME_READS), (
            f"WorkerPlaced.{name} changes WorkerSpec {sorted(changes)} but not the worker contract"
        )
        reached |= changes
    # ... and no field of the runtime's spec is left unfed by the placement.
    assert reached == set(WorkerSpec.model_fields) - set(AGENT_SETS)


def test_each_workers_gpus_and_the_jobs_gpus_reach_the_environment() -> None:
    for sample in (HEADER, WORKER):
        env = _contract(_spec(WorkerPlaced(**sample))).env
        assert (env["RLARK_GPUS"], env["RLARK_EXPECTED_GPUS"]) == ("4", "12")
