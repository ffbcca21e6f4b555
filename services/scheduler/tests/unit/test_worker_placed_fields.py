"""Every field of a job's document that a worker needs reaches the placement its agent is sent.

One job goes the scheduler's way — parsed (``spec``), queued (``job_request``), placed (``place``), stored
(``placed_workers``), sent (``worker_placements``) — and the fields of the typed models are walked, so a field
added to the document or to ``WorkerPlaced`` without being carried fails here (the job's GPU count was once
lost: the event's field was left to its default). The agent's half of the way, placement → worker contract,
is ``services/tunnel_agent/tests/agent/test_agent_placement_fields.py``.
"""

from __future__ import annotations

import copy
from dataclasses import fields, replace
from typing import Any

import pytest
from pydantic import BaseModel
from rlark_contracts.events.scheduler import Mount as PlacedMount
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_scheduler.domain.capacity import CapacityModel, ClusterFacts
from rlark_scheduler.domain.document.model import JobSpec, Mount, RoleSpec
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.jobs import job_request, placed_workers
from rlark_scheduler.domain.placed import DomainAddresses, PlacedJob, worker_placements
from rlark_scheduler.domain.placement import Placement, place
from scheduler_fleet import H100, gpu_node

pytestmark = pytest.mark.unit

MODEL = CapacityModel.from_nodes(
    [
        *(gpu_node(f"a{i}") for i in range(1, 5)),
        *(gpu_node(f"h{i}", labels=H100) for i in range(1, 4)),
        *(gpu_node(f"b{i}", cluster="gpu-b") for i in range(1, 4)),
    ]
)
MODEL.set_cluster_facts("gpu-b", ClusterFacts(labels={"rlark.io/region": "south"}))
MODEL.set_domains({"dom-a": None})

ROLLOUT: dict[str, Any] = {
    "name": "rollout",
    "cluster": "gpu-a",
    "nodeSelector": {"rlark.io/gpu-model": "A100"},
    "replicas": 2,
    "gpusPerWorker": 4,
    "image": "registry.example.com/rl:v1",
    "prepareScript": "pip list",
    "mounts": [{"name": "data", "type": "hostPath", "source": "/mnt/d", "path": "/data", "readOnly": True}],
    "env": {"CONFIG": "ppo.yaml"},
}
DOCUMENT: dict[str, Any] = {
    "metadata": {"name": "grpo"},
    "spec": {
        "header": "actor",
        "runScript": "python train.py",
        "tensorboardDir": "/data/out/tb",
        "outputs": ["/data/out"],
        "rlinfConfig": {"runner": {"max_epochs": 1}},
        "tasks": [
            {"name": "actor", "cluster": "gpu-a", "replicas": 1, "gpusPerWorker": 8, "image": "rl:v1"},
            ROLLOUT,
            {"name": "reward", "cluster": "gpu-a", "replicas": 1, "image": "rl:v1"},
        ],
    },
}

OTHER_ROLE: dict[str, Any] = {
    "name": "sampler",
    "cluster": "gpu-b",
    "clusters": ["gpu-b"],
    "cluster_selector": {"rlark.io/region": "south"},
    "node_selector": {"rlark.io/gpu-model": "H100"},
    "replicas": 3,
    "gpus_per_worker": 2,
    "image": "registry.example.com/rl:v2",
    "prepare_script": "pip freeze",
    "mounts": [{"name": "ckpt", "type": "pvc", "source": "ckpt", "path": "/ckpt"}],
    "env": {"CONFIG": "grpo.yaml"},
}
"""Another value for every field of the rollout role (``spec.tasks[1]``)."""

CHOOSING = frozenset({"clusters", "cluster_selector"})
"""Role fields that say where the scheduler may place a role that names no cluster (ADR 0026): walked on the
rollout role without its ``cluster`` (it then fits on gpu-a with the others, and goes to gpu-b as told)."""

OTHER_MOUNT: dict[str, Any] = {
    "name": "scratch",
    "type": "objectStorage",
    "source": "s3://bucket/prefix",
    "path": "/models",
    "read_only": False,
    "secret_ref": "s3-ro",
}
"""Another value for every field of the rollout role's mount."""

OTHER_JOB: dict[str, Any] = {
    "header": "reward",
    "run_script": "python eval.py",
    "tensorboard_dir": "/data/out/tb2",
    "outputs": ["/data/out2"],
    "rlinf_config": {"runner": {"max_epochs": 2}},
    "resume": {"from": "latestCheckpoint", "dir": "rlinf/checkpoints"},
    "progress_deadline_seconds": 600,
    "termination_grace_period_seconds": 90,
}
"""Another value for every field of ``spec`` that reaches the workers from the document."""

NOT_FROM_THE_DOCUMENT = {
    "type": "where the job came from (a template's jobs are expanded into tasks at submission)",
    "template": "the same",
    "priority": "the queue's order only",
    "project": "admission and accounting only (ADR 0020)",
    "restart_policy": "whether a failure starts a new attempt; its workers get new ids (placed_workers' attempt)",
    "network_domain": "asks netdomain for addresses; its answer (PlacedJob.addresses) is what workers get",
    "placement": "how the scheduler chooses clusters (ADR 0026): workers get where they were placed and the domain",
    "ssh_keys": "names of keys; their public keys (PlacedJob.ssh_public_keys, from the keys service) reach workers",
    "tasks": "the roles, walked field by field below",
}
"""Fields of ``spec`` that reach the workers another way, or not at all, and why."""

