"""``make bench deployed-failover``: the two failovers of issue 18 on the DEPLOYED control plane (issue 32,
ADR 0027), next to the host-process figures of ``leader-failover`` and ``agent-failover``.

What runs: the deployment test bed brought up once (`deployment.up`: PostgreSQL and a three-broker Kafka,
``lab`` running ``deploy/kubernetes`` as pods on real kubelets — the scheduler's worker with two replicas —
and ``gpu-a``/``gpu-b`` each running its tunnel-agent from ``deploy/agent``), both measured, then torn down
(``RLARK_KEEP_SERVERS=1`` keeps it). Everything goes through the gateway as a user's calls do.

- **Leader failover**, ``rounds`` times: the pod holding the placement lease (`deployment.scheduler_leader`)
  deleted (``kubectl delete pod``, so SIGTERM and the pod's grace, as a node drain or a rollout does); at
  once a 1-GPU job submitted for gpu-b's fake (KWOK) GPU nodes; the time from the delete to the job's
  ``scheduled_at``. A pod deleted gracefully may still place during its last moments; a placement made
  before the new leader took the lease (``acquired_at`` of the lease's new epoch) is not the new leader's, so
  that round submits a second job and times that one. Before the next round the Deployment is back to two
  Ready pods. Reference: three placements with no failover (submit → ``scheduled_at``).
- **Agent failover**, ``rounds`` times: a 2-worker job across gpu-a and gpu-b in a network domain runs (its
  workers are real pods; the tunnel between the two agents carries it). Each round deletes the acting agent
  pod of one cluster — gpu-b first (the side that accepts the tunnel, whose host key gpu-a pinned), then
  gpu-a (the side that dials), alternately — and times until both ends of the domain's link report ``up``
  again in reports made after the delete (`deployment.wait_tunnel_back`, polled every 0.25 s through the
  API). It checks the replacement kept the tunnel host keys (the state Secret unchanged, no "tunnel key
  generated" in its log) and the job still Running at attempt 1.

The deployed figures include what the host benches do not: kubelet noticing the delete and SIGTERM, the
replacement pod's start (image present), the agent's start and adoption of its workers, the readiness
probe (every 10 s) putting it behind the peers Service, the lab's forwarders.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from rlark_devinfra.k8s import deployment, images, realnode, testbed

POOL_FAKE = "failover"
POOL_REAL = "lab"
FAKE_NODES = 2
AGENT_ORDER = ("gpu-b", "gpu-a")
LEASE_TTL_S = 10.0
"""The scheduler's ``leader_lease_ttl_s`` default (the deployment leaves it)."""
TUNNEL_GRACE_S = 60.0
"""The scheduler's ``tunnel_grace_s`` default: a job whose tunnel stays down this long fails."""


def _at(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def _solo(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "type": "custom",
            "header": "solo",
            "runScript": "true",
            "tasks": [
                {
                    "name": "solo",
                    "cluster": "gpu-b",
                    "replicas": 1,
                    "gpusPerWorker": 1,
                    "nodeSelector": {"rlark.io/pool": POOL_FAKE},
                    "image": images.images().worker_ref,
                }
            ],
        },
    }


def _placed(client: Any, job_id: str, timeout_s: float = 180) -> tuple[datetime, dict[str, Any]]:
    """Until the job is placed (``scheduled_at`` set); when it was, and the job."""
    deadline = time.monotonic() + timeout_s
    shown: dict[str, Any] = {}
    while time.monotonic() < deadline:
        shown = deployment.job(client, job_id)
        if shown.get("scheduled_at"):
            return _at(shown["scheduled_at"]), shown
        if shown["status"] in ("Failed", "Cancelled", "Lost"):
            break
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} not placed: {shown.get('status')} {shown.get('reason')}")


