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


class StallGuard:
    """Whether this process may judge liveness now: not right after it was itself stalled.

    When the sweeper wakes up much later than it asked to (the process or the machine stood still:
    a pause, swapping, a noisy neighbour), the agents' heartbeats of that time are still waiting in
    Kafka, unread: judging then would call every cluster offline for a silence that was our own. After
    such a gap the guard holds judgement for one ``timeout_s``, which gives the report consumer time
    to read the backlog; a cluster that is really gone is found one timeout later.
    """

    def __init__(self, interval_s: float, timeout_s: float) -> None:
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._last: float | None = None
        self._hold_until = float("-inf")

    def may_judge(self, now: float) -> bool:
        """Call once per sweep with a monotonic clock; False while the guard holds judgement."""
        if self._last is not None and now - self._last > self._interval_s + self._timeout_s / 2:
            self._hold_until = now + self._timeout_s
        self._last = now
        return now >= self._hold_until
