"""Open long-lived streams per user, bounded: each ``GET /api/v1/events`` holds a Kafka consumer of its own,
each followed log or job-event stream (``?follow=true``) a connection to the scheduler and its database,
each SSH relay session (``api/relay.py``) a WebSocket and an agent's dial-back.

Per gateway process (replicas count separately). ``take`` returns False when the user already holds
``limit`` streams; every successful ``take`` is paired with one ``give_back``. One event loop uses it.
"""

from __future__ import annotations

from collections import Counter


class StreamSlots:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()

    def take(self, user: str) -> bool:
        if self._open[user] >= self.limit:
            return False
        self._open[user] += 1
        return True

    def give_back(self, user: str) -> None:
        self._open[user] -= 1
        if self._open[user] <= 0:
            del self._open[user]

    def held(self, user: str) -> int:
        return self._open[user]
