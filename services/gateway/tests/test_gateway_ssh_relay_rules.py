"""The SSH relay's rendezvous and worker choice without sockets: pairing, a wrong secret, a wrong cluster,
an agent that never connects back, an agent that says why it cannot, an offline cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from rlark_gateway.domain.relay import RelayRefused, RelayTarget, Tally, pick_worker, session_details
from rlark_gateway.relays import RelayHub

TARGET = RelayTarget("job-1", "job-1-actor-0", "lab")


class Link:
    """An agent's control link as the hub sees it: the orders it was sent."""

    def __init__(self) -> None:
        self.orders: asyncio.Queue[dict[str, str]] = asyncio.Queue()

    async def send(self, order: dict[str, str]) -> None:
        await self.orders.put(order)


def job(status: str = "Running") -> dict[str, Any]:
    return {
        "id": "job-1",
        "status": status,
        "workers": [
            {"id": "job-1-actor-0", "role": "actor", "index": 0, "cluster": "lab"},
            {"id": "job-1-rollout-1", "role": "rollout", "index": 1, "cluster": "gpu"},
        ],
    }


async def test_the_agent_that_connects_back_with_the_secret_is_paired_with_the_user() -> None:
    hub: RelayHub[str] = RelayHub()
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET))
    order = await link.orders.get()
    assert order["op"] == "ssh"
    assert (order["job"], order["worker"]) == ("job-1", "job-1-actor-0")
    assert "address" not in order  # the agent resolves the worker's sshd itself
    finished = hub.arrive(order["relay"], order["secret"], "lab", "agent-socket")
    relay = await opening
    assert relay.agent == "agent-socket"
    assert not finished.is_set()
    relay.close()
    assert finished.is_set()
    with pytest.raises(RelayRefused) as again:  # a secret is good for one connection
        hub.check(order["relay"], order["secret"], "lab")
    assert again.value.status == 404


async def test_a_wrong_secret_or_unknown_relay_is_refused_alike_and_the_user_keeps_waiting() -> None:
    hub: RelayHub[str] = RelayHub()
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET))
    order = await link.orders.get()
    for relay_id, secret in [(order["relay"], "guess"), ("unknown", order["secret"])]:
        with pytest.raises(RelayRefused) as refused:
            hub.arrive(relay_id, secret, "lab", "intruder")
        assert (refused.value.status, refused.value.code) == (404, "relay_not_found")
    hub.arrive(order["relay"], order["secret"], "lab", "agent")
    assert (await opening).agent == "agent"


async def test_an_agent_of_another_cluster_cannot_take_the_relay() -> None:
    hub: RelayHub[str] = RelayHub()
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET))
    order = await link.orders.get()
    with pytest.raises(RelayRefused) as refused:
        hub.arrive(order["relay"], order["secret"], "gpu", "other-agent")
    assert (refused.value.status, refused.value.code) == (403, "wrong_cluster")
    hub.arrive(order["relay"], order["secret"], "lab", "agent")
    assert (await opening).agent == "agent"


async def test_an_agent_that_never_connects_back_gives_the_user_a_clear_timeout() -> None:
    hub: RelayHub[str] = RelayHub(connect_timeout_s=0.05)
    link = Link()
    hub.attach("lab", link.send)
    with pytest.raises(RelayRefused) as refused:
        await hub.open(TARGET)
    assert (refused.value.status, refused.value.code) == (504, "agent_timeout")
    assert "did not connect back within 0.05 s" in refused.value.message
    order = link.orders.get_nowait()
    with pytest.raises(RelayRefused):  # too late: the relay is gone
        hub.check(order["relay"], order["secret"], "lab")
    assert hub.waiting() == 0


async def test_an_agent_arriving_as_the_wait_ends_is_released_not_left_waiting() -> None:
    """The pairing and the timeout in the same turn of the loop (the agent's arrival runs just before the
    expired timer): the user gets the 504 and the agent's request is told to end (its ``finished`` event
    is set), never left holding its socket."""
    hub: RelayHub[str] = RelayHub(connect_timeout_s=0.05)
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET))
    order = await link.orders.get()
    time.sleep(0.1)  # noqa: ASYNC251 - block the loop on purpose, so the timer is due when it next turns
    arrived: list[asyncio.Event] = []
    asyncio.get_running_loop().call_soon(
        lambda: arrived.append(hub.arrive(order["relay"], order["secret"], "lab", "agent"))
    )
    with pytest.raises(RelayRefused) as refused:
        await opening
    assert refused.value.code == "agent_timeout"
    assert len(arrived) == 1
    assert arrived[0].is_set()


