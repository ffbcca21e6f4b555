"""The Kubernetes runtime through the whole platform: two real API servers with KWOK (alpha, beta), each
with a real tunnel-agent (alpha's in this event loop, beta's as its own `python -m rlark_tunnel_agent all`
process), every service against real PostgreSQL and Kafka, users only through the gateway.

What KWOK cannot do, and what the test therefore does not claim: KWOK runs no container, so no bootstrap,
no Ray and no marker line. The agents tell their driver so (`k8s_agents.KWOK_DRIVER`,
``running_without_markers``): a running container is reported as worker phase Joined with a reason that
says no markers are expected, so the scheduler runs the job once every worker's container runs. (Reporting
the Header as Running instead would make the job Running as soon as the Header's pod runs, before the other
workers exist: the third test caught that.)
"""

from __future__ import annotations

import asyncio
import copy
import ipaddress
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jobs import add_key, document, job, make_public_key, role, submit, wait_placeable, wait_status
from k8s_agents import (
    KWOK_DRIVER,
    AgentProcess,
    InProcessAgent,
    admin,
    create_namespace,
    job_objects,
    kubernetes_agent,
)
from rlark_devinfra.k8s import testbed
from rlark_tunnel_agent.runtime.kubernetes import KubernetesDriver, names
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.observe import DELETED_OUTSIDE
from stack import Stack, eventually, platform

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.timeout(240)]

POD_CIDRS = {"alpha": "10.64.0.0/16", "beta": "10.65.0.0/16"}  # KWOK's --cidr per test-bed cluster
DOMAIN_CIDR = "10.200.0.0/16"
GPU_MODELS = {"alpha": "A100", "beta": "H100"}

PREPARE = "echo preparing rank $RLARK_NODE_RANK\n"
RUN = "python -m rlinf.train --config ppo.yaml\n"


@dataclass
class Bed:
    """Two registered Kubernetes clusters with their agents, nodes and namespaces, for one test."""

    stack: Stack
    clusters: dict[str, testbed.Cluster]
    kubes: dict[str, Kube]
    namespaces: dict[str, str]
    credentials: dict[str, str]
    nodes: dict[str, list[str]]
    pool: str
    tmp: Path
    alpha_agent: InProcessAgent | None = None
    beta_agent: AgentProcess | None = None
    public_key: str = ""

    def objects(self, cluster: str, job_id: str) -> dict[str, list[dict[str, Any]]]:
        return job_objects(self.kubes[cluster], self.namespaces[cluster], job_id)

    def pods(self, job_id: str) -> dict[str, dict[str, Any]]:
        """The job's pods in both clusters by worker id (annotation), failing on a duplicate."""
        found: dict[str, dict[str, Any]] = {}
        for cluster in self.clusters:
            for pod in self.objects(cluster, job_id)["pod"]:
                worker = pod["metadata"]["annotations"][names.WORKER_ANNOTATION]
                assert worker not in found, f"two pods for worker {worker}"
                found[worker] = {**pod, "cluster": cluster}
        return found


@pytest.fixture
async def stack(postgres_server_url: str, kafka_bootstrap: str, tmp_path: Path) -> AsyncIterator[Stack]:
    """The platform with inventory's default liveness (30 s): an agent restart must not look like a lost
    cluster, which the shared e2e fixture's 2 s timeout would make it."""
    async with platform(postgres_server_url, kafka_bootstrap, tmp_path) as running:
        yield running


@pytest.fixture
def gpu_nodes(k8s_testbed: list[testbed.Cluster]) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """Two 8-GPU nodes in alpha and three in beta, labelled with a pool of this test's own (the test bed is
    shared: other tests' nodes must never match this test's selectors)."""
    pool = f"e2e-{uuid.uuid4().hex[:8]}"
    clusters = {c.name: c for c in k8s_testbed}
    created: dict[str, list[testbed.GpuNode]] = {
        "alpha": [
            testbed.GpuNode(
                name=f"{pool}-a{i}", gpus=8, gpu_model=GPU_MODELS["alpha"], labels={"rlark.io/pool": pool}
            )
            for i in range(2)
        ],
        "beta": [
            testbed.GpuNode(
                name=f"{pool}-b{i}",
                gpus=8,
                gpu_model=GPU_MODELS["beta"],
                category="train",
                labels={"rlark.io/pool": pool},
            )
            for i in range(3)
        ],
    }
    for name, nodes in created.items():
        testbed.create_gpu_nodes(clusters[name], nodes)
    yield pool, {name: [n.name for n in nodes] for name, nodes in created.items()}
    for name, nodes in created.items():
        testbed.delete_nodes(clusters[name], [n.name for n in nodes])


