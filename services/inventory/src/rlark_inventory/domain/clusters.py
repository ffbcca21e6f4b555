"""Cluster registration rules: DNS-label names, descriptive fields, the cluster's pod/service CIDRs and
its hostPath policy (the allow-list of host directories workers may mount; rules in
``rlark_contracts.hostpaths``, stored normalised so the event carries the canonical form).

A cluster's pod and service ranges must be valid networks and must not overlap each other: Kubernetes
routes the two differently, and the network-domain service checks its domains against both. Different
clusters may reuse the same ranges (most do: kind, k3s defaults), so nothing is checked across clusters.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field, replace
from typing import Literal

from rlark_contracts import messages
from rlark_contracts.hostpaths import PolicyError, normalise_policy

from rlark_inventory.domain.errors import InvalidInput
from rlark_inventory.domain.labels import label_value_problem, validate_labels

Runtime = Literal["local", "kubernetes"]
RUNTIMES: tuple[str, ...] = ("local", "kubernetes")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
RESERVED_NAMES = frozenset({"dlq"})
MAX_DISPLAY_NAME = 128
MAX_CIDRS = 32


@dataclass(frozen=True)
class ClusterSpec:
    """What an admin declares about a cluster (the rest — health, credential — the inventory keeps)."""

    name: str
    runtime: str
    display_name: str = ""
    category: str = ""
    region: str = ""
    pod_cidrs: tuple[str, ...] = ()
    service_cidrs: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    hostpath_allow: tuple[str, ...] = ()
    """Host directories workers may mount (prefixes); empty: none (default deny)."""


def validate_hostpath_allow(prefixes: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The allow-list in canonical form; refuse an entry that breaks a rule, naming it."""
    try:
        return normalise_policy(list(prefixes))
    except PolicyError as exc:
        index = exc.problem.index
        where = "hostpath_allow" if index is None else f"hostpath_allow[{index}]"
        raise InvalidInput("hostpath_policy_invalid", f"{where}: {exc.problem.message}", where) from None


def validate_name(name: str, field_name: str = "name") -> str:
    if not _DNS_LABEL.match(name):
        raise InvalidInput(
            "invalid_name",
            messages.text("invalid_name.cluster", name=repr(name)),
            field_name,
        )
    if name in RESERVED_NAMES:
        # ``<family>.dlq`` is each per-cluster topic family's dead-letter topic (ADR 0004).
        raise InvalidInput(
            "invalid_name", messages.text("invalid_name.reserved", name=repr(name)), field_name
        )
    return name


def parse_cidrs(values: list[str] | tuple[str, ...], field_name: str) -> list[IPNetwork]:
    """Parse every entry as a network in CIDR notation (no host bits), refusing overlaps inside the list."""
    if len(values) > MAX_CIDRS:
        raise InvalidInput("invalid_cidr", messages.text("invalid_cidr.too_many", max=MAX_CIDRS), field_name)
    networks: list[IPNetwork] = []
    for i, raw in enumerate(values):
        where = f"{field_name}[{i}]"
        text = raw.strip()
        if "/" not in text:
            raise InvalidInput("invalid_cidr", messages.text("invalid_cidr.notation", value=repr(raw)), where)
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError:
            try:
                loose = ipaddress.ip_network(text, strict=False)
            except ValueError:
                raise InvalidInput(
                    "invalid_cidr", messages.text("invalid_cidr.network", value=repr(raw)), where
                ) from None
            raise InvalidInput(
                "invalid_cidr",
                messages.text("invalid_cidr.host_bits", value=repr(raw), network=str(loose)),
                where,
            ) from None
        for j, earlier in enumerate(networks):
            if _overlap(earlier, network):
                raise InvalidInput(
                    "cidr_overlap",
                    messages.text(
                        "cidr_overlap.same_list",
                        network=str(network),
                        field=f"{field_name}[{j}]",
                        earlier=str(earlier),
                    ),
                    where,
                )
        networks.append(network)
    return networks


def _overlap(a: IPNetwork, b: IPNetwork) -> bool:
    return a.version == b.version and a.overlaps(b)


def check_disjoint(pods: list[IPNetwork], services: list[IPNetwork]) -> None:
    """Refuse a service range overlapping a pod range of the same cluster, naming both."""
    for j, service in enumerate(services):
        for i, pod in enumerate(pods):
            if _overlap(pod, service):
                raise InvalidInput(
                    "cidr_overlap",
                    messages.text(
                        "cidr_overlap.pod_service",
                        service_index=j,
                        service=str(service),
                        pod_index=i,
                        pod=str(pod),
                    ),
                    f"service_cidrs[{j}]",
                )


def _short_text(value: str, field_name: str, what: str) -> str:
    problem = label_value_problem(value)
    if problem:
        raise InvalidInput(
            f"invalid_{field_name}",
            messages.text("invalid_text_field", what=what, value=repr(value)),
            field_name,
        )
    return value


def validate_spec(spec: ClusterSpec) -> ClusterSpec:
    """Check every rule; return the spec with CIDRs in canonical form. Raises ``InvalidInput``."""
    validate_name(spec.name)
    if spec.runtime not in RUNTIMES:
        raise InvalidInput(
            "invalid_runtime", messages.text("invalid_runtime", runtimes=", ".join(RUNTIMES)), "runtime"
        )
    if len(spec.display_name) > MAX_DISPLAY_NAME:
        raise InvalidInput(
            "invalid_display_name",
            messages.text("invalid_display_name", max=MAX_DISPLAY_NAME),
            "display_name",
        )
    _short_text(spec.category, "category", "category")
    _short_text(spec.region, "region", "region")
    pods = parse_cidrs(spec.pod_cidrs, "pod_cidrs")
    services = parse_cidrs(spec.service_cidrs, "service_cidrs")
    check_disjoint(pods, services)
    validate_labels(spec.labels)
    return replace(
        spec,
        display_name=spec.display_name.strip(),
        pod_cidrs=tuple(str(n) for n in pods),
        service_cidrs=tuple(str(n) for n in services),
        hostpath_allow=validate_hostpath_allow(spec.hostpath_allow),
    )
