"""The cluster's hostPath policy reaches submission through inventory's cluster state events: a
hostPath source outside it is refused with 422 naming the field and nothing stored; once a new state
allows the prefix, the same job is accepted. A job accepted before an admin narrowed the policy fails
when the placement loop would place it, naming the field, instead of reaching an agent.

So does the cluster's runtime: a mount type it cannot mount (a PVC on a local cluster) is refused by preview
and submit naming ``spec.tasks[i].mounts[j].type`` — a bucket (objectStorage) is mounted there too (ADR 0024)
— and a job accepted while the cluster was known only through its nodes fails before it is placed."""

from __future__ import annotations

import pytest
from rlark_devinfra.testing import RunningService
from scheduler_it_support import World, job_doc, job_status, nodes_synced, role, submit, synced

pytestmark = pytest.mark.integration

FIELD = "spec.tasks[0].mounts[0].source"


def _job(source: str, cluster: str = "lab") -> dict[str, object]:
    mount = {"name": "data", "type": "hostPath", "source": source, "path": "/data"}
    return job_doc(role("header", cluster, mounts=[mount]))


async def test_a_host_path_is_refused_until_the_cluster_state_allows_its_prefix(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("lab")
    await world.node("lab", "n1")
    await nodes_synced(database_url, "lab", 1)
    await synced(database_url, "SELECT online FROM clusters WHERE name = 'lab'", expect=True)

    async with scheduler.client("alice") as alice:
        refused = await submit(alice, _job("/srv/datasets"))
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("hostpath_not_allowed", FIELD)
        assert "default deny" in error["message"]
        assert (await alice.get("/api/v1/jobs")).json()["total"] == 0

        await world.cluster("lab", hostpath_allow=["/srv/datasets"])
        query = "SELECT hostpath_allow FROM clusters WHERE name = 'lab'"
        await synced(database_url, query, expect=["/srv/datasets"])
        accepted = await submit(alice, _job("/srv/datasets/imagenet"))
        sibling = await submit(alice, _job("/srv/datasets2"))
        socket = await submit(alice, _job("/var/run/docker.sock"))
    assert accepted.status_code == 201, accepted.text
    assert sibling.status_code == 422
    assert sibling.json()["error"]["field"] == FIELD
    assert socket.status_code == 422
    assert socket.json()["error"]["code"] == "hostpath_not_allowed"


async def test_a_job_accepted_before_the_policy_was_narrowed_fails_instead_of_being_placed(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("lab2", hostpath_allow=["/srv"])
    await world.node("lab2", "n1", ready=False)  # accepted now, placeable later
    await nodes_synced(database_url, "lab2", 1)
    query = "SELECT hostpath_allow FROM clusters WHERE name = 'lab2'"
    await synced(database_url, query, expect=["/srv"])
    async with scheduler.client("alice") as alice:
        accepted = await submit(alice, _job("/srv/datasets", "lab2"))
    assert accepted.status_code == 201, accepted.text
    job_id = accepted.json()["id"]

    await world.cluster("lab2", hostpath_allow=["/scratch"])
    await synced(database_url, query, expect=["/scratch"])
    await world.node("lab2", "n1", ready=True)
    failed = await job_status(scheduler, job_id, "Failed")
    assert failed["reason"].startswith(
        f'{FIELD}: host path /srv/datasets may not be mounted on cluster "lab2"'
    )
    assert "not under an allowed prefix (/scratch)" in failed["reason"]
    assert failed["workers"] == []


TYPE_FIELD = "spec.tasks[0].mounts[0].type"
CLAIM = {"name": "ckpt", "type": "pvc", "source": "checkpoints", "path": "/ckpt"}
BUCKET = {
    "name": "models",
    "type": "objectStorage",
    "source": "s3://models/rl",
    "path": "/models",
    "secretRef": "s3-ro",
}


def _bucket_job(cluster: str) -> dict[str, object]:
    return job_doc(role("header", cluster, mounts=[BUCKET]))


def _claim_job(cluster: str) -> dict[str, object]:
    return job_doc(role("header", cluster, mounts=[CLAIM]))


async def test_a_pvc_mount_is_refused_by_preview_and_submit_on_a_local_cluster_only_and_a_bucket_is_not(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    await world.cluster("laptop", runtime="local")
    await world.cluster("gpu-k8s", runtime="kubernetes")
    for cluster in ("laptop", "gpu-k8s"):
        await world.node(cluster, "n1")
        await nodes_synced(database_url, cluster, 1)
    await synced(database_url, "SELECT runtime FROM clusters WHERE name = 'laptop'", expect="local")
    await synced(database_url, "SELECT online FROM clusters WHERE name = 'gpu-k8s'", expect=True)

    async with scheduler.client("alice") as alice:
        preview = await alice.post("/api/v1/jobs:preview", json=_claim_job("laptop"))
        refused = await submit(alice, _claim_job("laptop"))
        listed = (await alice.get("/api/v1/jobs")).json()["total"]
        on_kubernetes = await alice.post("/api/v1/jobs:preview", json=_claim_job("gpu-k8s"))
        bucket_on_laptop = await alice.post("/api/v1/jobs:preview", json=_bucket_job("laptop"))
        accepted = await submit(alice, _claim_job("gpu-k8s"))

    assert preview.status_code == 200, preview.text
    [error] = preview.json()["errors"]
    assert (error["code"], error["field"], error["message_key"]) == (
        "mount_type_unsupported",
        TYPE_FIELD,
        "mount_type_unsupported.local",
    )
    assert error["message"] == (
        f'{TYPE_FIELD}: cluster "laptop" runs workers as local processes: it mounts hostPath, emptyDir, '
        "objectStorage only, not pvc. Run this role on a Kubernetes cluster to mount pvc"
    )
    assert refused.status_code == 422, refused.text
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == (
        "mount_type_unsupported",
        TYPE_FIELD,
    )
    assert listed == 0
    assert error["params"]["type"] == "pvc"  # what the console and the CLI say it in Chinese with
    assert on_kubernetes.json()["errors"] == [], on_kubernetes.text
    assert not [e for e in bucket_on_laptop.json()["errors"] if e["code"] == "mount_type_unsupported"]
    assert accepted.status_code == 201, accepted.text


async def test_a_job_accepted_before_its_cluster_said_it_is_local_fails_instead_of_being_placed(
    scheduler: RunningService, world: World, database_url: str
) -> None:
    # Node and cluster events travel on different topics: known through its nodes only, the cluster's
    # runtime is not known yet, and the job is accepted.
    await world.node("late", "n1", ready=False)  # accepted now, placeable later
    await nodes_synced(database_url, "late", 1)
    async with scheduler.client("alice") as alice:
        accepted = await submit(alice, _claim_job("late"))
    assert accepted.status_code == 201, accepted.text
    job_id = accepted.json()["id"]

    await world.cluster("late", runtime="local")
    await synced(database_url, "SELECT runtime FROM clusters WHERE name = 'late'", expect="local")
    await world.node("late", "n1", ready=True)
    failed = await job_status(scheduler, job_id, "Failed")
    assert failed["reason"].startswith(f'{TYPE_FIELD}: cluster "late" runs workers as local processes')
    assert failed["workers"] == []