@pytest.fixture
async def bed(
    stack: Stack,
    k8s_testbed: list[testbed.Cluster],
    gpu_nodes: tuple[str, dict[str, list[str]]],
    tmp_path: Path,
) -> AsyncIterator[Bed]:
    pool, nodes = gpu_nodes
    clusters = {c.name: c for c in k8s_testbed}
    kubes = {name: admin(c) for name, c in clusters.items()}
    namespaces = {name: create_namespace(kube, "e2e") for name, kube in kubes.items()}
    credentials = {
        name: await stack.register_cluster(
            name, runtime="kubernetes", pod_cidrs=[POD_CIDRS[name]], service_cidrs=[testbed.SERVICE_CIDR]
        )
        for name in clusters
    }
    current = Bed(stack, clusters, kubes, namespaces, credentials, nodes, pool, tmp_path)
    beta = AgentProcess(
        stack.url, credentials["beta"], clusters["beta"], namespaces["beta"], tmp_path / "beta"
    )
    beta.start()
    current.beta_agent = beta
    try:
        async with kubernetes_agent(
            stack.url, credentials["alpha"], clusters["alpha"], namespaces["alpha"], tmp_path / "alpha"
        ) as alpha:
            current.alpha_agent = alpha
            yield current
    finally:
        if current.beta_agent is not None:
            current.beta_agent.stop()


async def online(bed: Bed, cluster: str) -> bool:
    async with bed.stack.client() as client:
        response = await client.get(f"/api/v1/clusters/{cluster}")
        assert response.status_code == 200, response.text
        return bool(response.json()["online"])


def job_document(bed: Bed, name: str, domain: str) -> dict[str, Any]:
    """A Header in alpha (4 GPUs) and two rollout workers in beta (2 GPUs each), in a network domain."""
    selector = {"rlark.io/pool": bed.pool}
    return document(
        name,
        [
            role(
                "actor",
                1,
                cluster="alpha",
                gpusPerWorker=4,
                nodeSelector=selector,
                image="registry.example.com/rlinf/rlinf:0.2.1",
                prepareScript=PREPARE,
                env={"TRAIN_STEPS": "10"},
            ),
            role(
                "rollout",
                2,
                cluster="beta",
                gpusPerWorker=2,
                nodeSelector=selector,
                image="registry.example.com/rlinf/rlinf:0.2.1",
                prepareScript=PREPARE,
                env={"TRAIN_STEPS": "10"},
            ),
        ],
        RUN,
        networkDomain=domain,
        sshKeys=["laptop"],
    )


async def prepare_job(bed: Bed, name: str) -> dict[str, Any]:
    """Nodes in inventory, a network domain, a key; then the job document, once placeable."""
    bed.public_key = make_public_key(bed.tmp, "laptop")
    await add_key(bed.stack, "laptop", bed.public_key)
    domain = f"net-{uuid.uuid4().hex[:6]}"
    async with bed.stack.client() as client:
        created = await client.post("/api/v1/domains", json={"name": domain, "cidr": DOMAIN_CIDR})
        assert created.status_code == 201, created.text
    doc = job_document(bed, name, domain)
    await wait_placeable(bed.stack, doc, timeout_s=180)
    return doc


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "worker")
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def config_map(objects: dict[str, list[dict[str, Any]]], name: str) -> dict[str, Any]:
    found = [cm for cm in objects["config_map"] if cm["metadata"]["name"] == name]
    assert len(found) == 1, f"config map {name}: {[cm['metadata']['name'] for cm in objects['config_map']]}"
    return found[0]


async def all_gone(bed: Bed, job_id: str) -> bool:
    return all(not items for c in bed.clusters for items in bed.objects(c, job_id).values())


