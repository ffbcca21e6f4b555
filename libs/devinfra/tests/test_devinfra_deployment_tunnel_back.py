"""`deployment.wait_tunnel_back` (the deployed agent failover's clock and the mid-job e2e's check): a domain's
link counts as back only once BOTH ends reported it up after the disruption, and the ends seen down meanwhile
are named. Against a stand-in for the gateway's ``GET /api/v1/domains/{name}``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rlark_devinfra.k8s import deployment

pytestmark = pytest.mark.unit

AFTER = datetime.now(UTC) - timedelta(seconds=30)


def _link(cluster: str, peer: str, state: str, reported: datetime) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "peer": peer,
        "state": state,
        "since": reported.isoformat(),
        "reported_at": reported.isoformat().replace("+00:00", "Z"),
    }


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def raise_for_status(self) -> None:
        return None

    def json(self) -> dict[str, Any]:
        return self.body


class _Gateway:
    """Each GET answers the next of ``answers`` (the last one from then on)."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.calls = 0

    def get(self, path: str) -> _Answer:
        assert path == "/api/v1/domains/dom"
        links = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return _Answer({"tunnel_states": links})


def test_the_tunnel_is_back_once_both_ends_reported_it_up_after_the_disruption() -> None:
    before, later = AFTER - timedelta(seconds=5), AFTER + timedelta(seconds=7)
    gateway = _Gateway(
        # The ends' last reports predate the delete: not back yet, however "up" they read.
        [_link("gpu-a", "gpu-b", "up", before), _link("gpu-b", "gpu-a", "up", before)],
        # The dialing side saw it drop; the restarted side has not reported yet.
        [
            _link("gpu-a", "gpu-b", "down", AFTER + timedelta(seconds=1)),
            _link("gpu-b", "gpu-a", "up", before),
        ],
        # One end up again, the other still the old report.
        [_link("gpu-a", "gpu-b", "up", later), _link("gpu-b", "gpu-a", "up", before)],
        # Both ends, and a link of another pair that says nothing about this one.
        [
            _link("gpu-a", "gpu-b", "up", later),
            _link("gpu-b", "gpu-a", "up", later + timedelta(seconds=1)),
            _link("gpu-a", "gpu-c", "down", later),
        ],
    )
    back = deployment.wait_tunnel_back(gateway, "dom", "gpu-a", "gpu-b", AFTER, timeout_s=10, poll_s=0.01)
    assert gateway.calls == 4
    assert back.down_seen == ["gpu-a→gpu-b"]
    assert back.reported_s == pytest.approx(8.0)
    assert back.seen_s >= 30


def test_a_tunnel_that_never_comes_back_times_out_naming_the_links() -> None:
    gateway = _Gateway([_link("gpu-a", "gpu-b", "down", AFTER + timedelta(seconds=1))])
    with pytest.raises(TimeoutError, match="gpu-a ↔ gpu-b of dom not back up"):
        deployment.wait_tunnel_back(gateway, "dom", "gpu-a", "gpu-b", AFTER, timeout_s=0.05, poll_s=0.01)