async def test_an_order_that_needs_preparing_waits_for_it_too() -> None:
    """A TensorBoard order lets the agent start the server first: the wait is the connect-back time plus the
    preparation time (the CI failure: a 10 s wait for a server the agent may take 60 s to start)."""
    hub: RelayHub[str] = RelayHub(connect_timeout_s=0.01)
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET, prepare_s=30.0))
    order = await link.orders.get()
    await asyncio.sleep(0.05)  # past the plain connect-back time
    assert not opening.done()
    hub.arrive(order["relay"], order["secret"], "lab", "agent")
    assert (await opening).agent == "agent"
    with pytest.raises(RelayRefused) as refused:
        await hub.open(TARGET, prepare_s=0.02)
    assert "did not connect back within 0.03 s" in refused.value.message


async def test_an_agent_that_cannot_reach_the_worker_says_why_at_once() -> None:
    hub: RelayHub[str] = RelayHub()
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET))
    order = await link.orders.get()
    hub.failed(order["relay"], "gpu", "not yours")  # another cluster's word is ignored
    hub.failed(order["relay"], "lab", "connection refused on 10.0.0.2:22")
    with pytest.raises(RelayRefused) as refused:
        await opening
    assert (refused.value.status, refused.value.code) == (502, "worker_unreachable")
    assert "connection refused on 10.0.0.2:22" in refused.value.message


async def test_a_service_relay_that_fails_names_the_service_not_sshd() -> None:
    hub: RelayHub[str] = RelayHub()
    link = Link()
    hub.attach("lab", link.send)
    opening = asyncio.create_task(hub.open(TARGET, "tcp", {"service": "tensorboard"}))
    order = await link.orders.get()
    assert (order["op"], order["service"]) == ("tcp", "tensorboard")
    hub.failed(order["relay"], "lab", "TensorBoard is not supported on the kubernetes runtime yet")
    with pytest.raises(RelayRefused) as refused:
        await opening
    assert "job-1-actor-0's tensorboard: TensorBoard is not supported" in refused.value.message
    assert "sshd" not in refused.value.message


async def test_a_cluster_without_a_control_link_is_offline_and_a_replaced_link_stays() -> None:
    hub: RelayHub[str] = RelayHub()
    with pytest.raises(RelayRefused) as refused:
        await hub.open(TARGET)
    assert (refused.value.status, refused.value.code) == (503, "agent_offline")
    old, new = Link(), Link()
    hub.attach("lab", old.send)
    hub.attach("lab", new.send)
    hub.detach("lab", old.send)  # the old link's end must not take the new one down
    assert hub.online("lab")
    hub.detach("lab", new.send)
    assert not hub.online("lab")


def test_a_worker_is_named_by_its_id_or_role_and_index() -> None:
    assert pick_worker(job(), "actor-0") == TARGET
    assert pick_worker(job(), "job-1-rollout-1") == RelayTarget("job-1", "job-1-rollout-1", "gpu")
    with pytest.raises(RelayRefused) as unknown:
        pick_worker(job(), "actor-7")
    assert (unknown.value.status, unknown.value.code, unknown.value.field) == (
        404,
        "worker_not_found",
        "worker",
    )
    assert "actor-0, rollout-1" in unknown.value.message


@pytest.mark.parametrize("status", ["Pending", "Succeeded", "Failed", "Cancelled"])
def test_only_a_running_jobs_workers_take_ssh(status: str) -> None:
    with pytest.raises(RelayRefused) as refused:
        pick_worker(job(status), "actor-0")
    assert (refused.value.status, refused.value.code) == (409, "job_not_running")
    assert status in refused.value.message


def test_the_audit_keeps_who_where_when_and_bytes_never_content() -> None:
    from datetime import UTC, datetime

    start, end = datetime(2026, 12, 1, 10, tzinfo=UTC), datetime(2026, 12, 1, 11, tzinfo=UTC)
    details = session_details(TARGET, "r1", start, end, Tally(to_worker=5, from_worker=7), "client closed")
    assert details == {
        "job": "job-1",
        "worker": "job-1-actor-0",
        "cluster": "lab",
        "relay": "r1",
        "started_at": "2026-12-01T10:00:00+00:00",
        "ended_at": "2026-12-01T11:00:00+00:00",
        "bytes_to_worker": 5,
        "bytes_from_worker": 7,
        "end": "client closed",
    }
