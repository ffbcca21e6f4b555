"""One active agent per cluster (ADR 0018) on the real inventory, PostgreSQL and Kafka: the lease taken over
``POST /api/v1/agent/lease`` with the session's token, a second holder kept standing by, a takeover with the
next epoch once the lease expired or was released; a token of a rotated credential takes nothing.

Expiry is simulated by moving the lease's ``expires_at`` into the past in the database (whose clock alone
judges it), so nothing here waits on real time."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from rlark_devinfra.testing import RunningService
from rlark_platform.identity import Role

pytestmark = pytest.mark.integration

HOLDER_A = "host-a:101:aaaaaaaa"
HOLDER_B = "host-b:202:bbbbbbbb"


async def register_and_open_session(svc: RunningService, name: str) -> tuple[str, str]:
    """The cluster's agent credential and the token of a session opened with it."""
    async with svc.client("root", Role.ADMIN) as admin:
        created = await admin.post(
            "/api/v1/clusters", json={"name": name, "runtime": "local", "category": "cloud"}
        )
    assert created.status_code == 201, created.text
    credential = created.json()["agent_credential"]
    async with svc.anonymous() as agent:
        session = await agent.post("/api/v1/agent/session", headers={"Authorization": f"Bearer {credential}"})
    assert session.status_code == 200, session.text
    return credential, session.json()["token"]


async def lease(svc: RunningService, token: str, holder: str, *, release: bool = False) -> dict[str, Any]:
    async with svc.anonymous() as agent:
        response = await agent.post(
            "/api/v1/agent/lease",
            headers={"Authorization": f"Bearer {token}"},
            json={"holder": holder, "release": release},
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def expire(database_url: str, cluster: str) -> None:
    """What the TTL does when the holder is SIGKILLed: the lease ends by the database's clock."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE agent_leases SET expires_at = now() - interval '1 second' WHERE cluster = $1", cluster
        )
    finally:
        await conn.close()


async def test_one_agent_holds_the_lease_the_second_stands_by_and_takes_over_with_the_next_epoch(
    inventory: RunningService,
) -> None:
    _, token = await register_and_open_session(inventory, "solo")

    first = await lease(inventory, token, HOLDER_A)
    assert (first["cluster"], first["held"], first["holder"], first["epoch"]) == ("solo", True, HOLDER_A, 1)
    assert 0 < first["expires_in_s"] <= first["ttl_s"]
    standby = await lease(inventory, token, HOLDER_B)
    assert (standby["held"], standby["holder"], standby["epoch"]) == (False, HOLDER_A, 1)
    renewed = await lease(inventory, token, HOLDER_A)
    assert (renewed["held"], renewed["epoch"]) == (True, 1)  # a renewal keeps the epoch

    await expire(inventory.settings.database_url, "solo")  # A stopped renewing (SIGKILL)
    taken = await lease(inventory, token, HOLDER_B)
    assert (taken["held"], taken["holder"], taken["epoch"]) == (True, HOLDER_B, 2)
    deposed = await lease(inventory, token, HOLDER_A)  # A resumes: told who holds it now
    assert (deposed["held"], deposed["holder"], deposed["epoch"]) == (False, HOLDER_B, 2)

    released = await lease(inventory, token, HOLDER_B, release=True)  # B stops cleanly
    assert released["held"] is False
    again = await lease(inventory, token, HOLDER_A)  # no TTL to wait for
    assert (again["held"], again["holder"], again["epoch"]) == (True, HOLDER_A, 3)
    not_holder = await lease(inventory, token, HOLDER_B, release=True)  # only the holder can release
    assert (not_holder["held"], not_holder["holder"]) == (False, HOLDER_A)
    assert (await lease(inventory, token, HOLDER_A))["held"] is True


async def test_the_lease_needs_a_genuine_token_of_the_current_credential_and_a_valid_holder(
    inventory: RunningService,
) -> None:
    _, token = await register_and_open_session(inventory, "solo")
    async with inventory.anonymous() as agent:
        for headers in ({"Authorization": "Bearer forged.token"}, {"Authorization": token}, {}):
            refused = await agent.post("/api/v1/agent/lease", headers=headers, json={"holder": HOLDER_A})
            assert refused.status_code == 401, headers
            assert refused.json()["error"]["code"] == "invalid_credential"
        bad = await agent.post(
            "/api/v1/agent/lease", headers={"Authorization": f"Bearer {token}"}, json={"holder": "a b"}
        )
        assert bad.status_code == 422
        assert "holder" in bad.text

    async with inventory.client("root", Role.ADMIN) as admin:
        rotated = await admin.post("/api/v1/clusters/solo/credential")
    assert rotated.status_code == 200, rotated.text
    async with inventory.anonymous() as agent:
        stale = await agent.post(
            "/api/v1/agent/lease", headers={"Authorization": f"Bearer {token}"}, json={"holder": HOLDER_A}
        )
    assert stale.status_code == 401  # a token from before the rotation takes no lease
