"""Named secrets through the keys service running as its own process (ADR 0025): a value goes in once and
comes out only to an agent; another user can neither read, name nor reveal it; it is sealed in the database,
absent from the service's events and logs; a rotation makes the next version; the operator's key rotation
rewraps every data key without opening a value."""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

import httpx
import pytest
from keys_it_support import dump_database, read_events
from rlark_devinfra.testing import GatewaySigned, RunningService
from rlark_keys.domain.secrets import Keyring, Scope
from rlark_keys.secrets_handlers import Ref, reveal, rewrap_all, set_secret
from rlark_platform.db.pool import create_pool
from rlark_platform.identity import Caller, Role
from rlark_platform.messaging import KafkaAccess
from test_keys_private_key_never_kept import keys_process  # noqa: F401 - the fixture

pytestmark = pytest.mark.integration


def signed(user: str, role: Role = Role.USER) -> GatewaySigned:
    return GatewaySigned(Caller(user, role), "keys")


async def test_a_secret_is_sealed_never_returned_and_revealed_only_to_an_agent(
    keys_process: tuple[str, Path, Path],  # noqa: F811
    database_url: str,
    kafka_admin: KafkaAccess,
    topic_prefix: str,
) -> None:
    url, stdout_path, stderr_path = keys_process
    first, second = f"hf_{secrets.token_urlsafe(24)}", f"hf_{secrets.token_urlsafe(24)}"
    async with (
        httpx.AsyncClient(base_url=url, auth=signed("alice")) as alice,
        httpx.AsyncClient(base_url=url, auth=signed("mallory")) as mallory,
        httpx.AsyncClient(base_url=url, auth=signed("gpu-a", Role.AGENT)) as agent,
        httpx.AsyncClient(base_url=url, auth=signed("root", Role.ADMIN)) as admin,
    ):
        created = await alice.post("/api/v1/secrets", json={"name": "hf-token", "value": first})
        assert created.status_code == 201, created.text
        assert created.json()["version"] == 1
        again = await alice.post("/api/v1/secrets", json={"name": "hf-token", "value": "x"})
        assert (again.status_code, again.json()["error"]["code"]) == (409, "secret_exists")
        bad = await alice.post("/api/v1/secrets", json={"name": "Bad Name", "value": first})
        assert (bad.status_code, bad.json()["error"]["field"]) == (422, "name")
        long = await alice.post("/api/v1/secrets", json={"name": "big", "value": first * 3000})
        assert (long.status_code, long.json()["error"]["field"]) == (422, "value")
        rotated = await alice.put("/api/v1/secrets/hf-token", json={"value": second})
        assert rotated.json()["version"] == 2
        listed = await alice.get("/api/v1/secrets")
        assert [s["name"] for s in listed.json()["items"]] == ["hf-token"]

        # Another user: not theirs to see, change, delete or reveal; nor a project's.
        assert (await mallory.get("/api/v1/secrets/hf-token")).status_code == 404
        assert (await mallory.put("/api/v1/secrets/hf-token", json={"value": "mine"})).status_code == 404
        assert (await mallory.delete("/api/v1/secrets/hf-token")).status_code == 404
        assert (await mallory.get("/api/v1/secrets")).json()["total"] == 0
        ask = {
            "job_id": "job-1",
            "worker_id": "job-1-a-0",
            "secrets": [{"scope": "user", "owner": "alice", "name": "hf-token"}],
        }
        assert (await mallory.post("/api/v1/secrets:reveal", json=ask)).status_code == 403
        assert (await admin.post("/api/v1/secrets:reveal", json=ask)).status_code == 403
        assert (
            await mallory.post("/api/v1/secrets", json={"name": "p", "value": "v", "project": "lab"})
        ).status_code == 403
        assert (await admin.get("/api/v1/secrets/hf-token")).status_code == 404  # an admin's own scope

        revealed = await agent.post("/api/v1/secrets:reveal", json=ask)
        assert revealed.json() == {"secrets": {"hf-token": second}}
        assert revealed.headers["cache-control"] == "no-store"
        assert (await alice.get("/api/v1/secrets/hf-token")).json()["last_used_at"] is not None
        gone = {**ask, "secrets": [{"scope": "user", "owner": "alice", "name": "nope"}]}
        assert (await agent.post("/api/v1/secrets:reveal", json=gone)).status_code == 404
        answers = [created, again, rotated, listed, await alice.get("/api/v1/secrets/hf-token")]

    for answer in answers:
        assert first not in answer.text
        assert second not in answer.text
    rows = await dump_database(database_url)
    assert "0002_secrets.sql" in rows  # the dump read the tables
    assert first not in rows
    assert second not in rows
    events = await read_events(kafka_admin, f"{topic_prefix}keys.secrets", expect=2)
    assert [(e.type, e.payload().version) for e in events] == [
        ("keys.secret.set.v1", 1),
        ("keys.secret.set.v1", 2),
    ]  # type: ignore[attr-defined]
    assert not [e for e in events if first in json.dumps(e.data) or second in json.dumps(e.data)]
    stdout, stderr = stdout_path.read_text(), stderr_path.read_text()
    assert '"secret used"' in stdout  # the use is in the log, by name
    assert first not in stdout + stderr
    assert second not in stdout + stderr


async def test_the_operators_key_rotation_rewraps_every_secret_and_the_old_key_can_go(
    service: RunningService, database_url: str
) -> None:
    old = Keyring({"old": os.urandom(32)}, "old")
    new_key = os.urandom(32)
    pool = await create_pool(database_url, min_size=1, max_size=2)
    try:
        alice = Caller("alice", Role.USER)
        for i in range(3):
            await set_secret(pool, old, alice, f"s{i}", f"value-{i}", None)
        both = Keyring({"new": new_key, **old.keys}, "new")
        assert await rewrap_all(pool, both) == (3, 0)
        assert await rewrap_all(pool, both) == (0, 3)
        only_new = Keyring({"new": new_key}, "new")
        agent = Caller("gpu-a", Role.AGENT)
        refs = [Ref(Scope.USER, "alice", f"s{i}") for i in range(3)]
        values = await reveal(pool, only_new, agent, "job-1", "job-1-a-0", refs)
        assert {name: v.text() for name, v in values.items()} == {f"s{i}": f"value-{i}" for i in range(3)}
    finally:
        await pool.close()
    assert base64.b64encode(new_key).decode() not in await dump_database(database_url)
