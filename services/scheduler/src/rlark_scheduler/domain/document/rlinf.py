"""Static checks of an inline RLinf (Hydra) config against the job that will run it.

Role: catch, at submission, the RLinf misconfigurations that would otherwise hang or fail late on
the cluster (facts from RLinf v0.3, see ``notes/rlinf.md``):

1. ``cluster.num_nodes`` must equal the job's worker count: with fewer Ray nodes RLinf waits
   forever, with more it silently ignores some;
2. ``cluster.component_placement`` resource ranks must exist: without a node group they are the
   job's GPUs (or its nodes when no worker has a GPU), with ``node_group`` the GPUs (or nodes) of
   that group, with the reserved ``node`` group the nodes;
3. ``cluster.node_groups`` labels are unique, not the reserved ``cluster``/``node``, and their
   ``node_ranks`` lie in ``[0, num_nodes)``;
4. ``runner.logger.logger_backends`` is a subset of {tensorboard, wandb, swanlab};
5. ``runner.save_interval`` must be > 0 for checkpoints to be written (warning otherwise).

Node ranks follow the job: the Header's worker is rank 0, then every role in spec order
(``facts.rank_ranges``), because that is the ``RLINF_NODE_RANK`` each worker exports.

Values written as Hydra interpolations (``${...}``) cannot be checked statically; they produce an
``rlinf_value_unchecked`` warning instead of a guess. Placement strings follow RLinf's grammar:
comma-separated parts ``resource_ranks[:process_ranks]``, each side ``a``, ``a-b`` or ``all``
(``all`` only on the resource side); ranges are kept as bounds, never expanded.

Codes: errors ``rlinf_num_nodes_mismatch``, ``rlinf_placement_rank_out_of_range``,
``rlinf_placement_invalid``, ``rlinf_node_groups_invalid``, ``rlinf_logger_backend_invalid``,
``rlinf_config_invalid``; warnings ``rlinf_num_nodes_missing``, ``rlinf_value_unchecked``,
``rlinf_logger_needs_credentials`` (wandb/swanlab), ``rlinf_save_interval_disabled``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlark_contracts.messages import Text, text

from rlark_scheduler.domain.document.errors import Severity, SpecError
from rlark_scheduler.domain.document.fields import child_path

LOGGER_BACKENDS = frozenset({"tensorboard", "wandb", "swanlab"})
RESERVED_NODE_GROUP_LABELS = frozenset({"cluster", "node"})
_CREDENTIAL_BACKENDS = frozenset({"wandb", "swanlab"})

_RANGE = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?")


class RankSyntaxError(ValueError):
    """A rank list or placement string RLinf would not accept."""


@dataclass(frozen=True, slots=True)
class RankSpan:
    """Inclusive range of ranks ``first..last``."""

    first: int
    last: int


def parse_rank_list(text: str | int, *, allow_all: bool = True) -> tuple[RankSpan, ...] | None:
    """Parse ``"0-7"``, ``"0,2,4"``, ``"1-2,5"``, ``3`` or ``"all"`` (returns None for all).

    Raises :class:`RankSyntaxError` on anything else, descending ranges included.
    """
    if isinstance(text, bool):
        raise RankSyntaxError(f"expected ranks, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise RankSyntaxError(f"ranks must be >= 0, got {text}")
        return (RankSpan(text, text),)
    stripped = text.strip()
    if stripped == "all":
        if not allow_all:
            raise RankSyntaxError('"all" is not allowed here')
        return None
    spans: list[RankSpan] = []
    for part in stripped.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise RankSyntaxError(f'"{part.strip()}" is not a rank or a rank range like 0-7')
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise RankSyntaxError(f'"{part.strip()}" is a descending range')
        spans.append(RankSpan(first, last))
    return tuple(spans)


@dataclass(frozen=True, slots=True)
class PlacementPart:
    """One ``resource_ranks[:process_ranks]`` part; ``resources`` None means ``all``."""

    resources: tuple[RankSpan, ...] | None
    processes: tuple[RankSpan, ...] | None


def parse_placement(text: str | int) -> tuple[PlacementPart, ...]:
    """Parse a placement string such as ``"0-3:0-7,4-7"`` or ``"all"`` into its parts."""
    if isinstance(text, int):
        return (PlacementPart(parse_rank_list(text), None),)
    parts: list[PlacementPart] = []
    for raw in text.split(","):
        if not raw.strip():
            continue
        resource_text, colon, process_text = raw.partition(":")
        if ":" in process_text:
            raise RankSyntaxError(f'"{raw.strip()}" has more than one ":"')
        resources = parse_rank_list(resource_text)
        processes = parse_rank_list(process_text, allow_all=False) if colon else None
        parts.append(PlacementPart(resources, processes))
    if not parts:
        raise RankSyntaxError("the placement is empty")
    return tuple(parts)


def _is_interpolation(value: object) -> bool:
    return isinstance(value, str) and "${" in value


@dataclass(frozen=True, slots=True)
class _NodeGroup:
    nodes: frozenset[int]
    gpus: int
    custom_hardware: bool
    ignore_hardware: bool

    def resource_count(self) -> int | None:
        """Resources that placement ranks index in this group; None when unknowable here."""
        if self.custom_hardware:
            return None
        if self.ignore_hardware or self.gpus == 0:
            return len(self.nodes)
        return self.gpus


class _Checker:
    def __init__(self, rank_gpus: Sequence[int], field: str) -> None:
        self.rank_gpus = rank_gpus
        self.num_nodes = len(rank_gpus)
        self.total_gpus = sum(rank_gpus)
        self.field = field
        self.issues: list[SpecError] = []
        self.groups: dict[str, _NodeGroup] = {}
        self.broken_groups: set[str] = set()

    def error(self, code: str, message: str, field: str) -> None:
        self.issues.append(SpecError(code, message, field))

    def warn(self, code: str, message: str, field: str) -> None:
        self.issues.append(SpecError(code, message, field, severity=Severity.WARNING))

    def unchecked(self, field: str) -> None:
        self.warn(
            "rlinf_value_unchecked",
            text("rlinf_value_unchecked", field=field),
            field,
        )

    # -- cluster.num_nodes ---------------------------------------------------------------------

    def num_nodes_rule(self, cluster: Mapping[str, Any], field: str) -> None:
        path = child_path(field, "num_nodes")
        if "num_nodes" not in cluster:
            self.warn(
                "rlinf_num_nodes_missing",
                text("rlinf_num_nodes_missing", field=path, workers=self.num_nodes),
                path,
            )
            return
        value = cluster["num_nodes"]
        if _is_interpolation(value):
            self.unchecked(path)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.error(
                "rlinf_num_nodes_mismatch",
                text("rlinf_num_nodes_mismatch", field=path, workers=self.num_nodes),
                path,
            )
        elif value != self.num_nodes:
            key = (
                "rlinf_num_nodes_mismatch.more"
                if value > self.num_nodes
                else "rlinf_num_nodes_mismatch.fewer"
            )
            self.error(
                "rlinf_num_nodes_mismatch",
                Text(key, {"field": path, "value": value, "workers": self.num_nodes}),
                path,
            )

    # -- cluster.node_groups -------------------------------------------------------------------

    def node_groups_rule(self, cluster: Mapping[str, Any], field: str) -> None:
        if "node_groups" not in cluster or cluster["node_groups"] is None:
            return
        groups_path = child_path(field, "node_groups")
        groups = cluster["node_groups"]
        if not isinstance(groups, list):
            self.error(
                "rlinf_node_groups_invalid",
                text("rlinf_node_groups_invalid.list", field=groups_path),
                groups_path,
            )
            return
        for index, group in enumerate(groups):
            path = child_path(groups_path, index)
            if not isinstance(group, Mapping):
                self.error(
                    "rlinf_node_groups_invalid", text("rlinf_node_groups_invalid.mapping", field=path), path
                )
                continue
            label = group.get("label")
            if label is None or isinstance(label, bool | list | dict) or str(label) == "":
                self.error(
                    "rlinf_node_groups_invalid",
                    text("rlinf_node_groups_invalid.required", field=child_path(path, "label")),
                    child_path(path, "label"),
                )
                continue
            label = str(label)
            label_path = child_path(path, "label")
            if label in RESERVED_NODE_GROUP_LABELS:
                self.error(
                    "rlinf_node_groups_invalid",
                    text("rlinf_node_groups_invalid.reserved", field=label_path, label=label),
                    label_path,
                )
                continue
            if label in self.groups:
                self.error(
                    "rlinf_node_groups_invalid",
                    text("rlinf_node_groups_invalid.duplicate", field=label_path, label=label),
                    label_path,
                )
                continue
            nodes = self._group_nodes(group.get("node_ranks"), child_path(path, "node_ranks"))
            if nodes is None:
                self.broken_groups.add(label)
                continue
            self.groups[label] = _NodeGroup(
                nodes=nodes,
                gpus=sum(self.rank_gpus[rank] for rank in nodes),
                custom_hardware=bool(group.get("hardware")),
                ignore_hardware=group.get("ignore_hardware") is True,
            )

    def _group_nodes(self, value: object, path: str) -> frozenset[int] | None:
        if value is None:
            self.error(
                "rlinf_node_groups_invalid", text("rlinf_node_groups_invalid.required", field=path), path
            )
            return None
        if _is_interpolation(value):
            self.unchecked(path)
            return None
        if not isinstance(value, str | int):
            self.error("rlinf_node_groups_invalid", text("rlinf_node_groups_invalid.ranks", field=path), path)
            return None
        try:
            spans = parse_rank_list(value)
        except RankSyntaxError as exc:
            self.error(
                "rlinf_node_groups_invalid",
                text("rlinf_node_groups_invalid.syntax", field=path, detail=str(exc)),
                path,
            )
            return None
        if spans is None:
            return frozenset(range(self.num_nodes))
        highest = max(span.last for span in spans)
        if highest >= self.num_nodes:
            self.error(
                "rlinf_node_groups_invalid",
                text(
                    "rlinf_node_groups_invalid.out_of_range",
                    field=path,
                    rank=highest,
                    last=self.num_nodes - 1,
                ),
                path,
            )
            return None
        return frozenset(rank for span in spans for rank in range(span.first, span.last + 1))

    # -- cluster.component_placement -----------------------------------------------------------

    def placement_rule(self, cluster: Mapping[str, Any], field: str) -> None:
        placements = cluster.get("component_placement")
        if placements is None:
            return
        placements_path = child_path(field, "component_placement")
        if not isinstance(placements, Mapping):
            self.error(
                "rlinf_placement_invalid",
                text("rlinf_placement_invalid.mapping", field=placements_path),
                placements_path,
            )
            return
        components: set[str] = set()
        for key, value in placements.items():
            path = child_path(placements_path, str(key))
            for name in (part.strip() for part in str(key).split(",")):
                if name in components:
                    self.error(
                        "rlinf_placement_invalid",
                        text("rlinf_placement_invalid.twice", field=path, name=name),
                        path,
                    )
                components.add(name)
            self._one_placement(str(key), value, path)

    def _one_placement(self, components: str, value: object, path: str) -> None:
        labels: list[str] | None = None
        placement_path = path
        if isinstance(value, Mapping):
            group_value = value.get("node_group")
            if group_value is not None:
                labels = self._labels(group_value)
            if "placement" not in value:
                self.error(
                    "rlinf_placement_invalid",
                    text("rlinf_placement_invalid.missing", field=path),
                    path,
                )
                return
            placement_path = child_path(path, "placement")
            value = value["placement"]
        if _is_interpolation(value):
            self.unchecked(placement_path)
            return
        if not isinstance(value, str | int) or isinstance(value, bool):
            self.error(
                "rlinf_placement_invalid",
                text("rlinf_placement_invalid.string", field=placement_path),
                placement_path,
            )
            return
        try:
            parts = parse_placement(value)
        except RankSyntaxError as exc:
            self.error(
                "rlinf_placement_invalid",
                text("rlinf_placement_invalid.syntax", field=placement_path, detail=str(exc)),
                placement_path,
            )
            return
        count, what = self._resources(labels, path)
        if count is None:
            return
        highest = -1
        for part in parts:
            if part.resources is None:
                continue
            first = part.resources[0].first
            if first <= highest:
                self.error(
                    "rlinf_placement_invalid",
                    text("rlinf_placement_invalid.order", field=placement_path),
                    placement_path,
                )
                return
            highest = max(span.last for span in part.resources)
        if highest >= count:
            self.error(
                "rlinf_placement_rank_out_of_range",
                Text(
                    f"rlinf_placement_rank_out_of_range.{what}" + ("" if count else "_none"),
                    {
                        "field": placement_path,
                        "components": components,
                        "rank": highest,
                        "count": count,
                        "last": count - 1,
                    },
                ),
                placement_path,
            )

    def _labels(self, value: object) -> list[str]:
        if isinstance(value, list):
            return [str(item).strip() for item in value]
        return [label.strip() for label in str(value).split(",")]

    def _resources(self, labels: list[str] | None, path: str) -> tuple[int | None, str]:
        default = (self.total_gpus, "gpus") if self.total_gpus else (self.num_nodes, "nodes")
        if labels is None:
            return default
        total = 0
        for label in labels:
            if label == "cluster":
                total += default[0]
            elif label == "node":
                total += self.num_nodes
            elif label in self.groups:
                count = self.groups[label].resource_count()
                if count is None:
                    return None, ""
                total += count
            elif label in self.broken_groups:
                return None, ""  # already reported where the group is defined
            else:
                self.error(
                    "rlinf_node_groups_invalid",
                    text(
                        "rlinf_node_groups_invalid.unknown", field=child_path(path, "node_group"), label=label
                    ),
                    child_path(path, "node_group"),
                )
                return None, ""
        return total, "groups"

    # -- runner --------------------------------------------------------------------------------

    def runner_rule(self, runner: Mapping[str, Any], field: str) -> None:
        logger = runner.get("logger")
        if isinstance(logger, Mapping) and logger.get("logger_backends") is not None:
            path = child_path(child_path(field, "logger"), "logger_backends")
            backends = logger["logger_backends"]
            if _is_interpolation(backends):
                self.unchecked(path)
            else:
                names = backends if isinstance(backends, list) else [backends]
                for name in names:
                    if str(name) not in LOGGER_BACKENDS:
                        self.error(
                            "rlinf_logger_backend_invalid",
                            text(
                                "rlinf_logger_backend_invalid",
                                field=path,
                                name=str(name),
                                backends=", ".join(sorted(LOGGER_BACKENDS)),
                            ),
                            path,
                        )
                    elif str(name) in _CREDENTIAL_BACKENDS:
                        self.warn(
                            "rlinf_logger_needs_credentials",
                            text("rlinf_logger_needs_credentials", field=path, name=str(name)),
                            path,
                        )
        if "save_interval" in runner:
            path = child_path(field, "save_interval")
            value = runner["save_interval"]
            if _is_interpolation(value):
                self.unchecked(path)
            elif isinstance(value, int) and not isinstance(value, bool) and value <= 0:
                self.warn(
                    "rlinf_save_interval_disabled",
                    text("rlinf_save_interval_disabled", field=path, value=value),
                    path,
                )


def check_rlinf_config(
    config: Mapping[str, Any], rank_gpus: Sequence[int], field: str = "spec.rlinfConfig"
) -> list[SpecError]:
    """Errors and warnings for ``config`` given the GPUs of each node rank of the job.

    ``rank_gpus[r]`` is the GPU count of the worker with node rank ``r``; its length is the
    job's worker count.
    """
    checker = _Checker(rank_gpus, field)
    cluster = config.get("cluster")
    cluster_path = child_path(field, "cluster")
    if isinstance(cluster, Mapping):
        checker.num_nodes_rule(cluster, cluster_path)
        checker.node_groups_rule(cluster, cluster_path)
        checker.placement_rule(cluster, cluster_path)
    elif cluster is not None:
        checker.error("rlinf_config_invalid", text("rlinf_config_invalid", field=cluster_path), cluster_path)
    else:
        checker.warn(
            "rlinf_num_nodes_missing",
            text("rlinf_num_nodes_missing.cluster", field=cluster_path, workers=checker.num_nodes),
            cluster_path,
        )
    runner = config.get("runner")
    if isinstance(runner, Mapping):
        checker.runner_rule(runner, child_path(field, "runner"))
    return checker.issues
