"""Placement by need (ADR 0026): roles that name no cluster, and the clusters the placer chooses for them.

One cluster that fits the whole job first, with no network domain; else, when the job allows it and a
domain it may use joins them, the fewest clusters — roles whole where they can be, the Header with the roles
it talks to most, the best measured link — and every choice said in words.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from rlark_scheduler.domain.capacity import CapacityModel, ClusterFacts, NodeState, cluster_labels
from rlark_scheduler.domain.document.model import SpanClusters
from rlark_scheduler.domain.document.parsing import parse_job_document
from rlark_scheduler.domain.fairness import ProjectJob, admission_round
from rlark_scheduler.domain.forecast import fit_hints
from rlark_scheduler.domain.jobs import job_request
from rlark_scheduler.domain.layouts import layout_text, layout_view, placed_text
from rlark_scheduler.domain.placement import (
    JobRequest,
    LayoutKind,
    Placement,
    RoleRequest,
    Unplaceable,
    header_group,
    layouts,
    place,
)
from rlark_scheduler.domain.queue import JobQueue, schedule_round
from rlark_scheduler.domain.quotas import ProjectId, ProjectQuota
from rlark_scheduler.domain.reasons import PendingCode, SpanCode, can_ever_fit, explain_pending, pending_texts
from scheduler_fleet import gpu_node

pytestmark = pytest.mark.unit


def nodes(cluster: str, count: int, gpus: int = 8, **kwargs: object) -> list[NodeState]:
    return [gpu_node(f"{cluster}-{i}", cluster=cluster, gpus=gpus, **kwargs) for i in range(count)]  # type: ignore[arg-type]


def fleet(*groups: list[NodeState], domains: dict[str, list[str] | None] | None = None) -> CapacityModel:
    model = CapacityModel.from_nodes([node for group in groups for node in group])
    model.set_domains({"lab": None} if domains is None else domains)
    return model


def role(name: str, replicas: int = 1, gpus: int = 8, **kwargs: object) -> RoleRequest:
    return RoleRequest(name, str(kwargs.pop("cluster", "")), {}, replicas, gpus, **kwargs)  # type: ignore[arg-type]


def job(*roles: RoleRequest, header: str = "actor", **kwargs: object) -> JobRequest:
    return JobRequest("job-1", 0, 0, roles, header, **kwargs)  # type: ignore[arg-type]


def placed(result: Placement | Unplaceable) -> Placement:
    assert isinstance(result, Placement), result
    assert result.layout is not None
    return result


def where(result: Placement) -> dict[str, list[str]]:
    clusters: dict[str, list[str]] = {}
    for worker in result.workers:
        clusters.setdefault(worker.role, []).append(worker.cluster)
    return clusters


ACTOR_ROLLOUT = job(role("actor"), role("rollout", 2))


# ------------------------------------------------------------------------------------------ one cluster


def test_a_job_naming_no_cluster_lands_on_the_one_cluster_that_fits_without_a_domain() -> None:
    model = fleet(nodes("north", 2), nodes("south", 3))
    result = placed(place(model, ACTOR_ROLLOUT))
    assert result.layout is not None
    assert (result.layout.kind, result.layout.clusters, result.layout.domain) == (
        LayoutKind.ONE,
        ("south",),
        None,
    )
    assert where(result) == {"actor": ["south"], "rollout": ["south", "south"]}
    assert [w.rank for w in result.workers] == [0, 1, 2]
    assert layout_text(result).english == "fits on south alone"


def test_of_the_clusters_that_fit_the_tightest_is_chosen_so_big_clusters_stay_whole() -> None:
    model = fleet(nodes("big", 10), nodes("small", 3), nodes("mid", 5))
    assert placed(place(model, ACTOR_ROLLOUT)).layout.clusters == ("small",)  # type: ignore[union-attr]
    busy = fleet(nodes("big", 10), nodes("small", 3, used=8), nodes("mid", 5))
    assert placed(place(busy, ACTOR_ROLLOUT)).layout.clusters == ("mid",)  # type: ignore[union-attr]


def test_a_job_never_spans_when_one_cluster_fits_even_across_a_better_link() -> None:
    model = fleet(nodes("north", 2), nodes("south", 2), nodes("west", 3))
    model.set_round_trip("north", "south", 0.1)
    result = placed(place(model, ACTOR_ROLLOUT))
    assert result.layout.clusters == ("west",)  # type: ignore[union-attr]


def test_clusters_and_a_cluster_selector_restrict_where_a_role_may_go() -> None:
    model = fleet(nodes("north", 3), nodes("south", 3), nodes("east", 3))
    model.set_cluster_facts("south", ClusterFacts(labels=cluster_labels({}, region="cn-south")))
    model.set_cluster_facts("east", ClusterFacts(labels=cluster_labels({"tier": "gold"}, region="cn-east")))
    listed = job(role("actor", clusters=("east", "south")), role("rollout", 2, clusters=("east", "south")))
    assert placed(place(model, listed)).layout.clusters == ("east",)  # type: ignore[union-attr]
    selected = job(role("actor"), role("rollout", 2, cluster_selector={"rlark.io/region": "cn-south"}))
    assert where(placed(place(model, selected))) == {"actor": ["south"], "rollout": ["south", "south"]}
    gold = job(
        role("actor", cluster_selector={"tier": "gold"}),
        role("rollout", 2, cluster_selector={"tier": "gold"}),
    )
    assert placed(place(model, gold)).layout.clusters == ("east",)  # type: ignore[union-attr]


def test_a_role_goes_only_to_clusters_that_can_mount_its_mounts() -> None:
    model = fleet(nodes("north", 3), nodes("south", 3))
    model.set_cluster_facts("north", ClusterFacts(runtime="local", hostpath_allow=()))
    model.set_cluster_facts("south", ClusterFacts(runtime="local", hostpath_allow=("/data",)))
    data = (("hostPath", "/data/set"),)
    assert placed(place(model, job(role("actor", mounts=data)))).layout.clusters == ("south",)  # type: ignore[union-attr]
    claims = (("pvc", "ckpt"),)  # the local runtime mounts no claims
    assert isinstance(place(model, job(role("actor", mounts=claims))), Unplaceable)


def test_a_role_naming_its_cluster_pins_the_others_there_when_one_cluster_fits() -> None:
    model = fleet(nodes("north", 3), nodes("south", 3))
    mixed = job(role("actor", cluster="north"), role("rollout", 2))
    assert where(placed(place(model, mixed))) == {"actor": ["north"], "rollout": ["north", "north"]}


# ---------------------------------------------------------------------------------------- spanning


def test_a_job_no_cluster_fits_spans_two_clusters_of_a_domain_and_says_so() -> None:
    model = fleet(nodes("north", 1), nodes("south", 2))
    model.set_round_trip("south", "north", 3.0)
    result = placed(place(model, ACTOR_ROLLOUT))
    layout = result.layout
    assert layout is not None
    assert (layout.kind, layout.clusters, layout.domain, layout.rtt_ms) == (
        LayoutKind.SPAN,
        ("north", "south"),
        "lab",
        3.0,
    )
    assert where(result) == {"actor": ["north"], "rollout": ["south", "south"]}
    assert layout_text(result).english == (
        "no single cluster fits its 3 workers (24 GPUs) now: actor → north, rollout → south, 3.0 ms apart, "
        "through network domain lab"
    )
    assert layout_text(result).render("zh-CN") == (
        "现在没有单个集群能放下它的 3 个工作节点（24 块 GPU）：actor → north, rollout → south，相距 3.0 毫秒，经由网络域 lab"
    )
    assert placed_text(result).english.startswith(
        "placed 3 worker(s) across north, south through network domain lab"
    )
    view = layout_view(result)
    assert (view["kind"], view["domain"], view["roles"][1]) == (
        "span",
        "lab",
        {"role": "rollout", "clusters": ["south"]},
    )


def test_an_unmeasured_link_is_said_as_such() -> None:
    result = placed(place(fleet(nodes("north", 1), nodes("south", 2)), ACTOR_ROLLOUT))
    assert result.layout.rtt_ms is None  # type: ignore[union-attr]
    assert "the link between them is not measured yet" in layout_text(result).english


def test_with_span_never_the_job_waits_and_the_reason_says_what_spanning_would_change() -> None:
    model = fleet(nodes("north", 1), nodes("south", 2))
    never = replace(ACTOR_ROLLOUT, span=SpanClusters.NEVER)
    assert isinstance(place(model, never), Unplaceable)
    reason = explain_pending(model, never)
    assert reason.code is PendingCode.NO_CLUSTER_FITS
    assert (reason.closest, reason.placed, reason.workers) == ("south", 2, 3)
    assert reason.span is not None
    assert (reason.span.code, reason.span.clusters, reason.span.domain) == (
        SpanCode.REFUSED,
        ("north", "south"),
        "lab",
    )
    said = [t.english for t in pending_texts(reason)]
    assert said[0] == "no cluster fits the whole job now; closest: south (2 of 3 workers)"
    assert said[-1] == (
        "spanning north, south through network domain lab would place it now (spec.placement.spanClusters is never)"
    )
    assert reason.message.endswith(said[-1])
    hints = fit_hints(model, never, [])
    assert [(h.kind, h.cluster, h.domain) for h in hints] == [("span", "north, south", "lab")]


def test_without_a_domain_joining_them_the_job_waits_and_the_reason_names_the_clusters() -> None:
    model = fleet(nodes("north", 1), nodes("south", 2), domains={})
    assert isinstance(place(model, ACTOR_ROLLOUT), Unplaceable)
    reason = explain_pending(model, ACTOR_ROLLOUT)
    assert reason.span is not None
    assert (reason.span.code, reason.span.clusters) == (SpanCode.NO_DOMAIN, ("north", "south"))
    assert (
        "across north, south it would fit now, but no network domain the job may use joins them"
        in reason.message
    )


def test_a_job_never_spans_clusters_no_domain_it_may_use_joins() -> None:
    model = fleet(nodes("north", 1), nodes("south", 1), nodes("east", 2), domains={"lab": ["north", "south"]})
    big = job(role("actor"), role("rollout", 1))
    assert placed(place(model, big)).layout.clusters == ("east",)  # type: ignore[union-attr]
    bigger = job(role("actor"), role("rollout", 2))
    # north + south hold only 2 workers; east + anything would, but no domain joins east.
    assert isinstance(place(model, bigger), Unplaceable)
    model.set_domains({"lab": ["north", "south"], "wan": ["east", "north"]})
    assert placed(place(model, bigger)).layout.domain == "wan"  # type: ignore[union-attr]
    named = replace(bigger, domains=("lab",))
    assert isinstance(place(model, named), Unplaceable)
    none = replace(bigger, domains=())
    assert isinstance(place(model, none), Unplaceable)


def test_the_fewest_clusters_are_used() -> None:
    model = fleet(nodes("a", 2), nodes("b", 2), nodes("c", 4))
    result = placed(place(model, job(role("actor"), role("rollout", 4))))
    assert len(result.layout.clusters) == 2  # type: ignore[union-attr]
    assert set(result.layout.clusters) == {"a", "c"} or set(result.layout.clusters) == {"b", "c"}  # type: ignore[union-attr]


def test_roles_stay_whole_where_they_can_and_a_role_is_split_only_when_none_can() -> None:
    model = fleet(nodes("north", 3), nodes("south", 3))
    whole = placed(place(model, job(role("actor"), role("rollout", 3))))
    assert whole.layout.split == ()  # type: ignore[union-attr]
    assert where(whole) in (
        {"actor": ["north"], "rollout": ["south"] * 3},
        {"actor": ["south"], "rollout": ["north"] * 3},
    )
    split = placed(place(model, job(role("actor"), role("rollout", 5))))
    assert split.layout.split == ("rollout",)  # type: ignore[union-attr]
    assert sorted(where(split)["rollout"]) == ["north", "north", "south", "south", "south"] or sorted(
        where(split)["rollout"]
    ) == ["north", "north", "north", "south", "south"]
    assert [w.index for w in split.workers if w.role == "rollout"] == [0, 1, 2, 3, 4]


def test_the_header_keeps_the_roles_with_gpus_and_cpu_roles_go_across() -> None:
    # actor (Header) + rollout fit in one cluster, env fits in either: env is the one sent across.
    model = fleet(nodes("north", 3), nodes("south", 3))
    rl = job(role("actor"), role("rollout", 2), role("env", 2, gpus=0))
    assert header_group(rl) == {"actor", "rollout"}
    result = placed(place(model, rl))
    chosen = where(result)
    assert chosen["actor"] == chosen["rollout"][:1] * 1
    assert set(chosen["rollout"]) == set(chosen["actor"])
    assert set(chosen["env"]) != set(chosen["actor"])
    assert result.layout.apart == ()  # type: ignore[union-attr]


def test_keep_together_names_the_roles_the_header_talks_to_most() -> None:
    model = fleet(nodes("north", 3), nodes("south", 3))
    rl = job(role("actor"), role("rollout", 2), role("env", 2, gpus=0), keep_together=("env",))
    assert header_group(rl) == {"actor", "env"}
    chosen = where(placed(place(model, rl)))
    assert set(chosen["env"]) == set(chosen["actor"])
    assert set(chosen["rollout"]) != set(chosen["actor"])


def test_of_two_pairs_the_best_measured_link_is_preferred_and_an_unmeasured_one_last() -> None:
    model = fleet(nodes("a", 1), nodes("b", 2), nodes("c", 2))
    rl = job(role("actor"), role("rollout", 2))
    assert placed(place(model, rl)).layout.clusters in (("a", "b"),)  # type: ignore[union-attr]  # names decide
    model.set_round_trip("a", "b", 40.0)
    model.set_round_trip("a", "c", 2.5)
    assert placed(place(model, rl)).layout.clusters == ("a", "c")  # type: ignore[union-attr]
    model.set_round_trip("a", "c", None)
    assert placed(place(model, rl)).layout.clusters == ("a", "b")  # type: ignore[union-attr]


def test_a_job_that_could_never_fit_anywhere_is_refused_and_one_that_could_across_clusters_is_not() -> None:
    model = fleet(nodes("north", 1), nodes("south", 2))
    ever, _ = can_ever_fit(model, ACTOR_ROLLOUT)
    assert ever
    never, reason = can_ever_fit(model, replace(ACTOR_ROLLOUT, span=SpanClusters.NEVER))
    assert not never
    assert reason is not None
    assert (
        pending_texts(reason)[0].english
        == "no cluster could ever hold the whole job; closest: south (2 of 3 workers)"
    )


# --------------------------------------------------------------------------------- the rest of the rules


def test_a_waiting_job_naming_no_cluster_is_tried_again_when_any_cluster_it_may_use_changes() -> None:
    model = fleet(nodes("north", 1), nodes("south", 1), domains={})
    queue = JobQueue()
    queue.push(ACTOR_ROLLOUT)
    assert schedule_round(model, queue) == []
    assert schedule_round(model, queue) == []
    assert queue.last_round.tried == 0
    model.upsert_node(gpu_node("south-9", cluster="south"))
    assert schedule_round(model, queue) == []
    assert queue.last_round.tried == 1
    model.set_domains({"lab": None})  # a domain now joins them: tried again, and it spans
    [result] = schedule_round(model, queue)
    assert result.layout is not None
    assert result.layout.kind is LayoutKind.SPAN


def test_a_full_cluster_quota_sends_the_job_to_another_cluster() -> None:
    model = fleet(nodes("north", 3), nodes("south", 5))
    quota = ProjectQuota(ProjectId("vision"), gpus=100, clusters={"north": 0})
    request = replace(ACTOR_ROLLOUT, project="vision")
    assert placed(place(model, request)).layout.clusters == ("north",)  # type: ignore[union-attr]
    result = admission_round(model, [ProjectJob(request, ProjectId("vision"))], {}, [quota])
    [admitted] = result.admitted
    assert {w.cluster for w in admitted.placement.workers} == {"south"}


def test_layouts_yield_every_fitting_cluster_best_first_then_spans() -> None:
    model = fleet(nodes("a", 3), nodes("b", 4))
    kinds = [(p.layout.kind, p.layout.clusters) for p in layouts(model, ACTOR_ROLLOUT)]  # type: ignore[union-attr]
    assert kinds[:2] == [(LayoutKind.ONE, ("a",)), (LayoutKind.ONE, ("b",))]
    assert all(kind is LayoutKind.SPAN for kind, _ in kinds[2:])


def test_the_document_says_what_the_placer_may_do() -> None:
    doc = parse_job_document(
        {
            "metadata": {"name": "rl"},
            "spec": {
                "header": "actor",
                "runScript": "python train.py",
                "placement": {"spanClusters": "never", "keepTogether": ["env"]},
                "tasks": [
                    {"name": "actor", "image": "rl:v1", "gpusPerWorker": 8},
                    {
                        "name": "env",
                        "image": "rl:v1",
                        "clusters": ["a", "b"],
                        "clusterSelector": {"tier": "gold"},
                    },
                    {"name": "reward", "cluster": "c", "image": "rl:v1"},
                ],
            },
        }
    )
    request = job_request("job-1", doc.spec, 1)
    assert (request.span, request.domains, request.keep_together) == (SpanClusters.NEVER, None, ("env",))
    assert not request.named
    assert request.clusters == ("c",)
    env = request.roles[1]
    assert (env.cluster, env.clusters, dict(env.cluster_selector)) == ("", ("a", "b"), {"tier": "gold"})
    named = job_request("job-2", doc.spec.model_copy(update={"network_domain": "none"}), 1)
    assert named.domains == ()
    default = parse_job_document(
        {"metadata": {"name": "x"}, "spec": {"tasks": [{"name": "w", "image": "i:1"}]}}
    )
    assert default.spec.span_clusters is SpanClusters.WHEN_NEEDED


def test_a_clusters_room_is_kept_in_step_with_every_change() -> None:
    def scanned(model: CapacityModel, cluster: str) -> tuple[int, int]:
        usable = [n for n in model.nodes(cluster) if not n.gone and n.ready and n.schedulable]
        return (
            (sum(model.free_gpus(n.key) for n in usable), len(usable)) if model.is_online(cluster) else (0, 0)
        )

    model = fleet(nodes("north", 3), nodes("south", 2, used=4))
    steps = [
        lambda: model.allocate("a", [(("north", "north-0"), 8), (("north", "north-1"), 3)]),
        lambda: model.upsert_node(gpu_node("north-1", cluster="north", ready=False)),
        lambda: model.upsert_node(gpu_node("north-9", cluster="north", gpus=4)),
        lambda: model.release("a"),
        lambda: model.remove_node("south", "south-0"),
        lambda: model.set_cluster_online("south", False),
        lambda: model.upsert_node(gpu_node("north-2", cluster="north", gone=True)),
    ]
    for step in steps:
        step()
        for cluster in ("north", "south"):
            assert model.room(cluster) == scanned(model, cluster)
