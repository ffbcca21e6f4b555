"""PodSidecars, the Kubernetes driver's network sidecar hooks: admission issues a token and brings the
domain's tunnels up; one port serves every domain; a sidecar is its worker's link only with its token;
the tunnels stay up while a worker is admitted and go down with the last release.

Real forwarders and a real sidecar server on 127.0.0.1; the "sidecar" here is a plain TCP client
speaking the sidecar's frames (the TUN side is covered by the netns tests)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path

import pytest
from rlark_contracts.events.agent import TunnelEndpointAnnounced
from rlark_contracts.events.scheduler import WorkerPlaced
from rlark_contracts.samples import worker_placed
from rlark_tunnel_agent.agent.placements import to_worker_spec
from rlark_tunnel_agent.agent.sidecars import (
    PodSidecars,
    SidecarOptions,
    sidecar_token,
    token_key_from_credential,
)
from rlark_tunnel_agent.agent.tunnels import TunnelOptions
from rlark_tunnel_agent.runtime.driver import WorkerSpec
from rlark_tunnel_agent.tunnel import tun
from rlark_tunnel_agent.tunnel.frames import FrameKind, encode_frame

pytestmark = pytest.mark.unit

Hooks = tuple[PodSidecars, list[TunnelEndpointAnnounced]]
TOKEN_KEY = token_key_from_credential("agent-credential-of-beta")


def placed(
    worker: str, domain: str = "d1", address: str = "10.200.0.5", cidr: str = "10.200.0.0/16"
) -> WorkerPlaced:
    return worker_placed(
        job_id="job-a",
        worker_id=worker,
        cluster="beta",
        role="rollout",
        image="img",
        virtual_ip=address,
        domain=domain,
        domain_cidr=cidr,
    )


def spec_of(event: WorkerPlaced) -> WorkerSpec:
    return WorkerSpec(
        job_id=event.job_id,
        worker_id=event.worker_id,
        role=event.role,
        index=0,
        rank=0,
        num_nodes=1,
        is_header=True,
        node_name=event.node,
        virtual_ip=IPv4Address(event.virtual_ip or ""),
    )


@pytest.fixture
async def sidecars(tmp_path: Path) -> AsyncIterator[Hooks]:
    announced: list[TunnelEndpointAnnounced] = []

    async def announce(event: TunnelEndpointAnnounced) -> None:
        announced.append(event)

    hooks = PodSidecars(
        "beta",
        tmp_path,
        announce,
        TunnelOptions(listen_host="127.0.0.1", advertise_host="beta.example"),
        SidecarOptions(listen_host="127.0.0.1", listen_port=0, advertise_host="agent.rlark-agent.svc"),
        token_key=TOKEN_KEY,
    )
    await hooks.start()
    try:
        yield hooks, announced
    finally:
        await hooks.stop()
        await hooks.tunnels.close()


async def admit(hooks: PodSidecars, event: WorkerPlaced) -> tuple[WorkerSpec, str]:
    hooks.tunnels.placed(event)
    spec = spec_of(event)
    access = await hooks.sidecar_for(spec)
    return spec, access.token


async def connect(port: int, worker: str, token: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_frame(FrameKind.HELLO, json.dumps({"worker": worker, "token": token}).encode()))
    await writer.drain()
    return reader, writer


def workers(hooks: PodSidecars, domain: str = "d1") -> list[str]:
    state = next((s for s in hooks.tunnels.supervisor.states() if s.domain == domain), None)
    return sorted(w.worker for w in state.workers) if state is not None else []


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"not reached in {timeout_s}s")


async def test_admitting_a_domain_worker_issues_its_access_and_brings_the_domain_tunnels_up(
    sidecars: Hooks,
) -> None:
    hooks, announced = sidecars
    hooks.tunnels.placed(placed("w1"))
    spec = spec_of(placed("w1"))

    access = await hooks.sidecar_for(spec)

    assert (access.agent_host, access.agent_port) == ("agent.rlark-agent.svc", hooks.port)
    assert access.address == IPv4Interface("10.200.0.5/16")
    assert access.mtu == tun.DEFAULT_MTU
    assert len(access.token) >= 32
    assert access.token not in repr(access)
    assert hooks.tunnels.supervisor.domains == ["d1"]
    assert [(a.domain, a.host) for a in announced] == [("d1", "beta.example")]
    # Asked again (a retried ensure_worker): the same access, no second token.
    assert await hooks.sidecar_for(spec) == access


async def test_advertise_port_is_the_services_port_when_given(tmp_path: Path) -> None:
    async def announce(_: TunnelEndpointAnnounced) -> None:
        return None

    hooks = PodSidecars(
        "beta",
        tmp_path,
        announce,
        TunnelOptions(listen_host="127.0.0.1"),
        SidecarOptions(listen_host="127.0.0.1", listen_port=0, advertise_host="svc", advertise_port=8106),
        token_key=TOKEN_KEY,
    )
    await hooks.start()
    try:
        hooks.tunnels.placed(placed("w1"))
        access = await hooks.sidecar_for(spec_of(placed("w1")))
        assert (access.agent_host, access.agent_port) == ("svc", 8106)
        assert hooks.port != 8106
    finally:
        await hooks.stop()
        await hooks.tunnels.close()


async def test_a_sidecar_with_its_token_becomes_the_workers_link_and_a_wrong_token_is_cut_off(
    sidecars: Hooks,
) -> None:
    hooks, _ = sidecars
    _, token = await admit(hooks, placed("w1"))

    reader, writer = await connect(hooks.port, "w1", token + "x")
    assert await asyncio.wait_for(reader.read(10), 5) == b""  # closed without a byte
    writer.close()
    assert workers(hooks) == []

    _, writer = await connect(hooks.port, "w1", token)
    await eventually(lambda: workers(hooks) == ["w1"])
    state = hooks.tunnels.supervisor.states()[0]
    assert state.routes["10.200.0.5"] == "worker:w1"
    writer.close()


async def test_one_port_serves_every_domain_and_each_sidecar_lands_in_its_own(sidecars: Hooks) -> None:
    hooks, _ = sidecars
    _, token1 = await admit(hooks, placed("w1", "d1", "10.200.0.5", "10.200.0.0/16"))
    _, token2 = await admit(hooks, placed("w2", "d2", "10.201.0.9", "10.201.0.0/16"))
    assert token1 != token2
    assert hooks.tunnels.supervisor.domains == ["d1", "d2"]

    _, first = await connect(hooks.port, "w1", token1)
    _, second = await connect(hooks.port, "w2", token2)
    await eventually(lambda: workers(hooks, "d1") == ["w1"] and workers(hooks, "d2") == ["w2"])
    # A worker's token opens only its own admission.
    reader, third = await connect(hooks.port, "w2", token1)
    assert await asyncio.wait_for(reader.read(10), 5) == b""
    for writer in (first, second, third):
        writer.close()


async def test_tunnels_stay_up_while_a_worker_is_admitted_and_go_down_with_the_last_release(
    sidecars: Hooks,
) -> None:
    hooks, _ = sidecars
    _, token1 = await admit(hooks, placed("w1", address="10.200.0.5"))
    await admit(hooks, placed("w2", address="10.200.0.6"))

    # The sidecar comes and goes (a reconnect): the domain stays, the worker stays admitted.
    _, writer = await connect(hooks.port, "w1", token1)
    await eventually(lambda: workers(hooks) == ["w1"])
    writer.close()
    await eventually(lambda: workers(hooks) == [])
    assert hooks.tunnels.supervisor.domains == ["d1"]
    reader, writer = await connect(hooks.port, "w1", token1)
    await eventually(lambda: workers(hooks) == ["w1"])

    await hooks.released("w1")  # its link is dropped and its token refused from now on
    assert await asyncio.wait_for(reader.read(10), 5) == b""
    writer.close()
    assert hooks.tunnels.supervisor.domains == ["d1"]  # w2 is still here
    reader, writer = await connect(hooks.port, "w1", token1)
    assert await asyncio.wait_for(reader.read(10), 5) == b""
    writer.close()

    await hooks.released("w2")
    assert hooks.tunnels.supervisor.domains == []
    await hooks.released("w2")  # idempotent
    await hooks.released("never-admitted")


async def test_a_worker_without_a_domain_placement_here_is_refused(sidecars: Hooks) -> None:
    hooks, _ = sidecars
    with pytest.raises(ValueError, match="no network domain placement"):
        await hooks.sidecar_for(spec_of(placed("stranger")))
    assert hooks.tunnels.supervisor.domains == []
    await hooks.released("stranger")  # nothing to release


async def test_an_address_outside_the_domain_is_refused_and_leaves_no_tunnels(sidecars: Hooks) -> None:
    hooks, _ = sidecars
    hooks.tunnels.placed(placed("w1", cidr="10.200.0.0/16"))
    outside = spec_of(placed("w1", address="10.99.0.5"))
    with pytest.raises(Exception, match="outside"):
        await hooks.sidecar_for(outside)
    assert hooks.tunnels.supervisor.domains == []


def test_tokens_are_derived_from_the_agent_credential_and_the_worker_id() -> None:
    key = token_key_from_credential("agent-credential-of-beta")
    token = sidecar_token(key, "job-a-rollout-0")
    assert token == sidecar_token(token_key_from_credential("agent-credential-of-beta"), "job-a-rollout-0")
    assert len(token) == 43  # 32 bytes, URL-safe base64 without padding
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert token != sidecar_token(key, "job-a-rollout-1")
    rotated = token_key_from_credential("agent-credential-of-beta-rotated")
    assert token != sidecar_token(rotated, "job-a-rollout-0")
    # The key is not the credential, and the token shows neither.
    assert key != b"agent-credential-of-beta"
    assert "agent-credential" not in token
    with pytest.raises(ValueError, match="credential"):
        token_key_from_credential("")


async def test_a_restarted_agent_admits_a_running_sidecar_again_with_the_same_token_from_the_spec(
    tmp_path: Path,
) -> None:
    async def announce(_: TunnelEndpointAnnounced) -> None:
        return None

    def agent(key: bytes) -> PodSidecars:
        return PodSidecars(
            "beta",
            tmp_path,
            announce,
            TunnelOptions(listen_host="127.0.0.1"),
            SidecarOptions(listen_host="127.0.0.1", listen_port=0, advertise_host="svc"),
            token_key=key,
        )

    # The spec as the driver records it: the placement's translation, carrying domain and CIDR.
    spec = to_worker_spec(placed("w1"), "")
    first = agent(TOKEN_KEY)
    await first.start()
    try:
        first.tunnels.placed(placed("w1"))
        issued = (await first.sidecar_for(spec)).token
    finally:
        await first.stop()
        await first.tunnels.close()

    # The restarted agent never sees the placement again: the recorded spec is all it has.
    restarted = agent(TOKEN_KEY)
    await restarted.start()
    try:
        access = await restarted.sidecar_for(spec)
        assert access.token == issued
        assert access.address == IPv4Interface("10.200.0.5/16")
        _, writer = await connect(restarted.port, "w1", issued)
        await eventually(lambda: workers(restarted) == ["w1"])
        writer.close()
    finally:
        await restarted.stop()
        await restarted.tunnels.close()

    # After a credential rotation the old pod's token is refused.
    rotated = agent(token_key_from_credential("a rotated credential"))
    await rotated.start()
    try:
        assert (await rotated.sidecar_for(spec)).token != issued
        reader, writer = await connect(rotated.port, "w1", issued)
        assert await asyncio.wait_for(reader.read(10), 5) == b""
        writer.close()
        assert workers(rotated) == []
    finally:
        await rotated.stop()
        await rotated.tunnels.close()
