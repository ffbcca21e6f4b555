"""Behaviour of the relay decision: which pairs of a domain's clusters go through which relay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlark_netdomain.domain import Link, LinkReport, Relay, RelayPolicy, pair, plan_relays

pytestmark = pytest.mark.unit

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
POLICY = RelayPolicy(after_s=20.0, retry_s=600.0)
ABC = ["a", "c", "r"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def up(x: str, y: str, since: float = 0.0) -> LinkReport:
    return LinkReport(x, y, True, at(since))


def down(x: str, y: str, since: float = 0.0, error: str = "connect: no route to host") -> LinkReport:
    return LinkReport(x, y, False, at(since), error)


HEALTHY_LEGS = [up("a", "r"), up("r", "a"), up("c", "r"), up("r", "c")]


def test_a_direct_link_down_longer_than_after_s_is_relayed_through_a_cluster_with_both_legs_up() -> None:
    plan = plan_relays(ABC, [*HEALTHY_LEGS, down("a", "c", since=10)], [], at(30), POLICY)

    assert plan == (Relay(Link("a", "c"), "r", at(30)),)


def test_a_link_down_for_less_than_after_s_stays_direct() -> None:
    assert plan_relays(ABC, [*HEALTHY_LEGS, down("a", "c", since=10)], [], at(29.9), POLICY) == ()


def test_either_side_reporting_the_failure_is_enough() -> None:
    reports = [*HEALTHY_LEGS, up("a", "c"), down("c", "a", since=0)]

    assert plan_relays(ABC, reports, [], at(20), POLICY)[0].via == "r"


def test_a_down_report_without_an_error_is_a_link_still_connecting_not_a_failure() -> None:
    reports = [*HEALTHY_LEGS, down("a", "c", error="")]

    assert plan_relays(ABC, reports, [], at(100), POLICY) == ()


def test_no_relay_without_both_legs_up() -> None:
    one_leg_down = [up("a", "r"), up("c", "r"), down("r", "c", error="timeout"), down("a", "c")]
    unreported_leg = [up("a", "r"), down("a", "c")]

    assert plan_relays(ABC, one_leg_down, [], at(100), POLICY) == ()
    assert plan_relays(ABC, unreported_leg, [], at(100), POLICY) == ()


def test_the_smallest_usable_relay_is_chosen() -> None:
    clusters = ["a", "c", "r1", "r2", "r3"]
    reports = [down("a", "c")] + [up(x, r) for r in ("r2", "r3") for x in ("a", "c")]
    reports += [up("a", "r1"), down("c", "r1", error="refused")]

    plan = plan_relays(clusters, reports, [], at(20), POLICY)

    assert [(p.link, p.via) for p in plan] == [(Link("a", "c"), "r2")]


def test_a_relay_in_force_is_kept_while_its_legs_are_up_even_if_a_smaller_one_appears() -> None:
    clusters = ["a", "c", "q", "r"]
    reports = [*HEALTHY_LEGS, up("a", "q"), up("c", "q"), down("a", "c")]
    current = [Relay(Link("a", "c"), "r", at(20))]

    assert plan_relays(clusters, reports, current, at(40), POLICY) == tuple(current)


def test_a_relay_that_loses_a_leg_is_replaced_keeping_when_the_pair_was_first_relayed() -> None:
    clusters = ["a", "c", "q", "r"]
    reports = [up("a", "r"), down("c", "r", 25, "dead"), up("a", "q"), up("c", "q")]
    current = [Relay(Link("a", "c"), "r", at(20))]

    assert plan_relays(clusters, reports, current, at(40), POLICY) == (Relay(Link("a", "c"), "q", at(20)),)


def test_a_relay_that_left_the_domain_is_replaced_or_the_pair_goes_direct() -> None:
    current = [Relay(Link("a", "c"), "r", at(20))]
    reports = [*HEALTHY_LEGS, up("a", "q"), up("q", "c")]

    assert plan_relays(["a", "c", "q"], reports, current, at(40), POLICY) == (
        Relay(Link("a", "c"), "q", at(20)),
    )
    assert plan_relays(["a", "c"], reports, current, at(40), POLICY) == ()


def test_a_pair_whose_cluster_left_is_no_longer_relayed() -> None:
    current = [Relay(Link("a", "c"), "r", at(20))]

    assert plan_relays(["a", "r"], HEALTHY_LEGS, current, at(40), POLICY) == ()


def test_a_relayed_pair_tries_direct_again_after_retry_s() -> None:
    current = [Relay(Link("a", "c"), "r", at(20))]
    reports = [*HEALTHY_LEGS, up("a", "c", since=21)]  # the relayed path's own report

    assert plan_relays(ABC, reports, current, at(619), POLICY) == tuple(current)
    assert plan_relays(ABC, reports, current, at(620), POLICY) == ()


def test_a_relayed_pair_is_not_a_leg_for_another_pair() -> None:
    # a–c is relayed through r and its reports say the relayed path is up; b–c is down and b–r not
    # reported. b–c's only way round would be b–a then a–c, and a–c is not a direct leg.
    clusters = ["a", "b", "c", "r"]
    reports = [*HEALTHY_LEGS, up("a", "c", 21), up("a", "b"), down("b", "c")]
    current = [Relay(Link("a", "c"), "r", at(20))]

    plan = plan_relays(clusters, reports, current, at(40), POLICY)

    assert plan == (Relay(Link("a", "c"), "r", at(20)),)  # b–c: its only way round is a–c, relayed


def test_repair_only_neither_relays_nor_returns_to_direct() -> None:
    reports = [*HEALTHY_LEGS, down("a", "c", since=0)]
    current = [Relay(Link("a", "c"), "r", at(0))]

    assert plan_relays(ABC, reports, [], at(10_000), RelayPolicy.repair_only()) == ()
    assert plan_relays(ABC, reports, current, at(10_000), RelayPolicy.repair_only()) == tuple(current)


NAMES = st.sampled_from(["a", "b", "c", "d", "e"])


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[str], list[LinkReport], list[Relay], datetime]:
    clusters = sorted(draw(st.sets(NAMES, min_size=0, max_size=5)))
    reports = [
        LinkReport(x, y, draw(st.booleans()), at(draw(st.integers(0, 100))), draw(st.sampled_from(["", "e"])))
        for x in clusters
        for y in clusters
        if x != y and draw(st.booleans())
    ]
    current = [
        Relay(pair(x, y), draw(NAMES), at(draw(st.integers(0, 100))))
        for x in clusters
        for y in clusters
        if x < y and draw(st.booleans())
    ]
    return clusters, reports, current, at(draw(st.integers(0, 1000)))


@settings(max_examples=300, deadline=None)
@given(situations())
def test_every_relay_joins_two_domain_clusters_through_a_third_over_direct_up_legs(
    situation: tuple[list[str], list[LinkReport], list[Relay], datetime],
) -> None:
    clusters, reports, current, now = situation

    plan = plan_relays(clusters, reports, current, now, POLICY)

    relayed = {r.link for r in plan}
    assert list(plan) == sorted(plan)
    assert len(relayed) == len(plan)
    in_force = {r.link for r in current}
    for relay in plan:
        a, b, via = relay.link.a, relay.link.b, relay.via
        assert a < b
        assert {a, b, via} <= set(clusters)
        assert via not in (a, b)
        for leg in (pair(a, via), pair(via, b)):
            assert leg not in relayed
            assert leg not in in_force
            seen = [r for r in reports if r.link == leg]
            assert seen
            assert all(r.up for r in seen)
    # The same inputs in another order give the same plan.
    assert plan_relays(reversed(clusters), list(reversed(reports)), reversed(current), now, POLICY) == plan
    # Planning again changes nothing, once the reports of pairs that went back to direct are
    # forgotten (they described the relayed path; the handler deletes them).
    back_to_direct = in_force - relayed
    remaining = [r for r in reports if r.link not in back_to_direct]
    assert plan_relays(clusters, remaining, plan, now, POLICY) == plan
