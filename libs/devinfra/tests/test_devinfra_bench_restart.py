"""The restart benchmark end to end with one round (``make bench restart`` runs five): the whole platform,
a 3-node local cluster with its agent as its own process, real Ray, one SIGKILLed worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rlark_devinfra.benches import restart

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]


async def test_one_round_times_a_sigkilled_worker_to_attempt_2_running_and_joined_in_order(
    postgres_server_url: str, kafka_admin: Any, tmp_path: Path
) -> None:
    result = await restart.run(postgres_server_url, kafka_admin, tmp_path / "restart", rounds=1)

    (only,) = result["per_round"]
    assert (result["rounds"], result["workers"], result["backoff_s"]) == (1, 3, 0)
    # Each step follows the one before it: the restart is decided, attempt 1 torn down and attempt 2
    # placed, then its workers run; its Ray nodes join after the placement.
    assert 0 <= only["kill_to_detected_s"] <= only["kill_to_placed_s"] <= only["kill_to_running_s"]
    assert only["kill_to_placed_s"] <= only["kill_to_ray_joined_s"]
    assert only["submit_to_ray_joined_s"] > 0
    assert only["submit_to_running_s"] > 0
    # The medians of one round are that round's numbers, and the verdict is read from them.
    assert result["kill_to_running_s"] == round(only["kill_to_running_s"], 2)
    assert result["meets_target"] is (only["kill_to_running_s"] <= restart.TARGET_RUNNING_S)
