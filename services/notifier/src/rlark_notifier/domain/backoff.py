"""When a failed delivery is tried again: exponential backoff, capped, for a bounded number of attempts.

Deterministic (no jitter): one endpoint's deliveries go one at a time in order, so there is no herd of
retries of one receiver to spread out, and the schedule is the one the README states.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 2.0
    max_s: float = 600.0
    max_attempts: int = 8

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (from 1) before the next one."""
        if attempt < 1:
            raise ValueError("attempt: counts from 1")
        return float(min(self.initial_s * 2 ** (attempt - 1), self.max_s))

    def gives_up_after(self, attempt: int) -> bool:
        return attempt >= self.max_attempts

    def schedule(self) -> list[float]:
        """Every wait between attempts, first to last."""
        return [self.delay_after(n) for n in range(1, self.max_attempts)]
