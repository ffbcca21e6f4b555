"""Projects and GPU quotas through the whole platform (issue 20 item 1): an admin creates one with the real
`rlark` CLI, a member sees it, a hostile second user sees nothing of it and cannot change it through the CLI
or the API (the gateway refuses before the scheduler, which refuses too), and each change and each refused
attempt is in the audit log with its actor and status."""

from __future__ import annotations

import json

import pytest
from stack import Stack

pytestmark = pytest.mark.e2e


async def test_an_admin_sets_a_projects_quota_with_the_cli_members_see_it_and_others_cannot_touch_it(
    stack: Stack,
) -> None:
    member, member_token = await stack.new_user()
    _, mallory_token = await stack.new_user()

    created = await stack.cli(
        "projects", "create", "--name", "vision", "--gpus", "16", "--cluster", "gpu-a=8",
        "--model", "nvidia/H100=4", "--borrowing-limit", "8", "--max-priority", "10", "--member", member,
        "-o", "json",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["quota"] == {
        "gpus": 16,
        "clusters": {"gpu-a": 8},
        "models": {"nvidia/H100": 4},
        "borrowing_limit": 8,
        "max_priority": 10,
    }
    out_of_range = await stack.cli("projects", "set-quota", "vision", "--gpus", "4", "--max-priority", "101")
    assert out_of_range.returncode != 0
    assert "--max-priority" in out_of_range.stderr + out_of_range.stdout
    bad = await stack.cli("projects", "set-quota", "vision", "--gpus", "4", "--cluster", "gpu-a=9")
    assert bad.returncode != 0
    assert "clusters.gpu-a" in bad.stderr + bad.stdout

    listed = await stack.cli("projects", "list", token=member_token)
    assert listed.returncode == 0, listed.stderr
    assert "vision" in listed.stdout
    assert "16 GPUs" in listed.stdout
    theirs = await stack.cli("projects", "list", "-o", "json", token=member_token)
    assert [p["quota"]["max_priority"] for p in json.loads(theirs.stdout)["items"]] == [10]

    mine = await stack.cli("projects", "list", "-o", "json", token=mallory_token)
    assert json.loads(mine.stdout)["items"] == []
    raised = await stack.cli("projects", "set-quota", "vision", "--gpus", "1000", token=mallory_token)
    assert raised.returncode != 0
    assert "admin" in raised.stderr + raised.stdout
    async with stack.client(mallory_token) as mallory:
        assert (await mallory.get("/api/v1/projects/vision")).status_code == 404
        joined = await mallory.put("/api/v1/projects/vision/members", json={"members": ["mallory"]})
        assert joined.status_code == 403
        assert (await mallory.delete("/api/v1/projects/vision")).status_code == 403

    changed = await stack.cli("projects", "set-quota", "vision", "--gpus", "24", "-o", "json")
    assert json.loads(changed.stdout)["quota"]["gpus"] == 24
    async with stack.client() as admin:
        audit = (await admin.get("/api/v1/audit", params={"page_size": 500})).json()["items"]
    trail = [(a["action"], a["actor"], a["status"]) for a in audit if a["target"] == "projects/vision"]
    assert ("projects.create", "root", 201) in trail
    assert ("projects.quota.replace", "root", 200) in trail
    # The hostile user's attempts are on record too, each refused by the gateway.
    refused = sorted((action, status) for action, actor, status in trail if actor != "root")
    assert refused == [
        ("projects.delete", 403),
        ("projects.members.replace", 403),
        ("projects.quota.replace", 403),
    ]