async def test_kubernetes_clusters_report_nodes_run_a_cross_cluster_job_survive_agent_kills_and_cancel_clean(
    bed: Bed,
) -> None:
    stack = bed.stack

    # Step 1: both clusters are online and their nodes show in inventory with GPU counts and labels.
    async def my_nodes() -> list[dict[str, Any]] | None:
        async with stack.client() as client:
            response = await client.get("/api/v1/nodes", params={"selector": f"rlark.io/pool={bed.pool}"})
            assert response.status_code == 200, response.text
            items: list[dict[str, Any]] = response.json()["items"]
        ready = [n for n in items if n["ready"]]
        return items if len(ready) == 5 else None

    nodes = await eventually(my_nodes, timeout_s=180, what="5 ready test nodes in inventory")
    by_cluster = {c: sorted(n["name"] for n in nodes if n["cluster"] == c) for c in bed.clusters}
    assert by_cluster == {c: sorted(bed.nodes[c]) for c in bed.clusters}
    for node in nodes:
        assert node["gpu_count"] == 8
        assert node["gpu_model"] == GPU_MODELS[node["cluster"]]
        assert node["labels"]["rlark.io/gpu-model"] == GPU_MODELS[node["cluster"]]
        assert node["labels"]["rlark.io/node-category"] == ("train" if node["cluster"] == "beta" else "gpu")
        assert node["schedulable"] is True
    async with stack.client() as client:
        clusters = {c["name"]: c for c in (await client.get("/api/v1/clusters")).json()["items"]}
    assert {name: (c["runtime"], c["online"]) for name, c in clusters.items()} == {
        "alpha": ("kubernetes", True),
        "beta": ("kubernetes", True),
    }

    # Step 4: a 3-worker job across both clusters, in a network domain.
    doc = await prepare_job(bed, "cross-cluster on kubernetes")
    submitted = await submit(stack, doc)
    job_id = submitted["id"]
    running = await wait_status(stack, job_id, {"Running"}, timeout_s=90)

    workers = {w["id"]: w for w in running["workers"]}
    assert len(workers) == 3
    header = next(w for w in workers.values() if w["is_header"])
    assert header["cluster"] == "alpha"
    assert sorted(w["cluster"] for w in workers.values() if not w["is_header"]) == ["beta", "beta"]
    assert sorted(w["rank"] for w in workers.values()) == [0, 1, 2]
    assert len({w["node"] for w in workers.values()}) == 3
    for worker in workers.values():
        assert worker["phase"] == "Joined", worker
        assert "no bootstrap markers" in worker["reason"], worker
        assert (worker["virtual_ip"] or "").startswith("10.200."), worker

    pods = bed.pods(job_id)
    assert set(pods) == set(workers)
    for worker_id, pod in pods.items():
        worker = workers[worker_id]
        assert pod["cluster"] == worker["cluster"]
        assert pod["spec"]["nodeName"] == worker["node"]
        assert pod["status"]["phase"] == "Running"
        container = next(c for c in pod["spec"]["containers"] if c["name"] == "worker")
        gpus = "4" if worker["is_header"] else "2"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == gpus
        assert container["resources"]["requests"]["nvidia.com/gpu"] == gpus
        assert container["image"] == "registry.example.com/rlinf/rlinf:0.2.1"
        env = env_of(pod)
        assert env["RLARK_NODE_RANK"] == str(worker["rank"])
        assert env["RLARK_JOB_ID"] == job_id
        assert env["RLARK_ROLE"] == worker["role"]
        assert env["RLARK_WORKER_INDEX"] == str(worker["index"])
        assert env["RLARK_NUM_NODES"] == "3"
        assert env["RLARK_GPUS"] == gpus
        assert env["RLARK_VIRTUAL_IP"] == worker["virtual_ip"]
        assert env["TRAIN_STEPS"] == "10"
        if worker["is_header"]:
            assert "RLARK_HEADER_ADDRESS" not in env
            assert env["RLARK_IS_HEADER"] == "1"
        else:
            # Across clusters the Header is reached at its virtual IP, which the scheduler knew.
            assert env["RLARK_HEADER_ADDRESS"] == header["virtual_ip"]
        labels = pod["metadata"]["labels"]
        assert labels[names.JOB_LABEL] == names.label_value(job_id)
        assert labels[names.ROLE_LABEL] == worker["role"]
        assert labels[names.RANK_LABEL] == str(worker["rank"])
        assert labels[names.MANAGED_BY_LABEL] == names.MANAGED_BY

        objects = bed.objects(worker["cluster"], job_id)
        worker_cm = config_map(objects, names.worker_config_name(worker_id))
        assert worker_cm["data"]["authorized_keys"] == f"{bed.public_key}\n"
        assert worker_cm["data"]["prepare.sh"] == PREPARE
        assert ("run.sh" in worker_cm["data"]) is worker["is_header"]
        if worker["is_header"]:
            assert worker_cm["data"]["run.sh"] == RUN
        job_cm = config_map(objects, names.job_config_name(job_id))
        # The bootstrap the pod runs turns the platform's rank into RLinf's before `ray start`.
        assert "export RLINF_NODE_RANK=$RLARK_NODE_RANK" in job_cm["data"]["bootstrap.sh"]
        assert [s["metadata"]["name"] for s in objects["service"]] == [names.service_name(job_id)]

    # An agent killed mid-job and restarted adopts its pods: nothing is created twice, nothing lost.
    uids = {w: p["metadata"]["uid"] for w, p in pods.items()}
    assert bed.beta_agent is not None
    assert bed.alpha_agent is not None
    bed.beta_agent.kill()
    await bed.alpha_agent.kill()
    bed.beta_agent.start()
    async with kubernetes_agent(
        stack.url, bed.credentials["alpha"], bed.clusters["alpha"], bed.namespaces["alpha"], bed.tmp / "alpha"
    ) as alpha_again:
        assert await alpha_again.agent.driver.list_workers() == [header["id"]]

        beta = bed.beta_agent

        async def adopted() -> bool:
            assert beta.exited() is None, beta.log_tail()
            return re.search(r"agent started.*workers=2", beta.log_tail(400)) is not None

        await eventually(adopted, timeout_s=60, what="the restarted beta agent adopting its 2 workers")
        # Resync passes of both drivers compare the cluster with their records; nothing may change.
        driver = alpha_again.agent.driver
        assert isinstance(driver, KubernetesDriver)
        await driver.resync()
        await asyncio.sleep(2 * KWOK_DRIVER["resync_interval_s"] + 1)
        after = bed.pods(job_id)
        assert {w: p["metadata"]["uid"] for w, p in after.items()} == uids
        assert all(p["status"]["phase"] == "Running" for p in after.values())
        current = await job(stack, job_id)
        assert current["status"] == "Running"
        assert {w["id"]: w["phase"] for w in current["workers"]} == dict.fromkeys(workers, "Joined")
        assert await online(bed, "alpha")
        assert await online(bed, "beta")

        # Cancel while beta's agent is dead: alpha's objects go at once, beta's once its agent is back
        # and reads the stop requests it missed. Every object goes, in both clusters.
        beta.kill()
        async with stack.client() as client:
            cancelled = await client.post(f"/api/v1/jobs/{job_id}:cancel")
            assert cancelled.status_code == 200, cancelled.text
        final = await wait_status(stack, job_id, {"Cancelled"}, timeout_s=60)
        assert final["status"] == "Cancelled"

        async def alpha_gone() -> bool:
            return not any(bed.objects("alpha", job_id).values())

        await eventually(alpha_gone, timeout_s=60, what="the job's objects in alpha deleted")
        assert len(bed.objects("beta", job_id)["pod"]) == 2
        beta.start()
        await eventually(lambda: all_gone(bed, job_id), timeout_s=60, what="every object of the job deleted")
        assert beta.exited() is None, beta.log_tail()


