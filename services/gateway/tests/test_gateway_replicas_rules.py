"""Replicas meeting at the agent's link (ADR 0028) without a database: the replica's own address setting,
the hub asking the replica that holds a link (never one a request names), the outcome frame, and frames
carried between two sockets with the agent's close code."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import ValidationError
from rlark_gateway.domain.relay import RelayRefused, RelayTarget
from rlark_gateway.relays import RelayHub
from rlark_gateway.replicas import ForwardedSocket, Replicas, outcome_frame, splice
from rlark_gateway.settings import GatewaySettings
from starlette.websockets import WebSocketState

TARGET = RelayTarget("job-1", "job-1-actor-0", "lab")


def test_the_replica_address_defaults_to_this_host_and_refuses_what_is_not_an_address() -> None:
    assert GatewaySettings(http_port=8080).resolved_replica_url() == "http://127.0.0.1:8080"
    assert (
        GatewaySettings(replica_url="http://10.1.2.3:8080/").resolved_replica_url() == "http://10.1.2.3:8080"
    )
    for bad in ("10.1.2.3:8080", "ftp://10.1.2.3", "http://10.1.2.3:8080/api", "http://x?y=1"):
        with pytest.raises(ValidationError) as refused:
            GatewaySettings(replica_url=bad)
        assert "replica_url" in str(refused.value)
        assert "is not a replica address" in str(refused.value)


class FakeReplicas(Replicas):
    """The directory says ``holder``; opening there records what was asked."""

    def __init__(self, holder: str | None) -> None:
        super().__init__(None, "http://127.0.0.1:1", "secret")
        self._holder = holder
        self.opened: list[tuple[str, RelayTarget, str, Mapping[str, str]]] = []

    async def holder(self, cluster: str) -> str | None:
        return self._holder

    async def open_at(
        self,
        url: str,
        target: RelayTarget,
        op: str,
        extra: Mapping[str, str],
        prepare_s: float,
        wait_s: float,
    ) -> tuple[str, ForwardedSocket]:
        self.opened.append((url, target, op, extra))
        return "r1", object()  # type: ignore[return-value]


async def test_a_cluster_linked_elsewhere_is_opened_at_the_replica_the_directory_names() -> None:
    replicas = FakeReplicas("http://10.0.0.2:8080")
    hub: RelayHub[Any] = RelayHub(replicas=replicas)
    relay = await hub.open(TARGET, "files", {"action": "list"})
    assert relay.id == "r1"
    assert replicas.opened == [("http://10.0.0.2:8080", TARGET, "files", {"action": "list"})]
    assert await hub.reachable("lab")


async def test_a_replica_asked_by_another_never_forwards_again_and_no_link_anywhere_is_offline() -> None:
    replicas = FakeReplicas("http://10.0.0.2:8080")
    hub: RelayHub[Any] = RelayHub(replicas=replicas)
    with pytest.raises(RelayRefused) as here_only:
        await hub.open(TARGET, here_only=True)
    assert (here_only.value.status, here_only.value.code) == (503, "agent_offline")
    assert replicas.opened == []
    nowhere: RelayHub[Any] = RelayHub(replicas=FakeReplicas(None))
    with pytest.raises(RelayRefused) as offline:
        await nowhere.open(TARGET)
    assert offline.value.code == "agent_offline"
    assert not await nowhere.reachable("lab")


async def test_a_link_held_here_is_used_without_asking_the_directory() -> None:
    replicas = FakeReplicas("http://10.0.0.2:8080")
    hub: RelayHub[str] = RelayHub(connect_timeout_s=0.05, replicas=replicas)
    sent: list[dict[str, str]] = []

    async def send(order: dict[str, str]) -> None:
        sent.append(order)

    hub.attach("lab", send)
    with pytest.raises(RelayRefused):  # nobody dials back in this test
        await hub.open(TARGET)
    assert len(sent) == 1
    assert replicas.opened == []


def test_the_outcome_frame_carries_a_refusal_whole() -> None:
    assert json.loads(outcome_frame(relay_id="abc")) == {"ok": True, "relay": "abc"}
    refusal = RelayRefused(504, "agent_timeout", "did not connect back", "worker")
    assert json.loads(outcome_frame(refusal)) == {
        "error": {
            "status": 504,
            "code": "agent_timeout",
            "message": "did not connect back",
            "field": "worker",
        }
    }


class Socket:
    """One side of a relay: messages it will yield, what was sent to it, how it was closed."""

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for message in messages or []:
            self.messages.put_nowait(message)
        self.sent: list[bytes | str] = []
        self.closed: int | None = None

    @property
    def application_state(self) -> WebSocketState:
        return WebSocketState.CONNECTED if self.closed is None else WebSocketState.DISCONNECTED

    @property
    def client_state(self) -> WebSocketState:
        return self.application_state

    async def receive(self) -> Mapping[str, Any]:
        return await self.messages.get()

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)

    async def send_text(self, data: str) -> None:
        self.sent.append(data)

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = code


@pytest.mark.parametrize(("code", "passed_on"), [(1000, 1000), (1011, 1011), (1006, 1011), (1005, 1011)])
async def test_frames_go_across_as_they_came_and_the_agents_close_code_with_them(
    code: int, passed_on: int
) -> None:
    agent = Socket(
        [
            {"type": "websocket.receive", "text": '{"ok": true}'},
            {"type": "websocket.receive", "bytes": b"\x00\x01"},
            {"type": "websocket.disconnect", "code": code},
        ]
    )
    user = Socket()
    await asyncio.wait_for(splice(user, agent), 5)
    assert user.sent == ['{"ok": true}', b"\x00\x01"]  # text stays text: a files head is a text frame
    assert user.closed == passed_on  # a download is complete only on 1000
