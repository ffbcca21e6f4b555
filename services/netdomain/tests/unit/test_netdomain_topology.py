"""Behaviour of the desired tunnel topology: the domain's clusters and a full mesh between them."""

from __future__ import annotations

import pytest
from rlark_netdomain.domain import Link, full_mesh

pytestmark = pytest.mark.unit


def test_one_cluster_needs_no_tunnel() -> None:
    assert full_mesh(["gpu-a", "gpu-a"]).links == ()
    assert full_mesh(["gpu-a"]).clusters == ("gpu-a",)
    assert full_mesh([]).clusters == ()


def test_every_pair_of_clusters_gets_one_link_sorted() -> None:
    topology = full_mesh(["gpu-c", "gpu-a", "gpu-b", "gpu-a"])

    assert topology.clusters == ("gpu-a", "gpu-b", "gpu-c")
    assert topology.links == (Link("gpu-a", "gpu-b"), Link("gpu-a", "gpu-c"), Link("gpu-b", "gpu-c"))


def test_mesh_of_n_clusters_has_n_choose_2_links() -> None:
    names = [f"c{i:02d}" for i in range(12)]

    links = full_mesh(names).links

    assert len(links) == 12 * 11 // 2
    assert len(set(links)) == len(links)
    assert all(link.a < link.b for link in links)
