"""Validation problems and pending reasons as catalogue sentences (ADR 0011): every code has one, the
key and params travel with each problem, and the Chinese rendering carries the same values."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import Any

import pytest
import scheduler_fleet
from rlark_contracts.events.agent import WorkerStatusChanged
from rlark_contracts.messages import LANGUAGES, Text, catalogue, render
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.placement import JobRequest, RoleRequest
from rlark_scheduler.domain.reasons import (
    PENDING_KEYS,
    PendingCode,
    can_ever_fit,
    explain_pending,
    pending_texts,
    role_texts,
)
from rlark_scheduler.domain.rlinf import check_rlinf_config
from rlark_scheduler.domain.spec import parse_job_document
from rlark_scheduler.domain.validation import ValidationContext, validate_job
from rlark_scheduler.handlers.reports import reported_reason

pytestmark = pytest.mark.unit

A100 = scheduler_fleet.A100
gpu_node = functools.partial(scheduler_fleet.gpu_node, cluster="gpu-b")
NOW = datetime(2026, 12, 1, tzinfo=UTC)
CTX = ValidationContext.build(
    CapacityModel.from_nodes(NodeState("gpu-a", f"n{i}", A100, gpu_allocatable=8) for i in range(2)),
    ["gpu-a"],
    ssh_key_names=["laptop"],
)


def _role(name: str = "actor", **fields: Any) -> dict[str, Any]:
    role: dict[str, Any] = {"name": name, "cluster": "gpu-a", "nodeSelector": dict(A100), "replicas": 1}
    role.update({"gpusPerWorker": 8, "image": "registry.example.com/rlinf:v0.3.0"})
    role.update(fields)
    return role


def _job(tasks: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"header": "actor", "runScript": "python train.py\n", "tasks": tasks, **spec}
    return {"apiVersion": "rlark.io/v1", "kind": "Job", "metadata": {"name": "grpo"}, "spec": body}


def single_role_job(replicas: int) -> JobRequest:
    return JobRequest("job-1", 0, 1, [RoleRequest("rollout", "gpu-b", A100, replicas, 8)], "rollout")


def funnel_cluster() -> list[NodeState]:
    """gpu-b: 4 A100 nodes, 3 ready, 1 with 8 free GPUs."""
    return [gpu_node("a1"), gpu_node("a2", used=1), gpu_node("a3", used=8), gpu_node("a4", ready=False)]


@pytest.mark.parametrize("code", list(PendingCode))
def test_every_pending_code_has_a_sentence_in_every_language(code: PendingCode) -> None:
    for lang in LANGUAGES:
        assert PENDING_KEYS[code] in catalogue(lang)


def test_every_problem_of_a_bad_document_carries_its_key_and_params() -> None:
    bad = _job(
        [
            _role("Bad_Name", cluster="nowhere", image="img", replicas=0, env={"RLARK_X": "1", "1x": "2"}),
            _role(
                "actor",
                gpusPerWorker=99,
                mounts=[{"name": "d", "type": "pvc", "source": "Bad!", "path": "/"}],
            ),
        ],
        header="missing",
        sshKeys=["nope"],
        networkDomain="nowhere",
        priority=1000,
    )
    report = validate_job(parse_job_document(bad), CTX)
    problems = [p.to_dict() for p in (*report.errors, *report.warnings)]
    assert len(problems) >= 10
    for problem in problems:
        assert problem["message_key"] in catalogue("en"), problem
        said = render(str(problem["message_key"]), problem["params"], "en")  # type: ignore[arg-type]
        assert said == problem["message"], problem
        assert render(str(problem["message_key"]), problem["params"], "zh-CN") != said  # type: ignore[arg-type]


def test_an_unknown_cluster_is_said_in_chinese_with_the_field_and_the_name() -> None:
    report = validate_job(parse_job_document(_job([_role(cluster="gpu-z")])), CTX)
    (unknown,) = [e for e in report.errors if e.code == "cluster_unknown"]
    assert isinstance(unknown.message, Text)
    assert unknown.message.render("zh-CN") == 'spec.tasks[0].cluster：没有名为 "gpu-z" 的集群'


def test_a_pending_reason_is_said_clause_by_clause_with_its_counts() -> None:
    reason = explain_pending(CapacityModel.from_nodes(funnel_cluster()), single_role_job(3))
    keys = [said.key for said in pending_texts(reason)]
    assert keys == ["pending.needs", "pending.gpus_in_use.external"]
    main = pending_texts(reason)[0].render("zh-CN")
    assert main == (
        '角色 "rollout" 需要集群 gpu-b 中 3 个匹配 rlark.io/gpu-model=A100 且有 ≥ 8 个空闲 GPU 的节点：'
        "4 个匹配，3 个就绪，3 个可调度，1 个有足够的空闲 GPU"
    )
    assert pending_texts(reason)[1].params == {
        "schedulable": 3,
        "used": 9,
        "allocatable": 24,
        "external": 9,
        "held": 0,
    }


def test_a_job_that_can_never_fit_says_so_in_its_own_words() -> None:
    fits, reason = can_ever_fit(CapacityModel.from_nodes([gpu_node("a1")]), single_role_job(3))
    assert not fits
    assert reason is not None
    assert [said.key for said in pending_texts(reason)] == ["pending.never"]


def test_a_role_that_fits_alone_still_says_its_counts_and_the_job_leaves_it_out() -> None:
    nodes = [*funnel_cluster(), *(NodeState("gpu-c", f"c{i}", A100, gpu_allocatable=8) for i in range(2))]
    job = JobRequest(
        "job-1",
        0,
        1,
        [RoleRequest("rollout", "gpu-b", A100, 3, 8), RoleRequest("actor", "gpu-c", A100, 1, 8)],
        "actor",
    )
    reason = explain_pending(CapacityModel.from_nodes(nodes), job)
    actor = next(r for r in reason.roles if r.role == "actor")
    assert actor.fits_alone
    assert [said.key for said in role_texts(actor)] == ["pending.needs"]
    assert all(said.params.get("role") != "actor" for said in pending_texts(reason))


def _report(**fields: Any) -> WorkerStatusChanged:
    base: dict[str, Any] = {"cluster": "c", "job_id": "j", "worker_id": "j-w-0", "phase": "Failed", "at": NOW}
    return WorkerStatusChanged(**{**base, **fields})


def test_an_agents_keyed_reason_is_said_again_and_free_text_stays_as_sent() -> None:
    keyed = reported_reason(
        _report(
            reason="prepare script exited with 3",
            reason_key="worker.prepare_failed",
            reason_params={"code": 3},
        )
    )
    assert isinstance(keyed, Text)
    assert keyed.render("zh-CN") == "准备脚本退出，退出码 3"
    # An agent on another catalogue version said other words: the words as sent win.
    other = reported_reason(
        _report(reason="prepare failed (3)", reason_key="worker.prepare_failed", reason_params={"code": 3})
    )
    assert not isinstance(other, Text)
    assert other == "prepare failed (3)"
    assert not isinstance(reported_reason(_report(reason="OOMKilled")), Text)


def test_every_rlinf_problem_is_a_catalogue_sentence() -> None:
    config = {
        "cluster": {
            "num_nodes": 3,
            "node_groups": [
                {"label": "cluster", "node_ranks": "0-9"},
                {"label": "g"},
                {"label": "g", "node_ranks": "x"},
            ],
            "component_placement": {"actor": "0-99", "rollout,actor": {"placement": 5}},
        },
        "runner": {"logger": {"logger_backends": ["wandb", "nope"]}, "save_interval": 0},
    }
    problems = check_rlinf_config(config, [8, 8])
    assert len(problems) >= 6
    for problem in problems:
        assert isinstance(problem.message, Text), problem
        assert problem.message.render("zh-CN") != problem.message.english
