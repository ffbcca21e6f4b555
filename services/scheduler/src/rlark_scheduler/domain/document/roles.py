"""``spec.tasks``: each role's name, cluster (named, or chosen by the scheduler among the clusters it may
use — ADR 0026), counts, node selector and image, then its mounts (:mod:`.mounts`) and variables
(:mod:`.env`); and ``spec.placement``, which names roles."""

from __future__ import annotations

from collections.abc import Mapping

from rlark_contracts.messages import text

from rlark_scheduler.domain import selectors
from rlark_scheduler.domain.document.check import DNS_LABEL, Check
from rlark_scheduler.domain.document.env import check_env
from rlark_scheduler.domain.document.fields import child_path
from rlark_scheduler.domain.document.images import image_problem
from rlark_scheduler.domain.document.model import MAX_REPLICAS, RoleSpec
from rlark_scheduler.domain.document.mounts import check_mounts
from rlark_scheduler.domain.jobs import role_request
from rlark_scheduler.domain.placement import role_clusters

MAX_ROLE_NAME_LENGTH = 40
MAX_GPUS_PER_WORKER = 64


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when ``labels`` has every ``key: value`` of ``selector`` (the empty one matches all)."""
    return selectors.matches(selector, labels)


def check_placement_policy(check: Check) -> None:
    """``spec.placement`` (ADR 0026): ``spanClusters`` was checked by the parser; ``keepTogether`` names roles."""
    policy = check.spec.placement
    if policy is None:
        return
    names = {role.name for role in check.spec.tasks}
    for index, name in enumerate(policy.keep_together):
        if name not in names:
            field_path = child_path("spec.placement.keepTogether", index)
            said = text("placement_role_unknown", field=field_path, role=name)
            check.add("placement_role_unknown", said, field_path)


def check_roles(check: Check) -> None:
    """``spec.tasks``: at least one role, and each role's fields, mounts and variables in spec order."""
    if not check.spec.tasks:
        check.add("tasks_missing", text("tasks_missing"), "spec.tasks")
        return
    seen: set[str] = set()
    for index, role in enumerate(check.spec.tasks):
        path = child_path("spec.tasks", index)
        _role_name(check, role, path, seen)
        _role_fields(check, role, path)
        _selector(check, role, path)
        _image(check, role, path)
        check_mounts(check, role, path)
        check_env(check, role, path)


def _role_name(check: Check, role: RoleSpec, path: str, seen: set[str]) -> None:
    name_path = f"{path}.name"
    if len(role.name) > MAX_ROLE_NAME_LENGTH or not DNS_LABEL.fullmatch(role.name):
        check.add(
            "role_name_invalid",
            text("role_name_invalid", field=name_path, name=role.name, max=MAX_ROLE_NAME_LENGTH),
            name_path,
        )
    if role.name in seen:
        check.add(
            "role_name_duplicate",
            text("role_name_duplicate", field=name_path, name=role.name),
            name_path,
        )
    seen.add(role.name)


def _role_fields(check: Check, role: RoleSpec, path: str) -> None:
    if role.cluster is None:
        _cluster_choice(check, role, path)
    elif role.clusters or role.cluster_selector:
        field_path = f"{path}.clusters" if role.clusters else f"{path}.clusterSelector"
        check.add("cluster_choice_conflict", text("cluster_choice_conflict", field=field_path), field_path)
    elif not check.ctx.knows(role.cluster):
        check.add(
            "cluster_unknown",
            text("cluster_unknown", field=f"{path}.cluster", cluster=role.cluster),
            f"{path}.cluster",
        )
    elif not check.ctx.is_online(role.cluster):
        check.add(
            "cluster_offline",
            text("cluster_offline", field=f"{path}.cluster", cluster=role.cluster),
            f"{path}.cluster",
            warning=True,
        )
    if not 1 <= role.replicas <= MAX_REPLICAS:
        check.add(
            "replicas_invalid",
            text("replicas_invalid", field=f"{path}.replicas", max=MAX_REPLICAS),
            f"{path}.replicas",
        )
    if not 0 <= role.gpus_per_worker <= MAX_GPUS_PER_WORKER:
        check.add(
            "gpus_invalid",
            text("gpus_invalid", field=f"{path}.gpusPerWorker", max=MAX_GPUS_PER_WORKER),
            f"{path}.gpusPerWorker",
        )


def _cluster_choice(check: Check, role: RoleSpec, path: str) -> None:
    """A role whose cluster the scheduler chooses (ADR 0026): the clusters it lists exist, its cluster
    selector is valid, and some cluster with nodes is one it may use and can mount its mounts — asked of the
    capacity model the placer decides on (``placement.role_clusters``)."""
    valid = True
    for index, name in enumerate(role.clusters):
        if not check.ctx.knows(name):
            field_path = child_path(f"{path}.clusters", index)
            check.add("cluster_unknown", text("cluster_unknown", field=field_path, cluster=name), field_path)
            valid = False
    valid = _label_pairs(check, role.cluster_selector, f"{path}.clusterSelector") and valid
    if not valid:
        return
    chosen = role_clusters(check.ctx.capacity, role_request(role))
    if chosen:
        return
    allowed = check.ctx.capacity.clusters_matching(role.clusters, role.cluster_selector)
    field_path = f"{path}.clusterSelector" if role.cluster_selector else f"{path}.clusters"
    if not allowed:
        said = text("cluster_choice_empty", field=field_path, role=role.name)
        check.add("cluster_choice_empty", said, field_path)
    else:
        said = text("cluster_choice_mounts", role=role.name, clusters=", ".join(allowed[:10]))
        check.add("cluster_choice_mounts", said, f"{path}.mounts")


def _selector(check: Check, role: RoleSpec, path: str) -> None:
    _label_pairs(check, role.node_selector, f"{path}.nodeSelector")


def _label_pairs(check: Check, pairs: Mapping[str, str], selector_path: str) -> bool:
    """Report every invalid key and value of a node or cluster selector; True when all are valid."""
    valid = True
    for key, value in pairs.items():
        key_path = child_path(selector_path, key)
        key_problem = selectors.label_key_problem(key)
        if key_problem:
            valid = False
            check.add(
                "selector_key_invalid",
                text("selector_key_invalid", field=key_path, key=key, problem=key_problem),
                key_path,
            )
        value_problem = selectors.label_value_problem(value)
        if value_problem:
            valid = False
            check.add(
                "selector_value_invalid",
                text("selector_value_invalid", field=key_path, problem=value_problem),
                key_path,
            )
    return valid


def _image(check: Check, role: RoleSpec, path: str) -> None:
    problem = image_problem(role.image, f"{path}.image")
    if problem:
        check.add(problem[0], problem[1], f"{path}.image")
