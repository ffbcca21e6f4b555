"""The keys service against real PostgreSQL and Kafka: add, list, show, rename, delete; keys are
per user; duplicates and refused keys get 4xx with a code and the field; every change is announced
on ``keys.keys`` with public material only."""

from __future__ import annotations

from pathlib import Path

import pytest
from keys_it_support import KeyPair, generate_key, read_events
from rlark_devinfra.testing import RunningService
from rlark_platform.messaging import KafkaAccess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def keys_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keys")


@pytest.fixture(scope="module")
def ed25519(keys_dir: Path) -> KeyPair:
    return generate_key(keys_dir, "ed25519", comment="alice@laptop")


@pytest.fixture(scope="module")
def ecdsa(keys_dir: Path) -> KeyPair:
    return generate_key(keys_dir, "ecdsa", "-b", "384", comment="bob@desk")


async def test_key_lifecycle_add_show_rename_delete_is_announced_with_public_material(
    service: RunningService, ed25519: KeyPair, kafka_admin: KafkaAccess, topic_prefix: str
) -> None:
    async with service.client("alice") as alice:
        added = await alice.post(
            "/api/v1/keys", json={"name": "my-workstation", "public_key": ed25519.public_text}
        )
        assert added.status_code == 201, added.text
        key = added.json()
        assert key["name"] == "my-workstation"
        assert key["owner"] == "alice"
        assert key["key_type"] == "ssh-ed25519"
        assert key["bits"] == 256
        assert key["fingerprint"] == ed25519.fingerprint  # as ssh-keygen -l prints it
        assert key["comment"] == "alice@laptop"
        assert key["public_key"] == ed25519.public_text.strip()

        shown = await alice.get(f"/api/v1/keys/{key['id']}")
        assert shown.json() == key
        listed = (await alice.get("/api/v1/keys")).json()
        assert [k["id"] for k in listed["items"]] == [key["id"]]
        assert (listed["total"], listed["page"], listed["page_size"]) == (1, 1, 50)

        renamed = await alice.patch(f"/api/v1/keys/{key['id']}", json={"name": "old-laptop"})
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["name"] == "old-laptop"
        assert (await alice.get(f"/api/v1/keys/{key['id']}")).json()["name"] == "old-laptop"

        deleted = await alice.delete(f"/api/v1/keys/{key['id']}")
        assert deleted.status_code == 204
        assert (await alice.get(f"/api/v1/keys/{key['id']}")).status_code == 404
        assert (await alice.get("/api/v1/keys")).json()["items"] == []

    events = await read_events(kafka_admin, f"{topic_prefix}keys.keys", expect=3)
    assert [e.type for e in events] == ["keys.key.added.v1", "keys.key.renamed.v1", "keys.key.deleted.v1"]
    assert {e.subject for e in events} == {key["id"]}
    assert [e.data["name"] for e in events] == ["my-workstation", "old-laptop", "old-laptop"]
    for event in events:
        assert event.data["public_key"] == ed25519.public_text.strip()
        assert event.data["fingerprint"] == ed25519.fingerprint
        assert event.data["owner"] == "alice"


