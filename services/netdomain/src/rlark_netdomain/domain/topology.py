"""The desired tunnel topology of a network domain.

Role: say which clusters' tunnel-agents must keep SSH tunnels to each other. A domain's traffic
crosses clusters only between clusters that host its workers, so the topology is the set of those
clusters and a full mesh of links between them: every pair talks directly, and the agents fall
back to a relay (``via``) only when a pair cannot reach each other, which they find out at run
time. Deterministic: the same clusters always give the same, sorted links.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import combinations


@dataclass(frozen=True, slots=True, order=True)
class Link:
    """An undirected link between two clusters, ``a < b``."""

    a: str
    b: str


@dataclass(frozen=True, slots=True)
class Topology:
    clusters: tuple[str, ...]
    links: tuple[Link, ...]


def full_mesh(clusters: Iterable[str]) -> Topology:
    """The clusters, sorted and without duplicates, and one link per pair of them."""
    ordered = tuple(sorted(set(clusters)))
    return Topology(ordered, tuple(Link(a, b) for a, b in combinations(ordered, 2)))