def _submit_when_known(client: Any, document: dict[str, Any], timeout_s: float = 300) -> str:
    """Submit once the scheduler knows what the job names: nodes an agent has just reported, a domain just
    created (both reach it through Kafka, so a submission right after is refused)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return deployment.submit(client, document)
        except RuntimeError as exc:
            known_soon = "selector_matches_too_few" in str(exc) or "network_domain_unknown" in str(exc)
            if not known_soon or time.monotonic() > deadline:
                raise
            time.sleep(3)


def _cancel(client: Any, job_id: str) -> None:
    client.post(f"/api/v1/jobs/{job_id}:cancel")


def _leader_rounds(client: Any, database_url: str, rounds: int) -> dict[str, Any]:
    testbed.start_fake_nodes("gpu-b")
    testbed.create_gpu_nodes(
        testbed.cluster("gpu-b"),
        [
            testbed.GpuNode(f"failover-{i}", gpus=8, labels={"rlark.io/pool": POOL_FAKE})
            for i in range(FAKE_NODES)
        ],
    )
    # Submissions are refused until gpu-b's agent reported the fake nodes (the selector matches none).
    warm = _submit_when_known(client, _solo(f"failover-warm-{uuid.uuid4().hex[:4]}"))
    _placed(client, warm, timeout_s=300)
    _cancel(client, warm)
    reference: list[float] = []
    for n in range(3):
        submitted = datetime.now(UTC)
        job_id = deployment.submit(client, _solo(f"failover-ref-{n}-{uuid.uuid4().hex[:4]}"))
        placed, _ = _placed(client, job_id)
        reference.append((placed - submitted).total_seconds())
        _cancel(client, job_id)

    per_round: list[float] = []
    handover: list[float] = []
    old_leader_placed = 0
    leaders: list[str] = []
    selector = deployment.SCHEDULER_WORKERS
    replicas = deployment.TEST_REPLICAS["scheduler-worker"]
    for n in range(rounds):
        deployment.wait_pods_settled(deployment.CONTROL_PLANE, deployment.NAMESPACE, selector, replicas)
        leader, epoch = _current_leader(database_url)
        deleted = datetime.now(UTC)
        deployment.delete_pod(deployment.CONTROL_PLANE, deployment.NAMESPACE, leader)
        job_id = deployment.submit(client, _solo(f"failover-{n}-{uuid.uuid4().hex[:4]}"))
        placed, _ = _placed(client, job_id)
        new_leader, new_epoch, acquired = _next_leader(database_url, leader, epoch)
        if placed < acquired:  # the deleted pod placed it before stepping down: time the new leader's first
            old_leader_placed += 1
            _cancel(client, job_id)
            job_id = deployment.submit(client, _solo(f"failover-{n}b-{uuid.uuid4().hex[:4]}"))
            placed, _ = _placed(client, job_id)
        _cancel(client, job_id)
        per_round.append((placed - deleted).total_seconds())
        handover.append((acquired - deleted).total_seconds())
        leaders.append(f"{leader} (epoch {epoch}) -> {new_leader} (epoch {new_epoch})")
        deployment.log(f"leader round {n + 1}: {per_round[-1]:.2f} s ({leaders[-1]})")
    median = statistics.median(per_round)
    target = LEASE_TTL_S + 2
    return {
        "rounds": rounds,
        "per_round_s": [round(t, 2) for t in per_round],
        "failover_s": round(median, 2),
        "handover_s": [round(t, 2) for t in handover],
        "handover_median_s": round(statistics.median(handover), 2),
        "placed_by_the_deleted_leader": old_leader_placed,
        "reference_placement_s": [round(t, 2) for t in reference],
        "reference_median_s": round(statistics.median(reference), 2),
        "leaders": leaders,
        "lease_ttl_s": LEASE_TTL_S,
        "target_s": target,
        "meets_target": median <= target,
    }


def _current_leader(database_url: str, timeout_s: float = 60) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return deployment.scheduler_leader(database_url)
        except LookupError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _next_leader(
    database_url: str, old: str, epoch: int, timeout_s: float = 120
) -> tuple[str, int, datetime]:
    """The lease's next holder after ``old`` at ``epoch``: its pod, epoch and when it took the lease."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lease = deployment.placement_lease(database_url)
        if lease is not None and lease[1] > epoch and lease[0] != old:
            return lease
        time.sleep(0.2)
    raise TimeoutError(f"no new placement leader after {old} (epoch {epoch})")


RAY_TOLERATES_TUNNEL_GRACE = {"RAY_health_check_failure_threshold": "20"}
"""Ray's GCS declares a node dead after 5 failed health checks 3 s apart (its defaults): a domain's tunnel down
≈ 15 s loses the nodes behind it, long before the scheduler's tunnel grace (60 s). The failover job's workers
start Ray with 20 (≈ 60 s) so that one round's outage does not end the job the next rounds need."""


def _cross_cluster(domain: str, name: str) -> dict[str, Any]:
    common = {
        "replicas": 1,
        "gpusPerWorker": 1,
        "nodeSelector": {"rlark.io/pool": POOL_REAL},
        "image": images.images().worker_ref,
        "env": RAY_TOLERATES_TUNNEL_GRACE,
    }
    return {
        "apiVersion": "rlark.io/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "type": "custom",
            "header": "head",
            "runScript": "sleep 3600",
            "networkDomain": domain,
            "tasks": [
                {"name": "head", "cluster": "gpu-a", **common},
                {"name": "tail", "cluster": "gpu-b", **common},
            ],
        },
    }