async def test_users_see_and_change_only_their_own_keys(
    service: RunningService, ed25519: KeyPair, ecdsa: KeyPair
) -> None:
    async with service.client("alice") as alice, service.client("bob") as bob:
        alices = (
            await alice.post("/api/v1/keys", json={"name": "laptop", "public_key": ed25519.public_text})
        ).json()
        bobs = (await bob.post("/api/v1/keys", json={"name": "desk", "public_key": ecdsa.public_text})).json()

        assert [k["name"] for k in (await bob.get("/api/v1/keys")).json()["items"]] == ["desk"]
        for response in (
            await bob.get(f"/api/v1/keys/{alices['id']}"),
            await bob.patch(f"/api/v1/keys/{alices['id']}", json={"name": "mine-now"}),
            await bob.delete(f"/api/v1/keys/{alices['id']}"),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "key_not_found"
        assert (await alice.get(f"/api/v1/keys/{alices['id']}")).json()["name"] == "laptop"

        forbidden = await bob.get("/api/v1/keys", params={"all": "true"})
        assert forbidden.status_code == 403
        assert forbidden.json()["error"]["field"] == "all"

    async with service.client("root", role="admin") as admin:
        everyone = (await admin.get("/api/v1/keys", params={"all": "true"})).json()
        assert [(k["owner"], k["name"]) for k in everyone["items"]] == [("alice", "laptop"), ("bob", "desk")]
        assert everyone["total"] == 2
        assert (await admin.get("/api/v1/keys")).json()["items"] == []  # without all: the admin's own
        assert (await admin.get(f"/api/v1/keys/{bobs['id']}")).status_code == 200


async def test_the_same_key_twice_for_one_user_is_refused_naming_public_key(
    service: RunningService, ed25519: KeyPair
) -> None:
    async with service.client("alice") as alice, service.client("bob") as bob:
        first = await alice.post("/api/v1/keys", json={"name": "laptop", "public_key": ed25519.public_text})
        assert first.status_code == 201

        again = await alice.post("/api/v1/keys", json={"name": "laptop-2", "public_key": ed25519.public_text})
        assert again.status_code == 409
        error = again.json()["error"]
        assert (error["code"], error["field"]) == ("duplicate_key", "public_key")
        assert "'laptop'" in error["message"]
        assert ed25519.fingerprint in error["message"]

        # Another user may register the same public key.
        assert (
            await bob.post("/api/v1/keys", json={"name": "laptop", "public_key": ed25519.public_text})
        ).status_code == 201
        assert (await alice.get("/api/v1/keys")).json()["total"] == 1


async def test_names_are_unique_per_user_on_add_and_rename(
    service: RunningService, ed25519: KeyPair, ecdsa: KeyPair
) -> None:
    async with service.client("alice") as alice:
        await alice.post("/api/v1/keys", json={"name": "laptop", "public_key": ed25519.public_text})
        taken = await alice.post("/api/v1/keys", json={"name": "laptop", "public_key": ecdsa.public_text})
        assert taken.status_code == 409
        assert (taken.json()["error"]["code"], taken.json()["error"]["field"]) == ("key_name_taken", "name")

        desk = (
            await alice.post("/api/v1/keys", json={"name": "desk", "public_key": ecdsa.public_text})
        ).json()
        clash = await alice.patch(f"/api/v1/keys/{desk['id']}", json={"name": "laptop"})
        assert clash.status_code == 409
        assert clash.json()["error"]["code"] == "key_name_taken"
        same = await alice.patch(f"/api/v1/keys/{desk['id']}", json={"name": " desk "})
        assert (same.status_code, same.json()["name"]) == (200, "desk")


REFUSALS: list[tuple[dict[str, object], str, str]] = [
    ({"name": "x", "public_key": "ssh-ed25519 not-base64!"}, "malformed_key", "public_key"),
    ({"name": "x", "public_key": "   "}, "empty_key", "public_key"),
    ({"name": "x", "public_key": 'command="rm -rf /" ssh-ed25519 AAAA'}, "options_not_allowed", "public_key"),
    ({"name": "x", "public_key": "ssh-dss AAAAB3NzaC1kc3MAAACBAP"}, "unsupported_key_type", "public_key"),
    ({"name": "", "public_key": "VALID"}, "invalid_key_name", "name"),
    ({"name": "a" * 65, "public_key": "VALID"}, "invalid_key_name", "name"),
    ({"name": "two\nlines", "public_key": "VALID"}, "invalid_key_name", "name"),
    ({"name": "x"}, "invalid_request", "public_key"),
    ({"name": "x", "public_key": "VALID", "extra": 1}, "invalid_request", "body"),
    ({"name": 5, "public_key": "VALID"}, "invalid_request", "name"),
]


async def test_refused_input_gets_422_with_the_code_and_field_and_stores_nothing(
    service: RunningService, ed25519: KeyPair
) -> None:
    async with service.client("alice") as alice:
        for body, code, field in REFUSALS:
            sent = {k: ed25519.public_text if v == "VALID" else v for k, v in body.items()}
            response = await alice.post("/api/v1/keys", json=sent)
            assert response.status_code == 422, (body, response.text)
            error = response.json()["error"]
            assert (error["code"], error["field"]) == (code, field), body
            assert error["message"]
        assert (await alice.get("/api/v1/keys")).json()["total"] == 0


async def test_unknown_and_malformed_ids_are_404_and_anonymous_calls_401(service: RunningService) -> None:
    async with service.client("alice") as alice:
        assert (await alice.get("/api/v1/keys/00000000-0000-4000-8000-000000000000")).status_code == 404
        assert (await alice.delete("/api/v1/keys/not-a-uuid")).status_code == 404
    async with service.anonymous() as anonymous:
        assert (await anonymous.get("/api/v1/keys")).status_code == 401
