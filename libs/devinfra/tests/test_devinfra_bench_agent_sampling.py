"""The agent-sampling benchmark in small form (``make bench agent-sampling`` samples 64 workers, 20 rounds):
real process trees adopted by a real local driver, every worker found and sampled each round."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlark_devinfra.benches import agent_sampling

pytestmark = pytest.mark.unit


async def test_every_stand_in_worker_and_its_processes_are_sampled_and_the_cost_is_reported(
    tmp_path: Path,
) -> None:
    result = await agent_sampling.run(tmp_path / "agent", workers=3, rounds=2)

    assert result["workers"] == result["sampled"] == result["sampled_first_round"] == 3
    assert result["processes"] == 3 * (1 + agent_sampling.CHILDREN)
    assert result["processes_on_machine"] >= result["processes"]
    assert result["rounds"] == 2
    assert 0 < result["cpu_ms_per_round_p50"] <= result["cpu_ms_per_round_max"]
    # The share of a core is the round's CPU time over the default interval, and the verdict is read from it.
    expected = result["cpu_ms_per_round_p50"] / 1000 / agent_sampling.INTERVAL_S * 100
    assert result["core_pct_at_interval"] == pytest.approx(expected, abs=0.001)
    assert result["meets_target"] is (result["core_pct_at_interval"] <= agent_sampling.TARGET_CORE_PCT)
    # Nothing of the stand-ins is left running.
    assert result["stand_in_prefix"].startswith("/tmp/rlark-")
    assert not agent_sampling.running_with(result["stand_in_prefix"])
