"""Fair admission (issue 20 item 2, ADR 0020): priority, then inside-quota work, then borrowing in
dominant-share order; never beyond quota + borrowing limit; gangs placed exactly; a reason for each
job left waiting."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.fairness import (
    ProjectJob,
    WaitReason,
    admission_round,
    dominant_share,
    fleet_gpus,
)
from rlark_scheduler.domain.placement import JobRequest, RoleRequest, Unplaceable, place
from rlark_scheduler.domain.quotas import Breach, GpuUsage, ProjectId, ProjectQuota, Scope, ScopeKind
from scheduler_fleet import H100, gpu_node

pytestmark = pytest.mark.unit

VISION, SPEECH, ROBOTS = ProjectId("vision"), ProjectId("speech"), ProjectId("robots")


def job(
    job_id: str,
    project: ProjectId,
    nodes: int = 1,
    *,
    gpus: int = 8,
    seq: int = 0,
    priority: int = 0,
    cluster: str = "gpu-a",
) -> ProjectJob:
    role = RoleRequest("header", cluster, {}, nodes, gpus)
    return ProjectJob(JobRequest(job_id, priority, seq, [role], "header"), project)


def fleet(count: int, cluster: str = "gpu-a", labels: dict[str, str] | None = None) -> list[NodeState]:
    return [gpu_node(f"{cluster}-n{i}", cluster, labels=labels) for i in range(count)]


def run(model: CapacityModel, project_job: ProjectJob) -> None:
    """Start ``project_job`` outside any round (as a job already running)."""
    placed = place(model, project_job.request)
    assert not isinstance(placed, Unplaceable)
    model.allocate(project_job.job_id, placed.allocations())


def test_inside_quota_work_goes_before_an_older_borrowing_job_of_the_same_priority() -> None:
    model = CapacityModel.from_nodes(fleet(2))
    run(model, job("vision-0", VISION))
    quotas = [ProjectQuota(VISION, 8, borrowing_limit=16), ProjectQuota(SPEECH, 8)]
    result = admission_round(
        model, [job("vision-1", VISION, seq=1), job("speech-1", SPEECH, seq=2)], {"vision-0": VISION}, quotas
    )
    assert [a.job_id for a in result.admitted] == ["speech-1"]
    assert result.admitted[0].borrowing is False
    [waiting] = result.waiting
    assert (waiting.job_id, waiting.reason) == ("vision-1", WaitReason.CAPACITY)
    assert isinstance(waiting.unplaceable, Unplaceable)


def test_higher_priority_borrowing_goes_before_lower_priority_inside_quota_work() -> None:
    model = CapacityModel.from_nodes(fleet(1))
    quotas = [ProjectQuota(VISION, 0, borrowing_limit=8), ProjectQuota(SPEECH, 8)]
    result = admission_round(
        model, [job("speech-low", SPEECH, seq=1), job("vision-high", VISION, seq=2, priority=5)], {}, quotas
    )
    assert [(a.job_id, a.borrowing) for a in result.admitted] == [("vision-high", True)]
    assert [(w.job_id, w.reason) for w in result.waiting] == [("speech-low", WaitReason.CAPACITY)]


def test_borrowers_take_turns_by_dominant_share_smallest_first() -> None:
    model = CapacityModel.from_nodes(fleet(6))
    run(model, job("vision-0", VISION))
    run(model, job("vision-00", VISION))
    quotas = [ProjectQuota(p, 0, borrowing_limit=48) for p in (VISION, SPEECH, ROBOTS)]
    waiting = [
        job(f"{p}-{i}", p, seq=10 * i + n)
        for i in range(1, 4)
        for n, p in enumerate((VISION, SPEECH, ROBOTS))
    ]
    result = admission_round(model, waiting, {"vision-0": VISION, "vision-00": VISION}, quotas)
    # 4 free nodes: speech and robots (no usage) go first, oldest job first on a tie, then once each
    # of them holds 2, the tie with vision (2 held) is broken by its older job.
    assert [a.job_id for a in result.admitted] == ["speech-1", "robots-1", "speech-2", "robots-2"]
    assert result.shares == {VISION: Fraction(1, 3), SPEECH: Fraction(1, 3), ROBOTS: Fraction(1, 3)}
    assert {w.job_id: w.reason for w in result.waiting} == {
        "vision-1": WaitReason.CAPACITY,
        "vision-2": WaitReason.CAPACITY,
        "speech-3": WaitReason.CAPACITY,
        "robots-3": WaitReason.CAPACITY,
        "vision-3": WaitReason.CAPACITY,
    }


def test_never_beyond_quota_plus_borrowing_limit_with_the_scope_and_figures() -> None:
    model = CapacityModel.from_nodes(fleet(4))
    quotas = [ProjectQuota(VISION, 8, clusters={"gpu-a": 8}, borrowing_limit=8), ProjectQuota(SPEECH, 4)]
    waiting = [
        job("vision-1", VISION, seq=1),
        job("vision-2", VISION, seq=2),
        job("vision-3", VISION, seq=3),
        job("speech-1", SPEECH, 1, gpus=4, seq=4),
        job("speech-2", SPEECH, 1, gpus=4, seq=5),
    ]
    result = admission_round(model, waiting, {}, quotas)
    assert [(a.job_id, a.borrowing) for a in result.admitted] == [
        ("vision-1", False),
        ("speech-1", False),
        ("vision-2", True),
    ]
    assert result.usage[VISION] == GpuUsage({("gpu-a", "A100"): 16})
    by_id = {w.job_id: w for w in result.waiting}
    assert by_id["vision-3"].reason is WaitReason.BORROWING_LIMIT
    assert by_id["vision-3"].breach == Breach(Scope(ScopeKind.OVERALL), 16, 8, 16)
    # No borrowing for speech: its quota is the bound, and the reason says quota.
    assert by_id["speech-2"].reason is WaitReason.QUOTA
    assert by_id["speech-2"].breach == Breach(Scope(ScopeKind.OVERALL), 4, 4, 4)


def test_a_model_quota_counts_the_model_of_the_nodes_the_gang_gets() -> None:
    model = CapacityModel.from_nodes([*fleet(2, "gpu-a", H100), *fleet(2, "gpu-b")])
    quotas = [ProjectQuota(VISION, 32, models={"H100": 8})]
    waiting = [
        job("h-1", VISION, seq=1),
        job("h-2", VISION, seq=2),
        job("a-1", VISION, seq=3, cluster="gpu-b"),
    ]
    result = admission_round(model, waiting, {}, quotas)
    assert [a.job_id for a in result.admitted] == ["h-1", "a-1"]
    [waiting_job] = result.waiting
    assert waiting_job.reason is WaitReason.QUOTA
    assert waiting_job.breach == Breach(Scope(ScopeKind.MODEL, "H100"), 8, 8, 8)


def test_a_job_spanning_clusters_counts_once_against_the_overall_quota_and_share() -> None:
    model = CapacityModel.from_nodes([*fleet(2, "gpu-a"), *fleet(2, "gpu-b", H100)])
    roles = [RoleRequest("actor", "gpu-a", {}, 1, 8), RoleRequest("rollout", "gpu-b", {}, 1, 8)]
    spanning = ProjectJob(JobRequest("span", 0, 1, roles, "actor"), VISION)
    quotas = [ProjectQuota(VISION, 16, clusters={"gpu-a": 8, "gpu-b": 8}), ProjectQuota(SPEECH, 16)]
    result = admission_round(model, [spanning, job("after", VISION, seq=2)], {}, quotas)
    [admitted] = result.admitted
    assert admitted.usage == GpuUsage({("gpu-a", "A100"): 8, ("gpu-b", "H100"): 8})
    assert [w.breach for w in result.waiting] == [Breach(Scope(ScopeKind.OVERALL), 16, 8, 16)]
    assert result.shares[VISION] == Fraction(1, 2)  # half the A100s and half the H100s: one half, not two


def test_gangs_are_placed_whole_and_allocated_before_the_next_job() -> None:
    model = CapacityModel.from_nodes(fleet(5))
    quotas = [ProjectQuota(VISION, 40), ProjectQuota(SPEECH, 40)]
    result = admission_round(model, [job("a", VISION, 3, seq=1), job("b", SPEECH, 3, seq=2)], {}, quotas)
    assert [a.job_id for a in result.admitted] == ["a"]
    assert len(model.held("a")) == 3
    assert model.held("b") == ()
    assert result.waiting[0].reason is WaitReason.CAPACITY


def test_a_job_that_cannot_be_placed_waits_for_quota_when_its_known_gpus_exceed_the_ceiling() -> None:
    model = CapacityModel.from_nodes(fleet(1))
    quotas = [ProjectQuota(VISION, 8, borrowing_limit=8)]
    result = admission_round(model, [job("big", VISION, 3, seq=1)], {}, quotas)
    [waiting] = result.waiting
    assert (waiting.reason, waiting.breach) == (
        WaitReason.BORROWING_LIMIT,
        Breach(Scope(ScopeKind.OVERALL), 0, 24, 16),
    )


def test_dominant_share_is_the_largest_fraction_of_one_gpu_model() -> None:
    model = CapacityModel.from_nodes(
        [*fleet(4, "gpu-a"), *fleet(1, "gpu-b", H100), gpu_node("gone", gone=True)]
    )
    assert fleet_gpus(model) == {"A100": 32, "H100": 8}
    usage = GpuUsage({("gpu-a", "A100"): 16, ("gpu-b", "H100"): 2})
    assert dominant_share(usage, fleet_gpus(model)) == Fraction(1, 2)
    assert dominant_share(GpuUsage({("gpu-b", "H100"): 6}), fleet_gpus(model)) == Fraction(3, 4)
    assert dominant_share(GpuUsage(), fleet_gpus(model)) == 0
    assert dominant_share(GpuUsage({("gpu-c", "V100"): 2}), fleet_gpus(model)) == 2


def test_cpu_only_jobs_are_never_held_back_by_quota() -> None:
    model = CapacityModel.from_nodes(fleet(1))
    result = admission_round(model, [job("cpu", VISION, gpus=0)], {}, [ProjectQuota(VISION, 0)])
    assert [a.job_id for a in result.admitted] == ["cpu"]


def test_jobs_of_a_project_without_a_quota_are_bounded_by_nothing_and_go_before_borrowers() -> None:
    model = CapacityModel.from_nodes(fleet(4))
    run(model, job("r", SPEECH, gpus=8))
    result = admission_round(
        model,
        [job("borrows", VISION, seq=1), job("free", ProjectId(""), seq=2), job("gone", SPEECH, seq=3)],
        {"r": SPEECH},
        [ProjectQuota(VISION, 0, borrowing_limit=8)],
    )
    assert [(a.job_id, a.borrowing) for a in result.admitted] == [
        ("free", False),
        ("gone", False),
        ("borrows", True),
    ]
    assert result.usage[SPEECH].total == 16


@pytest.mark.parametrize(
    ("waiting", "running", "quotas", "words"),
    [
        ([job("a", VISION), job("a", VISION)], {"r": VISION}, [ProjectQuota(VISION, 8)], "listed twice: a"),
        ([], {}, [ProjectQuota(VISION, 8)], "without a project in running: r"),
        ([job("r", VISION)], {"r": VISION}, [ProjectQuota(VISION, 8)], "already hold an allocation: r"),
        (
            [],
            {"r": VISION},
            [ProjectQuota(VISION, 8), ProjectQuota(VISION, 4)],
            'two quotas for project "vision"',
        ),
    ],
)
def test_inconsistent_inputs_are_refused_before_any_change(
    waiting: list[ProjectJob], running: dict[str, ProjectId], quotas: list[ProjectQuota], words: str
) -> None:
    model = CapacityModel.from_nodes(fleet(2))
    run(model, job("r", VISION))
    version = model.version("gpu-a")
    with pytest.raises(ValueError, match=re.escape(words)):
        admission_round(model, waiting, running, quotas)
    assert model.version("gpu-a") == version
    assert model.allocated_jobs() == ["r"]
