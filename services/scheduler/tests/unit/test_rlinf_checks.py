"""Static checks of an inline RLinf config against the job's workers and GPUs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, NodeState
from rlark_scheduler.domain.document.errors import Severity
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.document.rlinf import (
    PlacementPart,
    RankSpan,
    RankSyntaxError,
    check_rlinf_config,
    parse_placement,
    parse_rank_list,
)
from rlark_scheduler.domain.document.validation import ValidationContext, validate_job

# A job of 3 workers: the Header with 8 GPUs (rank 0), two rollout workers with 4 GPUs each.
RANK_GPUS = [8, 4, 4]


def _issues(config: dict[str, Any], rank_gpus: list[int] = RANK_GPUS) -> set[tuple[str, str, str]]:
    return {(i.code, i.field, i.severity.value) for i in check_rlinf_config(config, rank_gpus)}


def _cluster(**fields: Any) -> dict[str, Any]:
    return {"cluster": {"num_nodes": 3, **fields}}


P = "spec.rlinfConfig.cluster.component_placement"


@pytest.mark.parametrize(
    ("text", "spans"),
    [
        ("0-7", (RankSpan(0, 7),)),
        ("3", (RankSpan(3, 3),)),
        (5, (RankSpan(5, 5),)),
        ("0,2,4", (RankSpan(0, 0), RankSpan(2, 2), RankSpan(4, 4))),
        (" 1-2 , 5 ", (RankSpan(1, 2), RankSpan(5, 5))),
        ("all", None),
    ],
)
def test_rank_lists(text: str | int, spans: tuple[RankSpan, ...] | None) -> None:
    assert parse_rank_list(text) == spans


@pytest.mark.parametrize("text", ["", "a", "3-1", "-1", "1-", "1--2", "0-7x", -1, True])
def test_bad_rank_lists(text: Any) -> None:
    with pytest.raises(RankSyntaxError):
        parse_rank_list(text)


def test_placement_parts_with_and_without_process_ranks() -> None:
    assert parse_placement("0-1:0-3,3-5,7-10:7-14") == (
        PlacementPart((RankSpan(0, 1),), (RankSpan(0, 3),)),
        PlacementPart((RankSpan(3, 5),), None),
        PlacementPart((RankSpan(7, 10),), (RankSpan(7, 14),)),
    )
    assert parse_placement("all") == (PlacementPart(None, None),)
    with pytest.raises(RankSyntaxError):
        parse_placement("0-3:all")
    with pytest.raises(RankSyntaxError):
        parse_placement("0:1:2")


def test_consistent_config_has_no_issue() -> None:
    config = {
        "cluster": {
            "num_nodes": 3,
            "component_placement": {"actor": "0-7", "rollout": "8-15", "reward": "all"},
        },
        "runner": {"save_interval": 50, "logger": {"logger_backends": ["tensorboard"]}},
    }
    assert _issues(config) == set()


@pytest.mark.parametrize("num_nodes", [2, 4])
def test_num_nodes_must_equal_the_worker_count(num_nodes: int) -> None:
    issues = check_rlinf_config({"cluster": {"num_nodes": num_nodes}}, RANK_GPUS)
    assert [(i.code, i.field) for i in issues] == [
        ("rlinf_num_nodes_mismatch", "spec.rlinfConfig.cluster.num_nodes")
    ]
    expected_consequence = "wait forever" if num_nodes > 3 else "unused"
    assert expected_consequence in issues[0].message


@pytest.mark.parametrize("value", [0, "3", True, 2.5])
def test_num_nodes_must_be_a_positive_integer(value: Any) -> None:
    assert ("rlinf_num_nodes_mismatch", "spec.rlinfConfig.cluster.num_nodes", "error") in _issues(
        {"cluster": {"num_nodes": value}}
    )


def test_missing_num_nodes_and_interpolations_are_warnings() -> None:
    assert _issues({"cluster": {}}) == {
        ("rlinf_num_nodes_missing", "spec.rlinfConfig.cluster.num_nodes", "warning")
    }
    assert _issues({"runner": {}}) == {("rlinf_num_nodes_missing", "spec.rlinfConfig.cluster", "warning")}
    assert _issues({"cluster": {"num_nodes": "${oc.env:NUM_NODES}"}}) == {
        ("rlinf_value_unchecked", "spec.rlinfConfig.cluster.num_nodes", "warning")
    }


@pytest.mark.parametrize(
    ("placement", "ok"),
    [
        ("0-15", True),
        ("0-16", False),
        ("15", True),
        ("0,8,16", False),
        (16, False),
        ("0-3:0-7,4-15", True),
        ("all", True),
    ],
)
def test_placement_ranks_must_be_below_the_total_gpus(placement: str | int, ok: bool) -> None:
    issues = _issues(_cluster(component_placement={"actor,rollout": placement}))
    expected = set() if ok else {("rlinf_placement_rank_out_of_range", f'{P}["actor,rollout"]', "error")}
    assert issues == expected


def test_without_gpus_placement_ranks_are_node_ranks() -> None:
    assert _issues(_cluster(component_placement={"agent": "0-2"}), [0, 0, 0]) == set()
    assert _issues(_cluster(component_placement={"agent": "0-3"}), [0, 0, 0]) == {
        ("rlinf_placement_rank_out_of_range", f"{P}.agent", "error")
    }


def test_placement_syntax_errors_and_repeats_are_refused() -> None:
    issues = _issues(
        _cluster(
            component_placement={
                "actor": "zero-seven",
                "rollout": "4-7,0-3",
                "env,actor": "8",
                "reward": {"node_group": "cluster"},
                "critic": ["0"],
            }
        )
    )
    assert issues == {
        ("rlinf_placement_invalid", f"{P}.actor", "error"),
        ("rlinf_placement_invalid", f"{P}.rollout", "error"),
        ("rlinf_placement_invalid", f'{P}["env,actor"]', "error"),
        ("rlinf_placement_invalid", f"{P}.reward", "error"),
        ("rlinf_placement_invalid", f"{P}.critic", "error"),
    }


def test_node_group_placements_count_the_gpus_of_the_group() -> None:
    groups = [{"label": "a800", "node_ranks": "0"}, {"label": 4090, "node_ranks": "1-2"}]
    good = _cluster(
        node_groups=groups,
        component_placement={
            "actor": {"node_group": "a800", "placement": "0-7"},
            "rollout": {"node_group": 4090, "placement": "0-7"},
            "agent": {"node_group": "node", "placement": "0-1:0-199,2:200-299"},
            "both": {"node_group": "a800,4090", "placement": "0-15"},
            "all": {"node_group": ["a800", "4090"], "placement": "all"},
        },
    )
    assert _issues(good) == set()
    bad = _cluster(
        node_groups=groups,
        component_placement={
            "actor": {"node_group": "a800", "placement": "0-8"},
            "agent": {"node_group": "node", "placement": "3"},
            "ghost": {"node_group": "h100", "placement": "0"},
        },
    )
    assert _issues(bad) == {
        ("rlinf_placement_rank_out_of_range", f"{P}.actor.placement", "error"),
        ("rlinf_placement_rank_out_of_range", f"{P}.agent.placement", "error"),
        ("rlinf_node_groups_invalid", f"{P}.ghost.node_group", "error"),
    }


def test_groups_with_custom_hardware_or_ignored_gpus() -> None:
    config = _cluster(
        node_groups=[
            {"label": "franka", "node_ranks": "1-2", "hardware": {"type": "Franka"}},
            {"label": "cpu", "node_ranks": "1-2", "ignore_hardware": True},
        ],
        component_placement={
            "env": {"node_group": "franka", "placement": "0-40"},
            "agent": {"node_group": "cpu", "placement": "0-2"},
        },
    )
    assert _issues(config) == {("rlinf_placement_rank_out_of_range", f"{P}.agent.placement", "error")}


def test_node_group_rules() -> None:
    groups = [
        {"label": "cluster", "node_ranks": "0"},
        {"label": "a", "node_ranks": "0"},
        {"label": "a", "node_ranks": "1"},
        {"label": "b", "node_ranks": "1-3"},
        {"label": "c"},
        {"node_ranks": "0"},
        {"label": "d", "node_ranks": "x"},
        "e",
    ]
    g = "spec.rlinfConfig.cluster.node_groups"
    assert _issues(_cluster(node_groups=groups)) == {
        ("rlinf_node_groups_invalid", f"{g}[0].label", "error"),
        ("rlinf_node_groups_invalid", f"{g}[2].label", "error"),
        ("rlinf_node_groups_invalid", f"{g}[3].node_ranks", "error"),
        ("rlinf_node_groups_invalid", f"{g}[4].node_ranks", "error"),
        ("rlinf_node_groups_invalid", f"{g}[5].label", "error"),
        ("rlinf_node_groups_invalid", f"{g}[6].node_ranks", "error"),
        ("rlinf_node_groups_invalid", f"{g}[7]", "error"),
    }


def test_placement_on_a_broken_group_is_not_reported_twice() -> None:
    config = _cluster(
        node_groups=[{"label": "b", "node_ranks": "5"}],
        component_placement={"actor": {"node_group": "b", "placement": "0"}},
    )
    assert _issues(config) == {
        ("rlinf_node_groups_invalid", "spec.rlinfConfig.cluster.node_groups[0].node_ranks", "error")
    }


def test_logger_backends_must_be_known_and_online_ones_warn_about_credentials() -> None:
    path = "spec.rlinfConfig.runner.logger.logger_backends"
    config = {
        "cluster": {"num_nodes": 3},
        "runner": {"logger": {"logger_backends": ["tensorboard", "mlflow", "wandb"]}},
    }
    assert _issues(config) == {
        ("rlinf_logger_backend_invalid", path, "error"),
        ("rlinf_logger_needs_credentials", path, "warning"),
    }


@pytest.mark.parametrize(("interval", "warned"), [(-1, True), (0, True), (1, False), (100, False)])
def test_save_interval_must_be_positive_for_checkpoints(interval: int, warned: bool) -> None:
    config = {"cluster": {"num_nodes": 3}, "runner": {"save_interval": interval}}
    expected = {("rlinf_save_interval_disabled", "spec.rlinfConfig.runner.save_interval", "warning")}
    assert _issues(config) == (expected if warned else set())


def _job_with(rlinf: dict[str, Any], replicas: int = 2) -> str:
    return (
        "metadata: {name: x}\n"
        "spec:\n"
        "  header: actor\n"
        "  runScript: python t.py\n"
        f"  rlinfConfig: {json.dumps(rlinf)}\n"
        "  tasks:\n"
        "    - {name: rollout, cluster: c, image: 'i:1', gpusPerWorker: 4, replicas: "
        f"{replicas}}}\n"
        "    - {name: actor, cluster: c, image: 'i:1', gpusPerWorker: 8}\n"
    )


def test_validate_job_runs_the_rlinf_checks_with_header_first_ranks() -> None:
    nodes = (NodeState("c", f"n{i}", gpu_allocatable=8) for i in range(4))
    ctx = ValidationContext.build(CapacityModel.from_nodes(nodes), ["c"])
    groups = [{"label": "head", "node_ranks": "0"}, {"label": "roll", "node_ranks": "1-2"}]
    rlinf = {
        "cluster": {
            "num_nodes": 3,
            "node_groups": groups,
            "component_placement": {"actor": {"node_group": "head", "placement": "0-7"}},
        }
    }
    assert validate_job(parse_job_document(_job_with(rlinf)), ctx).errors == ()
    rlinf["cluster"]["num_nodes"] = 4
    report = validate_job(parse_job_document(_job_with(rlinf)), ctx)
    assert [(e.code, e.field, e.line, e.severity) for e in report.errors] == [
        ("rlinf_num_nodes_mismatch", "spec.rlinfConfig.cluster.num_nodes", 5, Severity.ERROR)
    ]
    invalid = validate_job(parse_job_document(_job_with(rlinf, replicas=0)), ctx)
    assert not any(e.code.startswith("rlinf_") for e in invalid.errors)
