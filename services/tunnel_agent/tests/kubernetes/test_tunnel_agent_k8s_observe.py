"""Pods fold into worker status with Kubernetes' own reasons; Nodes into node observations."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_tunnel_agent.runtime.driver import WorkerPhase, WorkerStatus
from rlark_tunnel_agent.runtime.kubernetes.observe import (
    DELETED_OUTSIDE,
    RUNNING_WITHOUT_MARKERS,
    deleted_outside,
    fold_pod,
    node_facts,
    pod_gpus,
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
    observation = facts.observation()
    assert (observation.gpu_count, observation.schedulable) == (8, False)
    report = facts.report(gpu_allocated=4)
    assert (report.gpu_allocatable, report.gpu_allocated, report.cpu_millis) == (7, 4, 64000)


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


def test_pod_gpus_sum_the_container_limits() -> None:
    body = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}, {"resources": {}}]}}
    assert pod_gpus(body) == 2
