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
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.rlinf import check_rlinf_config
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job
from rlark_scheduler.domain.placement import JobRequest, RoleRequest
from rlark_scheduler.domain.quotas import Breach, Scope, ScopeKind
from rlark_scheduler.domain.reasons import (
    PENDING_KEYS,
    PendingCode,
    QuotaShortfall,
    can_ever_fit,
    explain_pending,
    pending_texts,
    pending_view,
    quota_pending,
    role_texts,
)
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
    quota_codes = (PendingCode.QUOTA, PendingCode.BORROWING_LIMIT)
    keys = (
        [f"pending.{code.value}.{kind.value}" for kind in ScopeKind]
        if code in quota_codes
        else [PENDING_KEYS[code]]
    )
    for lang in LANGUAGES:
        assert all(key in catalogue(lang) for key in keys), keys


@pytest.mark.parametrize(
    ("code", "scope", "english", "chinese"),
    [
        (
            PendingCode.QUOTA,
            Scope(ScopeKind.CLUSTER, "gpu-a"),
            'project "vision" would hold 24 GPU(s) in cluster gpu-a, beyond its quota of 16 (it holds 8, '
            "this job asks 16); the project may not borrow",
            "项目“vision”将在集群 gpu-a 占用 24 块 GPU，超出其配额 16（已占用 8，本作业申请 16）；该项目不允许借用",
        ),
        (
            PendingCode.BORROWING_LIMIT,
            Scope(ScopeKind.MODEL, "nvidia/H100"),
            'project "vision" would hold 24 GPU(s) of GPU model nvidia/H100, beyond its quota plus borrowing '
            "limit of 16 (it holds 8, this job asks 16)",
            "项目“vision”将占用 24 块 nvidia/H100 型号的 GPU，超出其配额加借用上限 16（已占用 8，本作业申请 16）",
        ),
    ],
)
def test_a_quota_reason_says_the_project_scope_and_figures_in_both_languages(
    code: PendingCode, scope: Scope, english: str, chinese: str
) -> None:
    shortfall = QuotaShortfall("vision", Breach(scope, used=8, requested=16, limit=16))
    reason = quota_pending(single_role_job(2), code, shortfall)
    assert (reason.code, reason.message, reason.roles) == (code, english, ())
    (said,) = pending_texts(reason)
    assert said.english == english
    assert said.render("zh-CN") == chinese
    view = pending_view(reason)
    assert view["quota"] == {
        "project": "vision",
        "scope": {"kind": scope.kind.value, "name": scope.name},
        "used": 8,
        "requested": 16,
        "limit": 16,
    }
    assert view["code"] == code.value
    assert view["parts"] == [said.wire()]


def test_a_quota_reason_needs_a_quota_code() -> None:
    shortfall = QuotaShortfall("vision", Breach(Scope(ScopeKind.OVERALL), used=0, requested=8, limit=0))
    with pytest.raises(ValueError, match="not a quota code"):
        quota_pending(single_role_job(1), PendingCode.TOO_FEW_READY_NODES, shortfall)


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
