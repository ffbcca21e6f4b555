"""Pods fold into worker status with Kubernetes' own reasons; Nodes into node observations."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerStatus
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.runtime.kubernetes.observe import (
    DELETED_OUTSIDE,
    NODE_GONE,
    RUNNING_WITHOUT_MARKERS,
    NodeUsage,
    PodUsage,
    deleted_outside,
    fold_pod,
    node_facts,
    node_gone,
    node_usage,
    pod_gpus,
    pod_requests,
    pod_usage,
    pulling_image,
)

pytestmark = pytest.mark.unit

CREATED = WorkerStatus(worker_id="j-header-0", job_id="j", phase=WorkerPhase.CREATED)


def pod(phase: str = "Pending", state: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"phase": phase, **status}
    if state is not None:
        body["containerStatuses"] = [{"name": "worker", "state": state}]
    return {"metadata": {"name": "rlark-j-header-0"}, "status": body}


def test_a_pod_whose_container_is_being_created_stays_created_with_that_reason() -> None:
    folded = fold_pod(CREATED, pod(state={"waiting": {"reason": "ContainerCreating"}}), stopping=False)
    assert (folded.phase, folded.reason) == (WorkerPhase.CREATED, "ContainerCreating")


def test_image_pull_back_off_keeps_the_kubelet_message_and_is_tracked_as_pulling() -> None:
    state = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x:1"'}}
    folded = fold_pod(CREATED, pod(state=state), stopping=False)
    assert folded.phase == WorkerPhase.CREATED
    assert folded.reason == 'ImagePullBackOff: Back-off pulling image "x:1"'
    assert pulling_image(folded)
    err = fold_pod(CREATED, pod(state={"waiting": {"reason": "ErrImagePull"}}), stopping=False)
    assert pulling_image(err)


def test_an_invalid_image_name_fails_the_worker_at_once() -> None:
    folded = fold_pod(
        CREATED, pod(state={"waiting": {"reason": "InvalidImageName", "message": "bad"}}), stopping=False
    )
    assert (folded.phase, folded.reason) == (WorkerPhase.FAILED, "InvalidImageName: bad")


def test_a_running_container_moves_the_worker_to_starting_and_clears_pull_reasons() -> None:
    pulling = CREATED.model_copy(update={"reason": "ImagePullBackOff: x"})
    folded = fold_pod(pulling, pod("Running", {"running": {}}, podIP="10.64.0.9"), stopping=False)
    assert (folded.phase, folded.reason, folded.address) == (WorkerPhase.STARTING, "", "10.64.0.9")
    joined = folded.model_copy(update={"phase": WorkerPhase.JOINED})
    assert fold_pod(joined, pod("Running", {"running": {}}, podIP="10.64.0.9"), stopping=False) == joined


def test_without_bootstrap_markers_a_running_container_is_a_joined_worker_and_says_why() -> None:
    running = pod("Running", {"running": {}}, podIP="10.64.0.9")
    folded = fold_pod(CREATED, running, stopping=False, markers=False)
    assert (folded.phase, folded.reason) == (WorkerPhase.JOINED, RUNNING_WITHOUT_MARKERS)
    assert fold_pod(folded, running, stopping=False, markers=False) == folded
    ended = fold_pod(folded, pod("Failed", {"terminated": {"exitCode": 3}}), stopping=False, markers=False)
    assert (ended.phase, ended.exit_code) == (WorkerPhase.FAILED, 3)


def test_exit_codes_decide_success_and_failure() -> None:
    ok = fold_pod(
        CREATED, pod("Succeeded", {"terminated": {"exitCode": 0, "reason": "Completed"}}), stopping=False
    )
    assert (ok.phase, ok.exit_code) == (WorkerPhase.SUCCEEDED, 0)
    bad = fold_pod(CREATED, pod("Failed", {"terminated": {"exitCode": 3, "reason": "Error"}}), stopping=False)
    assert (bad.phase, bad.exit_code, bad.reason) == (WorkerPhase.FAILED, 3, "worker exited with 3")


def test_an_oom_killed_container_says_so() -> None:
    folded = fold_pod(
        CREATED, pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), stopping=False
    )
    assert folded.phase == WorkerPhase.FAILED
    assert folded.exit_code == 137
    assert folded.reason.startswith("OOMKilled")


def test_an_evicted_pod_fails_the_worker_with_the_eviction_message() -> None:
    evicted = pod("Failed", reason="Evicted", message="The node was low on resource: memory.")
    folded = fold_pod(CREATED, evicted, stopping=False)
    assert (folded.phase, folded.reason) == (
        WorkerPhase.FAILED,
        "Evicted: The node was low on resource: memory.",
    )


def test_a_kubelet_admission_failure_names_the_missing_resource() -> None:
    refused = pod("Failed", reason="OutOfnvidia.com/gpu", message="Node didn't have enough resource")
    assert fold_pod(CREATED, refused, stopping=False).reason.startswith("OutOfnvidia.com/gpu")


def test_a_worker_being_stopped_ends_stopped_whatever_its_exit_code() -> None:
    folded = fold_pod(CREATED, pod("Failed", {"terminated": {"exitCode": 143}}), stopping=True)
    assert folded.phase == WorkerPhase.STOPPED


def test_terminal_statuses_never_move_again() -> None:
    done = CREATED.model_copy(update={"phase": WorkerPhase.SUCCEEDED, "exit_code": 0})
    assert fold_pod(done, pod("Failed", {"terminated": {"exitCode": 1}}), stopping=False) == done
    assert deleted_outside(done) == done
    assert deleted_outside(CREATED).reason == DELETED_OUTSIDE
    assert node_gone(done, "gpu-1") == done


def test_a_worker_on_a_deleted_node_fails_naming_the_node_in_words_the_restart_policy_reads() -> None:
    running = CREATED.model_copy(update={"phase": WorkerPhase.JOINED})
    failed = node_gone(running, "gpu-1")
    assert failed.phase == WorkerPhase.FAILED
    assert failed.reason == "NodeGone: node gpu-1 was deleted from the cluster"
    assert failed.reason.startswith(NODE_GONE)


def test_node_facts_read_gpus_model_readiness_cordon_and_addresses() -> None:
    node = {
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {"unschedulable": True},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63500m", "memory": "500Gi", "nvidia.com/gpu": "7"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [
                {"type": "InternalIP", "address": "10.1.2.3"},
                {"type": "Hostname", "address": "gpu-1"},
            ],
        },
    }
    facts = node_facts(node)
    assert (facts.gpu_capacity, facts.gpu_allocatable, facts.gpu_model) == (8, 7, "NVIDIA-H100-80GB-HBM3")
    assert facts.ready
    assert facts.cordoned
    assert facts.cpu_allocatable_millis == 63500
    assert facts.memory_capacity_bytes == 512 * 2**30
    assert facts.addresses == ("10.1.2.3", "gpu-1")
    report = facts.report()
    assert (report.gpu_count, report.gpu_allocatable, report.schedulable) == (8, 7, False)
    assert (report.gpu_allocated, report.cpu_millis, report.cpu_allocatable_millis) == (0, 64000, 63500)


def test_the_rlark_gpu_model_label_wins_and_a_node_without_gpus_reads_zero() -> None:
    node = {
        "metadata": {
            "name": "cpu-1",
            "labels": {"rlark.io/gpu-model": "A100", "nvidia.com/gpu.product": "x"},
        },
        "status": {"capacity": {"cpu": "8"}, "conditions": [{"type": "Ready", "status": "False"}]},
    }
    facts = node_facts(node)
    assert (facts.gpu_model, facts.gpu_capacity, facts.ready, facts.cordoned) == ("A100", 0, False, False)


def test_pod_gpus_sum_the_containers_gpus() -> None:
    body = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {"resources": {}}]}}
    assert pod_gpus(body) == 2


def bound(phase: str = "Running", node: str = "gpu-1", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"nodeName": node, **spec},
        "status": {"phase": phase},
    }


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "resources": resources}


def test_a_pod_holds_its_requests_and_a_limit_counts_where_no_request_is_set() -> None:
    pod = bound(
        containers=[
            container({"cpu": "500m", "memory": "1Gi"}, {"cpu": "2", "nvidia.com/gpu": "8"}),
            container(limits={"cpu": "1", "memory": "2Gi"}),
        ]
    )
    usage = pod_usage(pod, ours=False)
    assert usage == PodUsage(node="gpu-1", gpus=8, cpu_millis=1500, memory_bytes=3 * 2**30, ours=False)


def test_init_containers_count_at_their_peak_and_native_sidecars_all_along() -> None:
    sidecar = {**container({"cpu": "100m"}), "restartPolicy": "Always"}
    pod = bound(
        initContainers=[container({"cpu": "4", "memory": "1Gi"}), sidecar],
        containers=[container({"cpu": "1", "nvidia.com/gpu": "2"}, {"nvidia.com/gpu": "2"})],
        overhead={"cpu": "250m", "memory": "128Mi"},
    )
    asked = pod_requests(pod)
    # cpu: max(1 + 0.1 sidecar, 4 init) + 0.25 overhead; memory: max(0, 1Gi) + 128Mi; GPUs: 2.
    assert asked["cpu"] == Decimal("4.25")
    assert asked["memory"] == 2**30 + 128 * 2**20
    assert pod_gpus(pod) == 2


def test_a_finished_or_unbound_pod_holds_nothing() -> None:
    gpus = [container({"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"})]
    for phase in ("Succeeded", "Failed"):
        assert pod_usage(bound(phase, containers=gpus), ours=False) is None
    assert pod_usage(bound(node="", containers=gpus), ours=False) is None
    pending_on_node = pod_usage(bound("Pending", containers=gpus), ours=False)
    assert pending_on_node is not None
    assert pending_on_node.gpus == 8  # bound and admitted or not: kube-scheduler counts it


def test_node_usage_sums_every_pod_and_counts_the_gpus_of_others_apart() -> None:
    usages = [
        PodUsage(node="gpu-1", gpus=4, cpu_millis=1000, memory_bytes=1, ours=True),
        PodUsage(node="gpu-1", gpus=2, cpu_millis=500, memory_bytes=2, ours=False),
        PodUsage(node="gpu-2", gpus=8, cpu_millis=0, memory_bytes=0, ours=False),
    ]
    totals = node_usage(usages)
    assert totals["gpu-1"] == NodeUsage(gpus=6, cpu_millis=1500, memory_bytes=3, gpus_foreign=2)
    assert totals["gpu-2"] == NodeUsage(gpus=8, gpus_foreign=8)
    assert "gpu-3" not in totals


def test_a_node_report_carries_capacity_allocatable_and_what_its_pods_hold() -> None:
    node = {
        "metadata": {"name": "gpu-1", "labels": {}},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63", "memory": "500Gi", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    report = node_facts(node).report(NodeUsage(gpus=8, cpu_millis=1500, memory_bytes=3, gpus_foreign=8))
    assert (report.gpu_count, report.gpu_allocatable, report.gpu_allocated) == (8, 8, 8)
    assert report.gpu_allocated_foreign == 8
    assert (report.cpu_millis, report.cpu_allocatable_millis, report.cpu_allocated_millis) == (
        64000,
        63000,
        1500,
    )
    assert (report.memory_allocatable_bytes, report.memory_allocated_bytes) == (500 * 2**30, 3)
    assert node_facts(node).report().gpu_allocated == 0


def test_a_nodes_pod_cidrs_are_reported_preferring_the_dual_stack_list() -> None:
    def node(**spec: Any) -> dict[str, Any]:
        return {"metadata": {"name": "n1"}, "spec": spec, "status": {}}

    assert node_facts(node(podCIDR="10.244.1.0/24")).report().pod_cidrs == ["10.244.1.0/24"]
    both = node(podCIDR="10.244.1.0/24", podCIDRs=["10.244.1.0/24", "fd00:10:244:1::/64"])
    assert node_facts(both).report().pod_cidrs == ["10.244.1.0/24", "fd00:10:244:1::/64"]
    assert node_facts(node()).report().pod_cidrs == []


def test_service_cidrs_are_none_when_the_api_server_serves_none_or_forbids_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Refusing:
        def __init__(self, status: int) -> None:
            self.status = status

        def __call__(self, _api_client: object) -> Refusing:
            return self

        def list_service_cidr(self, **_: object) -> None:
            raise ApiException(status=self.status)

    kube = Kube(k8s_client.ApiClient())
    for status in (403, 404):
        monkeypatch.setattr(k8s_client, "NetworkingV1Api", Refusing(status))
        assert kube.list_service_cidrs() is None
    monkeypatch.setattr(k8s_client, "NetworkingV1Api", Refusing(500))
    with pytest.raises(ApiException):
        kube.list_service_cidrs()
