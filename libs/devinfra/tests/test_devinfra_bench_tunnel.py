"""The tunnel benchmark's own measures: stall detection (pure), and the flood and Ray round trip
end to end in the namespace test bed (small sizes; ``make bench`` runs the full ones)."""

from __future__ import annotations

import pytest
from rlark_devinfra.benches import tunnel as bench


def test_a_counter_that_keeps_moving_never_stands_still() -> None:
    watch = bench.StallWatch(0.0)
    for second in range(1, 11):
        watch.observe(float(second), second * 1000)
    assert watch.longest_s == 0.0
    assert watch.samples == 10
    assert not watch.stalled


def test_one_quiet_second_between_samples_is_not_a_stall() -> None:
    watch = bench.StallWatch(0.0)
    for now, value in ((1.0, 10), (2.0, 10), (3.0, 20)):
        watch.observe(now, value)
    assert watch.longest_s == 1.0
    assert not watch.stalled


def test_a_counter_frozen_for_two_seconds_or_more_is_a_stall() -> None:
    watch = bench.StallWatch(0.0)
    for now, value in ((1.0, 10), (2.0, 10), (3.0, 10), (4.5, 10), (5.5, 30)):
        watch.observe(now, value)
    assert watch.longest_s == 3.5
    assert watch.stalled


def test_nothing_delivered_from_the_start_counts_from_the_start() -> None:
    watch = bench.StallWatch(100.0)
    watch.observe(101.0, 0)
    watch.observe(102.5, 0)
    assert watch.longest_s == 2.5
    assert watch.stalled


@pytest.mark.netns
def test_a_small_flood_each_way_is_delivered_whole_without_stall() -> None:
    result = bench.flood(30_000, max_seconds=60)
    for direction in ("a_to_b", "b_to_a"):
        d = result[direction]
        assert d["reached"]
        assert d["packets"] >= 30_000
        assert d["frames_equal"], d  # every frame that entered the tunnel left it at the peer
        assert not d["stalled"], d
        assert d["frames_out"] >= d["packets"]
    assert result["ping_after"] == {"a1_to_b1": True, "b1_to_a1": True}


@pytest.mark.netns
def test_ray_round_trip_is_timed_over_the_tunnel_and_without_it_in_turns() -> None:
    result = bench.ray_round_trip(tasks=20, warmup=5, rounds=4)
    tunnel, direct = result["tunnel"], result["direct"]
    assert tunnel["tasks"] == direct["tasks"] == 20
    # each cluster's Ray nodes live on their own path's addresses only
    assert tunnel["nodes"] == ["10.100.0.2", "10.100.1.2"]
    assert direct["nodes"] == [bench.DIRECT_A, bench.DIRECT_B]
    assert 0 < tunnel["median_ms"] <= tunnel["p90_ms"]
    assert result["ratio_median"] == round(tunnel["median_ms"] / direct["median_ms"], 2)


@pytest.mark.netns
def test_a_gloo_all_reduce_sums_right_over_the_tunnel_and_over_the_direct_veth() -> None:
    result = bench.gloo_allreduce(size_mib=1, rounds=1, per_round=1, warmup=1)
    tunnel, direct = result["tunnel"], result["direct"]
    # every element of every all-reduce came back 1 + 2 on both ranks
    assert (tunnel["correct"], direct["correct"]) == (True, True)
    assert tunnel["all_reduces"] == direct["all_reduces"] == 1
    assert min(tunnel["mb_per_s"], direct["mb_per_s"]) > 0
    assert (tunnel["device"], direct["device"]) == ("rlark0", "direct")
    # the tunnel group's tensors crossed the tunnel: 2 all-reduces of 1 MiB, about 1 MiB each way each
    assert min(tunnel["tunnel_bytes_a_to_b"], tunnel["tunnel_bytes_b_to_a"]) >= 2 * 2**20
    assert result["ratio"] == round(tunnel["mb_per_s"] / direct["mb_per_s"], 2)
