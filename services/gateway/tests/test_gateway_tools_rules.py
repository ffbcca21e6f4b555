"""The pure rules of jobs' tools on their own origin (ADR 0012): which path a tool's server is asked for, where
the tools origin is, what a pass proves, that a ticket opens once, and settings that would undo the split."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from rlark_gateway.domain.tools import (
    TOOLS,
    ToolRefused,
    UsedTickets,
    check_available,
    issue,
    tool_named,
    tools_origin,
    upstream_path,
    verify,
)
from rlark_gateway.settings import GatewaySettings

SECRET = "a-secret-of-the-deployment"


def test_tensorboard_gets_the_whole_path_and_the_ray_dashboard_the_part_under_its_root() -> None:
    assert (
        upstream_path(TOOLS["tensorboard"], "/jobs/j1/tensorboard/data/x%20y")
        == "/jobs/j1/tensorboard/data/x%20y"
    )
    assert upstream_path(TOOLS["ray-dashboard"], "/jobs/j1/ray-dashboard/api/version") == "/api/version"
    assert upstream_path(TOOLS["ray-dashboard"], "/jobs/j1/ray-dashboard/") == "/"


def test_the_tools_origin_is_the_configured_one_or_the_requests_host_with_the_tools_port() -> None:
    assert (
        tools_origin("https://tools.example.org", True, "rlark.example.org", 8081)
        == "https://tools.example.org"
    )
    assert tools_origin("", False, "127.0.0.1:8080", 8081) == "http://127.0.0.1:8081"
    assert tools_origin("", True, "rlark.example.org", 9443) == "https://rlark.example.org:9443"
    assert tools_origin("", False, "[::1]:8080", 8081) == "http://[::1]:8081"


def test_a_pass_proves_its_kind_job_tool_and_lifetime_and_nothing_else() -> None:
    ticket = issue(SECRET, "ticket", "job-a", "tensorboard", "ann", "session", "d1", exp=1000)
    found = verify(SECRET, ticket, "ticket", now=999, job="job-a", tool="tensorboard")
    assert (found.user, found.via, found.credential) == ("ann", "session", "d1")
    payload, _, mac = ticket.partition(".")
    for refused in (
        lambda: verify(SECRET, ticket, "ticket", now=1001),  # expired
        lambda: verify(SECRET, ticket, "cookie", now=999),  # a ticket is not a cookie
        lambda: verify(SECRET, ticket, "ticket", now=999, job="job-b"),
        lambda: verify(SECRET, ticket, "ticket", now=999, tool="ray-dashboard"),
        lambda: verify("another-secret", ticket, "ticket", now=999),
        lambda: verify(SECRET, f"{payload}A.{mac}", "ticket", now=999),
        lambda: verify(SECRET, "not a pass", "ticket", now=999),
        lambda: verify(SECRET, f"{payload}.", "ticket", now=999),
    ):
        with pytest.raises(ToolRefused) as caught:
            refused()
        assert (caught.value.status, caught.value.code) == (401, "tool_pass_invalid")


def test_a_ticket_is_taken_once_and_forgotten_after_it_expired() -> None:
    used = UsedTickets()
    ticket = verify(
        SECRET, issue(SECRET, "ticket", "j", "tensorboard", "ann", "token", "d", exp=100), "ticket", 0
    )
    assert used.take(ticket, now=50)
    assert not used.take(ticket, now=60)
    other = verify(
        SECRET, issue(SECRET, "ticket", "j", "tensorboard", "ann", "token", "d", exp=300), "ticket", 0
    )
    assert used.take(other, now=200)
    assert len(used._used) == 1  # the expired one is gone


def test_a_tool_is_there_only_when_the_job_has_it() -> None:
    with pytest.raises(ToolRefused) as unknown:
        tool_named("jupyter")
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_tool")
    check_available(TOOLS["tensorboard"], {"id": "j", "status": "Failed", "tensorboard_dir": "/tb"})
    with pytest.raises(ToolRefused) as none:
        check_available(TOOLS["tensorboard"], {"id": "j", "status": "Running", "tensorboard_dir": None})
    assert none.value.code == "no_tensorboard"
    check_available(TOOLS["ray-dashboard"], {"id": "j", "status": "Running"})
    with pytest.raises(ToolRefused) as ended:
        check_available(TOOLS["ray-dashboard"], {"id": "j", "status": "Succeeded"})
    assert (ended.value.status, ended.value.code) == (409, "job_not_running")
    assert ended.value.message.key == "tool_job_not_running"


def test_settings_keep_the_tools_origin_apart_from_the_console() -> None:
    assert GatewaySettings(http_port=8080).resolved_tools_port() == 8081
    assert GatewaySettings(http_port=8080, tools_port=9000).resolved_tools_port() == 9000
    assert GatewaySettings(tools_url="HTTPS://Tools.Example.org/").tools_url == "https://tools.example.org"
    with pytest.raises(ValidationError, match="allowed_origins"):
        GatewaySettings(tools_url="https://tools.example.org", allowed_origins="https://tools.example.org")
    with pytest.raises(ValidationError, match="tools_port"):
        GatewaySettings(http_port=8080, tools_port=8080)
    with pytest.raises(ValidationError, match="not an origin"):
        GatewaySettings(tools_url="https://tools.example.org/path")
