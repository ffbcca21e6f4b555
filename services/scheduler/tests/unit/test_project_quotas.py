"""Project quotas as values: validation naming the field, usage in (cluster, GPU model) pools, bounds."""

from __future__ import annotations

import pytest
from rlark_scheduler.domain.capacity import CapacityModel
from rlark_scheduler.domain.quotas import (
    OVERALL,
    Breach,
    GpuUsage,
    ProjectId,
    ProjectQuota,
    QuotaError,
    Scope,
    ScopeKind,
    first_breach,
)
from scheduler_fleet import H100, gpu_node

pytestmark = pytest.mark.unit

VISION = ProjectId("vision")


def fields_of(error: pytest.ExceptionInfo[QuotaError]) -> list[str]:
    return [problem.field for problem in error.value.problems]


def test_a_quota_lists_its_scopes_overall_then_clusters_then_models() -> None:
    quota = ProjectQuota(VISION, 16, clusters={"gpu-b": 8, "gpu-a": 4}, models={"H100": 8}, borrowing_limit=4)
    assert list(quota.scopes()) == [
        (OVERALL, 16),
        (Scope(ScopeKind.CLUSTER, "gpu-a"), 4),
        (Scope(ScopeKind.CLUSTER, "gpu-b"), 8),
        (Scope(ScopeKind.MODEL, "H100"), 8),
    ]


def test_quota_is_frozen_against_later_changes_to_the_given_mappings() -> None:
    clusters = {"gpu-a": 4}
    quota = ProjectQuota(VISION, 8, clusters=clusters)
    clusters["gpu-a"] = 99
    assert quota.clusters["gpu-a"] == 4


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"gpus": -1}, "gpus", "from 0 to"),
        ({"gpus": True}, "gpus", "whole number"),
        ({"gpus": 2.5}, "gpus", "whole number"),
        ({"gpus": 10**9}, "gpus", "from 0 to 1000000"),
        ({"borrowing_limit": -4}, "borrowing_limit", "got -4"),
        ({"clusters": {"gpu-a": -1}}, "clusters.gpu-a", "from 0 to"),
        ({"clusters": {"gpu-a": 9}}, "clusters.gpu-a", "more than the overall quota (8)"),
        ({"models": {"nvidia/H100": 9}}, 'models["nvidia/H100"]', "more than the overall quota"),
        ({"models": {"": 1}}, 'models[""]', "non-empty"),
    ],
)
def test_invalid_figures_are_refused_naming_the_field(
    kwargs: dict[str, object], field: str, words: str
) -> None:
    arguments: dict[str, object] = {"gpus": 8, **kwargs}
    with pytest.raises(QuotaError) as error:
        ProjectQuota(VISION, **arguments)  # type: ignore[arg-type]
    assert fields_of(error) == [field]
    assert words in error.value.problems[0].message
    assert str(error.value).startswith(f'quota of project "vision": {field}: ')


@pytest.mark.parametrize("project", ["", "Vision", "-vision", "vision-", "a" * 64, "vis ion"])
def test_a_project_id_must_be_a_dns_label(project: str) -> None:
    with pytest.raises(QuotaError) as error:
        ProjectQuota(ProjectId(project), 8)
    assert fields_of(error) == ["project"]


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(QuotaError) as error:
        ProjectQuota(VISION, -1, clusters={"gpu-a": -2}, models={"A100": "x"}, borrowing_limit=-3)  # type: ignore[dict-item]
    assert fields_of(error) == ["gpus", "borrowing_limit", "clusters.gpu-a", "models.A100"]


def test_usage_of_allocations_counts_each_gpu_in_its_nodes_cluster_and_model() -> None:
    model = CapacityModel.from_nodes(
        [gpu_node("a1"), gpu_node("a2"), gpu_node("h1", "gpu-b", labels=H100), gpu_node("x", gpu_model="")]
    )
    usage = GpuUsage.of_allocations(
        model,
        [
            (("gpu-a", "a1"), 8),
            (("gpu-a", "a2"), 4),
            (("gpu-b", "h1"), 2),
            (("gpu-a", "x"), 1),
            (("gpu-c", "unseen"), 3),
            (("gpu-a", "a2"), 0),
        ],
    )
    assert dict(usage.pools) == {
        ("gpu-a", "A100"): 12,
        ("gpu-b", "H100"): 2,
        ("gpu-a", ""): 1,
        ("gpu-c", ""): 3,
    }
    assert usage.total == 18
    assert usage.within(Scope(ScopeKind.CLUSTER, "gpu-a")) == 13
    assert usage.within(Scope(ScopeKind.MODEL, "A100")) == 12
    assert usage.within(OVERALL) == 18


def test_usages_add_per_pool_and_empty_pools_vanish() -> None:
    one = GpuUsage({("gpu-a", "A100"): 4, ("gpu-b", "H100"): 0})
    two = GpuUsage({("gpu-a", "A100"): 2, ("gpu-b", "H100"): 8})
    assert one == GpuUsage({("gpu-a", "A100"): 4})
    assert dict((one + two).pools) == {("gpu-a", "A100"): 6, ("gpu-b", "H100"): 8}
    with pytest.raises(ValueError, match=">= 0"):
        GpuUsage({("gpu-a", "A100"): -1})


def test_within_quota_then_borrowing_then_beyond_the_ceiling() -> None:
    quota = ProjectQuota(VISION, 16, clusters={"gpu-a": 8}, borrowing_limit=4)
    used = GpuUsage({("gpu-a", "A100"): 4})
    four = GpuUsage({("gpu-a", "A100"): 4})
    eight = GpuUsage({("gpu-a", "A100"): 8})
    gpu_a = Scope(ScopeKind.CLUSTER, "gpu-a")
    assert first_breach(quota, used, four, borrowing=False) is None
    assert first_breach(quota, used, eight, borrowing=False) == Breach(gpu_a, 4, 8, 8)
    assert first_breach(quota, used, eight, borrowing=True) is None
    assert first_breach(quota, used + four, eight, borrowing=True) == Breach(gpu_a, 8, 8, 12)


def test_model_quota_counts_the_model_across_clusters() -> None:
    quota = ProjectQuota(VISION, 32, models={"H100": 8})
    used = GpuUsage({("gpu-a", "H100"): 4})
    assert first_breach(quota, used, GpuUsage({("gpu-b", "H100"): 8}), borrowing=False) == Breach(
        Scope(ScopeKind.MODEL, "H100"), 4, 8, 8
    )
    assert first_breach(quota, used, GpuUsage({("gpu-b", "A100"): 8}), borrowing=False) is None


def test_a_scope_the_job_does_not_touch_is_never_breached_by_it() -> None:
    # The quota of gpu-a was lowered under running work; the project may still run on gpu-b.
    quota = ProjectQuota(VISION, 16, clusters={"gpu-a": 2})
    used = GpuUsage({("gpu-a", "A100"): 8})
    assert first_breach(quota, used, GpuUsage({("gpu-b", "A100"): 4}), borrowing=False) is None
    assert first_breach(quota, used, GpuUsage({("gpu-a", "A100"): 1}), borrowing=False) is not None
    assert first_breach(quota, used, GpuUsage(), borrowing=False) is None