async def test_a_worker_pod_deleted_by_hand_fails_the_job_with_the_reason_and_the_rest_is_cleaned(
    bed: Bed,
) -> None:
    doc = await prepare_job(bed, "pod deleted by hand")
    submitted = await submit(bed.stack, doc)
    job_id = submitted["id"]
    running = await wait_status(bed.stack, job_id, {"Running"}, timeout_s=90)
    victim = next(w for w in running["workers"] if w["cluster"] == "beta" and w["index"] == 1)

    assert bed.kubes["beta"].delete("pod", bed.namespaces["beta"], names.pod_name(victim["id"]), 0)

    failed = await wait_status(bed.stack, job_id, {"Failed"}, timeout_s=60)
    assert victim["id"] in failed["reason"], failed["reason"]
    assert DELETED_OUTSIDE in failed["reason"], failed["reason"]
    worker = next(w for w in failed["workers"] if w["id"] == victim["id"])
    assert worker["phase"] == "Failed"
    assert worker["reason"] == DELETED_OUTSIDE
    # The job ended: the scheduler stops the other workers, and their agents delete everything.
    await eventually(
        lambda: all_gone(bed, job_id), timeout_s=60, what="every object of the failed job deleted"
    )


async def test_a_worker_the_cluster_refuses_for_now_shows_why_and_is_created_once_it_can_be(bed: Bed) -> None:
    """Beta's agent works in a namespace that does not exist yet (every create answers 404): the placement
    must not be dropped — the worker says why it waits, and its pod comes once the namespace exists."""
    assert bed.beta_agent is not None
    bed.beta_agent.stop()
    late = f"e2e-late-{uuid.uuid4().hex[:8]}"
    bed.namespaces["beta"] = late
    bed.beta_agent = AgentProcess(
        bed.stack.url, bed.credentials["beta"], bed.clusters["beta"], late, bed.tmp / "beta-late"
    )
    bed.beta_agent.start()
    doc = await prepare_job(bed, "namespace created late")
    job_id = (await submit(bed.stack, doc))["id"]

    async def waiting_with_a_reason() -> list[str] | None:
        current = await job(bed.stack, job_id)
        reasons = [w["reason"] for w in current["workers"] if w["cluster"] == "beta"]
        return reasons if all("retrying" in r for r in reasons) else None

    reasons = await eventually(waiting_with_a_reason, timeout_s=60, what="beta workers saying why they wait")
    assert all("not found" in r.lower() for r in reasons), reasons
    assert not bed.objects("beta", job_id)["pod"]

    create_namespace(bed.kubes["beta"], name=late)
    running = await wait_status(bed.stack, job_id, {"Running"}, timeout_s=90)
    pods = bed.pods(job_id)
    assert set(pods) == {w["id"] for w in running["workers"]}
    assert sorted(p["cluster"] for p in pods.values()) == ["alpha", "beta", "beta"]

    async with bed.stack.client() as client:
        assert (await client.post(f"/api/v1/jobs/{job_id}:cancel")).status_code == 200
    await eventually(lambda: all_gone(bed, job_id), timeout_s=60, what="every object of the job deleted")