JOB = PlacedJob(
    job_id="job-1",
    owner="alice",
    ssh_public_keys=("ssh-ed25519 AAAA alice@laptop",),
    header_address="10.0.0.1",
    addresses=None,
    ray_port=6390,
    join_deadline_s=240,
)
IN_DOMAIN = DomainAddresses(
    domain="dom-a",
    cidr="10.9.0.0/24",
    virtual_ips={
        worker: f"10.9.0.{10 + n}"
        for n, worker in enumerate(["job-1-actor-0", "job-1-rollout-0", "job-1-rollout-1", "job-1-reward-0"])
    },
)
OTHER_PLACED_JOB: dict[str, Any] = {
    "job_id": "job-2",
    "owner": "bob",
    "ssh_public_keys": ("ssh-ed25519 BBBB bob@desk",),
    "header_address": "10.0.0.2",
    "addresses": IN_DOMAIN,
    "ray_port": 6391,
    "join_deadline_s": 60,
}


def journey(document: dict[str, Any], job: PlacedJob = JOB) -> list[WorkerPlaced]:
    """The placements the job's agents are sent for ``document``."""
    doc = parse_job_document(document)
    placement = place(MODEL, job_request(job.job_id, doc.spec, 1))
    assert isinstance(placement, Placement), placement
    return worker_placements(job, doc, placed_workers(placement))


def with_role(name: str, value: Any, document: dict[str, Any] = DOCUMENT) -> dict[str, Any]:
    document = copy.deepcopy(document)
    document["spec"]["tasks"][1][_alias(RoleSpec, name)] = value
    return document


def choosing(document: dict[str, Any] = DOCUMENT) -> dict[str, Any]:
    """``document`` with the rollout role naming no cluster."""
    document = copy.deepcopy(document)
    del document["spec"]["tasks"][1]["cluster"]
    return document


def _alias(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


def test_every_placement_sets_every_field_of_the_event_none_left_to_its_default() -> None:
    # A default exists so that agents read older events; a producer that leaves one lost that field.
    for job in (JOB, replace(JOB, addresses=IN_DOMAIN)):
        for placed in journey(DOCUMENT, job):
            left = set(WorkerPlaced.model_fields) - placed.model_fields_set
            assert not left, f"{placed.worker_id}: {sorted(left)} left to the event's defaults"


def test_every_field_of_a_role_reaches_its_workers_placements() -> None:
    assert set(OTHER_ROLE) == set(RoleSpec.model_fields), "give a new role field another value and carry it"
    before = journey(DOCUMENT)
    for name, value in OTHER_ROLE.items():
        if name in CHOOSING:
            chosen = journey(choosing())
            assert journey(with_role(name, value, choosing())) != chosen, f"RoleSpec.{name} does not count"
            continue
        assert journey(with_role(name, value)) != before, f"RoleSpec.{name} does not reach the placements"


def test_every_field_of_a_mount_reaches_the_placement_as_is() -> None:
    assert set(OTHER_MOUNT) == set(Mount.model_fields) == set(PlacedMount.model_fields)
    before = journey(DOCUMENT)
    mount = ROLLOUT["mounts"][0]
    for name, value in OTHER_MOUNT.items():
        after = journey(with_role("mounts", [{**mount, _alias(Mount, name): value}]))
        assert after != before, f"Mount.{name} does not reach the placements"
    rollout = next(p for p in before if p.role == "rollout")
    assert [m.model_dump() for m in rollout.mounts] == [
        Mount.model_validate(mount).model_dump(mode="json", by_alias=False)
    ]


def test_every_field_of_the_job_reaches_its_workers_or_says_why_not() -> None:
    carried = set(JobSpec.model_fields) - set(NOT_FROM_THE_DOCUMENT)
    assert carried <= set(OTHER_JOB), f"say how {sorted(carried - set(OTHER_JOB))} reach the workers"
    before = journey(DOCUMENT)
    for name in carried:
        document = copy.deepcopy(DOCUMENT)
        document["spec"][_alias(JobSpec, name)] = OTHER_JOB[name]
        assert journey(document) != before, f"JobSpec.{name} does not reach the placements"


def test_every_fact_of_the_job_beyond_its_document_reaches_its_placements() -> None:
    assert set(OTHER_PLACED_JOB) == {f.name for f in fields(PlacedJob)}
    before = journey(DOCUMENT)
    for name, value in OTHER_PLACED_JOB.items():
        after = journey(DOCUMENT, replace(JOB, **{name: value}))
        assert after != before, f"PlacedJob.{name} does not reach the placements"


def test_each_workers_gpus_and_the_jobs_gpus_reach_every_placement() -> None:
    placed = journey(DOCUMENT)
    assert [(p.role, p.gpus) for p in placed] == [("actor", 8), ("rollout", 4), ("rollout", 4), ("reward", 0)]
    assert {p.total_gpus for p in placed} == {16}
    assert [p.is_header for p in placed] == [True, False, False, False]
