"""The one list of the metric names RLark exposes, by component: the scrape test checks it against each
service's and the agent's real ``/metrics``, the dashboard test checks the Grafana JSON against it.

Names as the exposition's ``# TYPE`` lines give them: counters with ``_total``, histograms by their base
name (their ``_bucket``, ``_sum`` and ``_count`` series come with it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

HTTP = frozenset({"rlark_http_requests_total", "rlark_http_request_seconds"})
MESSAGING = frozenset(
    {
        "rlark_outbox_published_total",
        "rlark_outbox_pending",
        "rlark_events_consumed_total",
        "rlark_events_dead_lettered_total",
        "rlark_consumer_lag",
    }
)
SCHEDULER = frozenset({"rlark_jobs", "rlark_queue_length", "rlark_placement_seconds"})
NOTIFIER = frozenset(
    {"rlark_notifier_deliveries_total", "rlark_notifier_delivery_seconds", "rlark_notifier_pending"}
)
AGENT = frozenset(
    {
        "rlark_tunnel_up",
        "rlark_tunnel_bytes_total",
        "rlark_agent_workers",
        "rlark_agent_events_consumed_total",
        "rlark_agent_events_published_total",
    }
)

EXPOSED: dict[str, frozenset[str]] = {
    "gateway": HTTP | MESSAGING,
    "inventory": HTTP | MESSAGING,
    "keys": HTTP | MESSAGING,
    "netdomain": HTTP | MESSAGING,
    "scheduler": HTTP | MESSAGING | SCHEDULER,
    "notifier": HTTP | MESSAGING | NOTIFIER,
    "tunnel-agent": HTTP | AGENT,
}
"""What each component's process must expose (it may expose more of the platform's, never another
service's own)."""

ALL = frozenset().union(*EXPOSED.values())
HISTOGRAMS = frozenset(
    {"rlark_http_request_seconds", "rlark_placement_seconds", "rlark_notifier_delivery_seconds"}
)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "rlark-dashboard.json"

_TYPE_LINE = re.compile(r"^# TYPE (rlark_\w+) (\w+)$", re.MULTILINE)
_NAME = re.compile(r"\brlark_[A-Za-z0-9_]+")


def exposed_in(exposition: str) -> set[str]:
    """The ``rlark_*`` metric names a ``/metrics`` answer declares (its ``# TYPE`` lines), without the
    ``_created`` series prometheus_client adds beside counters and histograms."""
    return {name for name, _ in _TYPE_LINE.findall(exposition) if not name.endswith("_created")}


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard's panels (rows' nested panels included)."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found += [target["expr"] for target in inner.get("targets", []) if "expr" in target]
    return found


def names_in(expr: str) -> set[str]:
    """The metric names an expression reads, a histogram's series named by the histogram."""
    names = set()
    for name in _NAME.findall(expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        names.add(base if base in HISTOGRAMS else name)
    return names


def load_dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded
