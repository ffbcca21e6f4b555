"""Cluster liveness from agent heartbeats.

``last_seen`` uses the agent's send time, clamped to our clock (an agent clock running ahead must not
keep a cluster online after it stopped). Heartbeats older than the timeout when they arrive (a consumer
catching up after downtime) are not signs of life now, so they never bring a cluster online.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def seen_at(sent_at: datetime, now: datetime) -> datetime:
    return min(sent_at, now)


def is_fresh(sent_at: datetime, now: datetime, timeout_s: float) -> bool:
    return now - seen_at(sent_at, now) <= timedelta(seconds=timeout_s)


def offline_before(now: datetime, timeout_s: float) -> datetime:
    """Clusters last seen before this instant are offline."""
    return now - timedelta(seconds=timeout_s)
