"""``rlark domains show`` prints each tunnel link's state as the agents reported it."""

from __future__ import annotations

from typing import Any

import pytest
from rlark_cli.commands import domains as domains_commands
from rlark_cli.main import app
from typer.testing import CliRunner

DOMAIN: dict[str, Any] = {
    "name": "dom-a",
    "cidr": "10.100.0.0/16",
    "description": "",
    "created_by": "root",
    "created_at": "2026-11-29T12:00:00Z",
    "capacity": 65024,
    "allocated": 3,
    "free": 65021,
    "warnings": [],
    "clusters": [{"cluster": "alpha", "allocated": 1}, {"cluster": "beta", "allocated": 2}],
    "tunnels": {"clusters": ["alpha", "beta"], "links": [{"a": "alpha", "b": "beta"}]},
    "tunnel_states": [
        {
            "cluster": "alpha",
            "peer": "beta",
            "state": "up",
            "since": "2026-11-29T12:00:05Z",
            "rtt_ms": 0.42,
            "bytes_sent": 104857600,
            "bytes_received": 512,
            "last_error": "",
            "reported_at": "2026-11-29T12:00:35Z",
        },
        {
            "cluster": "beta",
            "peer": "alpha",
            "state": "down",
            "since": "2026-11-29T12:01:10Z",
            "rtt_ms": None,
            "bytes_sent": 0,
            "bytes_received": 0,
            "last_error": "Connection reset by peer",
            "reported_at": "2026-11-29T12:01:10Z",
        },
    ],
    "overlaps": [],
}


class FakeGateway:
    def get(self, path: str, **_: Any) -> dict[str, Any]:
        assert path == "/api/v1/domains/dom-a"
        return DOMAIN


def test_show_prints_each_links_state_rtt_bytes_and_last_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(domains_commands, "Gateway", FakeGateway)
    result = CliRunner().invoke(app, ["domains", "show", "dom-a"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    up = next(line for line in lines if "alpha" in line and "0.42 ms" in line)
    assert all(part in up for part in ("beta", "up", "2026-11-29 12:00:05", "100.0 MiB", "512 B"))
    down = next(line for line in lines if "Connection reset by peer" in line)
    assert all(part in down for part in ("beta", "alpha", "down", "2026-11-29 12:01:10"))


def test_show_without_reports_prints_no_link_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(domains_commands, "Gateway", FakeGateway)
    monkeypatch.setitem(DOMAIN, "tunnel_states", [])
    result = CliRunner().invoke(app, ["domains", "show", "dom-a"])
    assert result.exit_code == 0, result.output
    assert "tunnel links" not in result.output
    assert "alpha <-> beta" in result.output


def test_show_names_the_relay_of_a_pair_routed_through_a_third_cluster(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(domains_commands, "Gateway", FakeGateway)
    links = [{"a": "alpha", "b": "gamma", "via": "beta"}, {"a": "alpha", "b": "beta", "via": None}]
    monkeypatch.setitem(DOMAIN, "tunnels", {"clusters": ["alpha", "beta", "gamma"], "links": links})
    result = CliRunner().invoke(app, ["domains", "show", "dom-a"])
    assert result.exit_code == 0, result.output
    assert "alpha <-> gamma via beta, alpha <-> beta" in result.output