async def test_gpus_of_a_pod_rlark_did_not_create_send_a_job_elsewhere_and_make_the_next_wait_naming_them(
    bed: Bed,
) -> None:
    """Another team's training pod holds all 8 GPUs of alpha's first node: the job goes to the second node,
    the next job waits with a reason saying whose GPUs are in use, and gets the node once the pod is gone."""
    busy, other_node = bed.nodes["alpha"]
    team = create_namespace(bed.kubes["alpha"], "team")
    gpus = {"nvidia.com/gpu": "8"}
    trainer = {
        "metadata": {"name": "trainer", "namespace": team},
        "spec": {
            "nodeName": busy,
            "containers": [
                {
                    "name": "train",
                    "image": "example.com/train:1.0",
                    "resources": {"requests": gpus, "limits": gpus},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }
    await asyncio.to_thread(bed.kubes["alpha"].core.create_namespaced_pod, team, trainer)

    async def node_gpus(name: str) -> tuple[int, int, int] | None:
        """The node's (allocated, foreign, free) GPUs; None until inventory has ingested the node."""
        async with bed.stack.client() as client:
            response = await client.get(f"/api/v1/clusters/alpha/nodes/{name}")
        if response.status_code == 404:
            return None
        assert response.status_code == 200, response.text
        node = response.json()
        return node["gpu_allocated"], node["gpu_allocated_foreign"], node["gpu_free"]

    async def busy_reported() -> bool:
        return await node_gpus(busy) == (8, 8, 0)

    await eventually(busy_reported, timeout_s=60, what="the other team's 8 GPUs reported on its node")

    def train(name: str) -> dict[str, Any]:
        selector = {"rlark.io/pool": bed.pool}
        task = role(
            "train", 1, cluster="alpha", gpusPerWorker=8, nodeSelector=selector, image="example.com/t:1"
        )
        return document(name, [task], RUN)

    await wait_placeable(bed.stack, train("first"), timeout_s=180)
    first = await submit(bed.stack, train("first"))
    running = await wait_status(bed.stack, first["id"], {"Running"}, timeout_s=90)
    assert [w["node"] for w in running["workers"]] == [other_node]

    async def ours_reported() -> bool:
        return await node_gpus(other_node) == (8, 0, 0)

    await eventually(ours_reported, timeout_s=60, what="the first job's 8 GPUs reported on its node")
    second = await submit(bed.stack, train("second"))

    async def explained() -> dict[str, Any] | None:
        current = await job(bed.stack, second["id"])
        return current if "GPUs in use" in (current["reason"] or "") else None

    waiting = await eventually(explained, timeout_s=60, what="the second job waiting with the GPUs in use")
    assert waiting["status"] == "Pending"
    assert (
        "GPUs in use on those 2 schedulable nodes: 16 of 16 (8 by workloads RLark did not place, 8 by RLark jobs)"
        in waiting["reason"]
    ), waiting["reason"]

    await asyncio.to_thread(
        bed.kubes["alpha"].core.delete_namespaced_pod, "trainer", team, grace_period_seconds=0
    )
    placed = await wait_status(bed.stack, second["id"], {"Running"}, timeout_s=90)
    assert [w["node"] for w in placed["workers"]] == [busy]

    async with bed.stack.client() as client:
        for submitted in (first, second):
            assert (await client.post(f"/api/v1/jobs/{submitted['id']}:cancel")).status_code == 200
    for submitted in (first, second):
        await eventually(
            lambda s=submitted: all_gone(bed, s["id"]), timeout_s=60, what="the job's objects deleted"
        )


async def test_the_same_job_naming_no_cluster_runs_whole_on_one_kubernetes_cluster_outside_any_domain(
    bed: Bed,
) -> None:
    """Issue 35 on the Kubernetes runtime (ADR 0026): the roles of the cross-cluster job above with their
    clusters and domain left out land on one cluster that holds all three workers, join no network domain,
    and the pods carry the one-cluster worker contract (the Header by its DNS name, no virtual IP)."""
    bed.public_key = make_public_key(bed.tmp, "laptop")
    await add_key(bed.stack, "laptop", bed.public_key)
    doc = job_document(bed, "any cluster on kubernetes", "unused")
    for task in doc["spec"]["tasks"]:
        del task["cluster"]
    del doc["spec"]["networkDomain"]
    await wait_placeable(bed.stack, doc, timeout_s=180)
    async with bed.stack.client() as client:
        preview = (await client.post("/api/v1/jobs:preview", json=doc)).json()
    assert preview["layout"]["kind"] == "one", preview["layout"]
    (chosen,) = preview["layout"]["clusters"]
    assert preview["layout"]["message"] == f"fits on {chosen} alone"

    # The agents name no object-storage CSI driver: a bucket on either cluster is refused at preview, naming the
    # setting (issue 33), where the worker used to fail once placed.
    keys = (
        '{"accessKeyId": "AKIAEXAMPLE", "secretAccessKey": "example-only", "endpoint": "http://s3.lab:9000"}'
    )
    async with bed.stack.client() as client:
        stored = await client.post("/api/v1/secrets", json={"name": "bucket-keys", "value": keys})
        assert stored.status_code == 201, stored.text
    with_bucket = copy.deepcopy(doc)
    with_bucket["spec"]["tasks"][0]["mounts"] = [
        {
            "name": "ckpt",
            "type": "objectStorage",
            "source": "s3://ckpt/run",
            "path": "/ckpt",
            "secretRef": "bucket-keys",
        }
    ]
    with_bucket["spec"]["tasks"][0]["cluster"] = chosen
    async with bed.stack.client() as client:
        refused = (await client.post("/api/v1/jobs:preview", json=with_bucket)).json()
    [error] = [e for e in refused["errors"] if e["code"] == "mount_type_unsupported"]
    assert error["field"] == "spec.tasks[0].mounts[0].type"
    assert error["message_key"] == "mount_type_unconfigured"
    assert "RLARK_K8S_OBJECT_STORAGE_CSI_DRIVER" in error["message"]

    job_id = (await submit(bed.stack, doc))["id"]
    running = await wait_status(bed.stack, job_id, {"Running"}, timeout_s=90)
    assert {w["cluster"] for w in running["workers"]} == {chosen}
    assert running["network_domain"] is None
    assert {w["virtual_ip"] for w in running["workers"]} == {None}
    scheduled = next(e for e in running["timeline"] if e["to_status"] == "Scheduled")
    assert scheduled["reason"] == f"placed 3 worker(s) on {chosen}: it fits there alone"
    pods = bed.pods(job_id)
    assert {p["cluster"] for p in pods.values()} == {chosen}
    header = next(w for w in running["workers"] if w["is_header"])
    header_ip = pods[header["id"]]["status"]["podIP"]
    assert ipaddress.ip_address(header_ip) in ipaddress.ip_network(POD_CIDRS[chosen])
    for worker_id, pod in pods.items():
        env = env_of(pod)
        assert "RLARK_VIRTUAL_IP" not in env
        if worker_id != header["id"]:
            # In one cluster the Header is reached at its pod's address, not at a virtual IP.
            assert env["RLARK_HEADER_ADDRESS"] == header_ip

    async with bed.stack.client() as client:
        assert (await client.post(f"/api/v1/jobs/{job_id}:cancel")).status_code == 200
    await eventually(lambda: all_gone(bed, job_id), timeout_s=60, what="every object of the job deleted")
