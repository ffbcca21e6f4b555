"""RLinf's cluster section follows node counts and GPUs, and the console's wizard computes the same one.

The cases file is written from the server's function and read by the console's test
(web/src/test/rlinf.test.ts), so the two implementations cannot drift apart unseen. Regenerate it with
``RLARK_WRITE_FIXTURES=1 uv run pytest services/scheduler/tests/unit/test_rlinf_cluster_section.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rlark_scheduler.domain.templates import TEMPLATES, rlinf_cluster_section

pytestmark = pytest.mark.unit

CASES_FILE = (
    Path(__file__).resolve().parents[4] / "web" / "src" / "test" / "fixtures" / "rlinf-cluster-cases.json"
)

CASES: list[list[tuple[str, int, int]]] = [
    [("worker", 1, 8)],
    [("actor", 1, 8), ("rollout", 2, 8)],
    [("actor", 1, 1), ("rollout", 2, 1)],
    [("actor", 1, 4), ("rollout", 3, 2), ("env", 2, 0)],
    [("header", 1, 0), ("worker", 2, 0)],
    [("actor", 1, 8), ("idle", 0, 8), ("rollout", 1, 8)],
]


def _expected() -> list[dict[str, object]]:
    return [
        {
            "roles": [{"name": n, "replicas": r, "gpusPerWorker": g} for n, r, g in case],
            "rlinf": rlinf_cluster_section(case),
        }
        for case in CASES
    ]


def test_one_gpu_per_worker_and_two_rollout_nodes_give_placements_within_the_gpus() -> None:
    section = rlinf_cluster_section([("actor", 1, 1), ("rollout", 2, 1)])["cluster"]
    assert section["num_nodes"] == 3
    assert section["component_placement"] == {
        "actor": {"node_group": "actor", "placement": "0-0"},
        "rollout": {"node_group": "rollout", "placement": "0-1"},
    }
    assert section["node_groups"] == [
        {"label": "actor", "node_ranks": "0-0"},
        {"label": "rollout", "node_ranks": "1-2"},
    ]


def test_templates_fill_the_section_from_their_parameters() -> None:
    doc = TEMPLATES["rl-actor-rollout"].build(
        {"actorCluster": "a", "rolloutCluster": "b", "rolloutNodes": 2, "gpusPerWorker": 1, "image": "x/y:1"}
    )
    assert doc.spec.rlinf_config == rlinf_cluster_section([("actor", 1, 1), ("rollout", 2, 1)])


def test_the_consoles_cases_file_is_current() -> None:
    expected = json.dumps(_expected(), indent=2) + "\n"
    if os.environ.get("RLARK_WRITE_FIXTURES"):
        CASES_FILE.write_text(expected)
    assert CASES_FILE.read_text() == expected, "regenerate: see this module's docstring"
