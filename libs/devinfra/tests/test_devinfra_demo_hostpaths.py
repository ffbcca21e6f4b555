"""``make run``'s cluster ``local`` allows exactly its examples' host directories (ADR 0006): entries the
server accepts, the demo's rendered job inside them, and a cluster registered before the policy existed
gets them added to whatever an admin allowed — nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from rlark_contracts.hostpaths import policy_problem, source_decision
from rlark_devinfra import demo

pytestmark = pytest.mark.unit


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLARK_STATE_DIR", str(tmp_path / ".state"))
    return tmp_path / ".state"


def test_the_demo_policy_is_valid_and_allows_the_demo_job_s_outputs_only(state: Path) -> None:
    allow = demo.demo_hostpaths()
    assert [policy_problem(prefix) for prefix in allow] == [None, None, None]
    assert source_decision(str(demo.outputs_dir()), allow).allowed
    assert source_decision(str(state / "examples" / "rlinf-cpu" / "outputs"), allow).allowed
    assert not source_decision(str(state), allow).allowed
    assert not source_decision(str(state / "agent-credential"), allow).allowed


def test_an_older_cluster_gets_the_demo_directories_added_to_what_an_admin_allowed(state: Path) -> None:
    sent: list[dict[str, list[str]]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append(body)
        assert request.url.path == "/api/v1/clusters/local/hostpath-policy"
        return httpx.Response(200, json={"cluster": "local", "allow": body["allow"]})

    with httpx.Client(base_url="http://gateway.test", transport=httpx.MockTransport(answer)) as http:
        demo.allow_demo_outputs(http, ["/srv/shared"])
        demo.allow_demo_outputs(http, ["/srv/shared", *demo.demo_hostpaths()])
    assert sent == [{"allow": ["/srv/shared", *demo.demo_hostpaths()]}]