def _running(client: Any, job_id: str, timeout_s: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    shown: dict[str, Any] = {}
    while time.monotonic() < deadline:
        shown = deployment.job(client, job_id)
        if shown["status"] == "Running":
            return shown
        if shown["status"] in ("Failed", "Cancelled", "Lost", "Succeeded"):
            break
        time.sleep(2)
    raise RuntimeError(f"job {job_id} not Running: {shown.get('status')} {shown.get('reason')}")


def _agent_rounds(client: Any, rounds: int) -> dict[str, Any]:
    for cluster in deployment.AGENT_CLUSTERS:
        for slot in range(deployment.REAL_NODES[cluster]):
            realnode.advertise(
                realnode.RealNode(testbed.cluster(cluster), slot), 4, "A100", {"rlark.io/pool": POOL_REAL}
            )
    domain = f"failover-{uuid.uuid4().hex[:5]}"
    answer = client.post("/api/v1/domains", json={"name": domain, "cidr": "10.203.0.0/16"})
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"creating the domain: {answer.status_code} {answer.text}")
    start = datetime.now(UTC)
    job_id = _submit_when_known(client, _cross_cluster(domain, "agent failover"))
    _running(client, job_id)
    deployment.wait_tunnel_back(client, domain, "gpu-a", "gpu-b", start, timeout_s=300)
    keys = {cluster: deployment.state_secret_digests(cluster) for cluster in deployment.AGENT_CLUSTERS}

    per_round: list[tuple[str, float]] = []
    reported: list[float] = []
    notes: list[str] = []
    keys_kept = True
    for n in range(rounds):
        cluster = AGENT_ORDER[n % len(AGENT_ORDER)]
        deployment.wait_pods_settled(cluster, deployment.AGENT_NAMESPACE, deployment.AGENT_PODS, 1)
        old = deployment.active_agent(cluster)
        deleted = datetime.now(UTC)
        deployment.delete_pod(cluster, deployment.AGENT_NAMESPACE, old)
        back = deployment.wait_tunnel_back(client, domain, "gpu-a", "gpu-b", deleted, timeout_s=300)
        per_round.append((cluster, back.seen_s))
        reported.append(back.reported_s)
        new = deployment.wait_agent_replaced(cluster, old)
        if deployment.state_secret_digests(cluster) != keys[cluster]:
            keys_kept = False
            notes.append(f"round {n + 1}: {cluster}'s state Secret changed")
        if "tunnel key generated" in deployment.agent_log(cluster, new):
            keys_kept = False
            notes.append(f"round {n + 1}: {cluster}'s replacement generated a tunnel key")
        shown = deployment.job(client, job_id)
        if shown["status"] != "Running" or shown["attempt"] != 1:
            notes.append(f"round {n + 1}: the job is {shown['status']} at attempt {shown['attempt']}")
            job_id = deployment.submit(client, _cross_cluster(domain, f"agent failover {n + 2}"))
            _running(client, job_id)
        deployment.log(
            f"agent round {n + 1} ({cluster}): tunnel back after {back.seen_s:.1f} s "
            f"(reported {back.reported_s:.1f} s; down seen {back.down_seen}); {old} -> {new}"
        )
    _cancel(client, job_id)
    seconds = [s for _, s in per_round]
    median = statistics.median(seconds)
    by_cluster = {
        c: round(statistics.median([s for k, s in per_round if k == c]), 2) for c in {k for k, _ in per_round}
    }
    return {
        "rounds": [{"cluster": c, "seconds": round(s, 2)} for c, s in per_round],
        "median_s": round(median, 2),
        "median_by_cluster_s": by_cluster,
        "reported_s": [round(s, 2) for s in reported],
        "reported_median_s": round(statistics.median(reported), 2),
        "host_keys_kept": keys_kept,
        "host_keys": {c: len(k) for c, k in keys.items()},
        "notes": notes,
        "tunnel_grace_s": TUNNEL_GRACE_S,
        "meets_target": median <= TUNNEL_GRACE_S and not notes,
    }


def run(rounds: int = 5) -> dict[str, Any]:
    """Bring the deployment up, time both failovers ``rounds`` times each, tear it down."""
    started = time.monotonic()
    values = deployment.up()
    setup_s = time.monotonic() - started
    try:
        with deployment.api() as client:
            leader = _leader_rounds(client, values["DATABASE_URL"], rounds)
            agent = _agent_rounds(client, rounds)
    finally:
        if not os.environ.get("RLARK_KEEP_SERVERS"):
            deployment.down()
    return {
        "setup_s": round(setup_s, 1),
        "leader": leader,
        "agent": agent,
        "load_average": [round(x, 1) for x in os.getloadavg()],
    }
