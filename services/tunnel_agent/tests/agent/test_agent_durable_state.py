"""A restarted or replacement agent keeps its tunnel host keys (ADR 0018): the same contract suite runs on
the state-directory store and on the Kubernetes Secret store (over a fake of the Kubernetes API calls it
makes), and ``DomainTunnels`` stores a new key before using it and reuses a stored one."""

from __future__ import annotations

import asyncio
import base64
import stat
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from rlark_tunnel_agent.agent.durable import DirectoryStore, DurableStore, SecretMissing, SecretStore
from rlark_tunnel_agent.agent.tunnels import DomainTunnels
from rlark_tunnel_agent.tunnel.keys import public_line

pytestmark = pytest.mark.unit


class FakeSecrets:
    """The two ``Kube`` calls ``SecretStore`` makes, on an in-memory Secret (a merge patch of ``data``)."""

    def __init__(self, exists: bool = True) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = (
            {("rlark-agent", "state"): {"data": None}} if exists else {}
        )

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        assert kind == "secret"
        return self.secrets.get((namespace, name))

    def patch(self, kind: str, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        found = self.secrets.get((namespace, name))
        if found is None:
            return None
        found["data"] = {**(found.get("data") or {}), **body["data"]}
        return found


@pytest.fixture(params=["directory", "secret"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> DurableStore:
    if request.param == "directory":
        return DirectoryStore(tmp_path / "keys")
    return SecretStore(FakeSecrets(), "rlark-agent", "state", prefix="tunnel-key.")


async def test_a_stored_entry_is_read_back_and_a_missing_one_is_none(store: DurableStore) -> None:
    assert await store.load("d1.key") is None
    await store.save("d1.key", b"one")
    await store.save("d2.key", b"two")
    await store.save("d1.key", b"uno")
    assert await store.load("d1.key") == b"uno"
    assert await store.load("d2.key") == b"two"


async def test_names_outside_the_safe_alphabet_are_refused_naming_the_field(store: DurableStore) -> None:
    with pytest.raises(ValueError, match="durable state name"):
        await store.save("../escape", b"x")


async def test_directory_entries_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    await DirectoryStore(tmp_path / "keys").save("d1.key", b"secret")
    assert stat.S_IMODE((tmp_path / "keys" / "d1.key").stat().st_mode) == 0o600


async def test_the_secret_holds_base64_entries_under_the_prefix_and_must_exist() -> None:
    api = FakeSecrets()
    await SecretStore(api, "rlark-agent", "state", prefix="tunnel-key.").save("d1.key", b"k")
    assert api.secrets[("rlark-agent", "state")]["data"] == {
        "tunnel-key.d1.key": base64.b64encode(b"k").decode()
    }
    missing = SecretStore(FakeSecrets(exists=False), "rlark-agent", "state")
    with pytest.raises(SecretMissing, match="RLARK_STATE_SECRET"):
        await missing.load("d1.key")
    with pytest.raises(SecretMissing):
        await missing.save("d1.key", b"k")


async def announce(_: object) -> None:
    return None


async def test_a_replacement_agent_uses_the_host_key_its_predecessor_stored(
    store: DurableStore, tmp_path: Path
) -> None:
    first = DomainTunnels("lab", tmp_path / "first", announce, keys=store)
    key = await first.domain_key("my domain")
    assert await first.domain_key("my domain") is key  # cached
    replacement = DomainTunnels(
        "lab", tmp_path / "second", announce, keys=store
    )  # another pod: no shared disk
    assert public_line(await replacement.domain_key("my domain")) == public_line(key)
    assert public_line(await replacement.domain_key("other")) != public_line(key)


async def test_without_a_store_the_keys_stay_in_the_state_directory_as_before(tmp_path: Path) -> None:
    key = await DomainTunnels("lab", tmp_path, announce).domain_key("d1")
    assert (tmp_path / "tunnel-keys" / "d1.key").exists()
    again = await DomainTunnels("lab", tmp_path, announce).domain_key("d1")
    assert public_line(again) == public_line(key)


class SlowStore:
    """A store whose reads take a while (a Secret read over the network): callers interleave."""

    def __init__(self, inner: DurableStore) -> None:
        self.inner = inner
        self.saved: list[str] = []

    async def load(self, name: str) -> bytes | None:
        await asyncio.sleep(0.05)
        return await self.inner.load(name)

    async def save(self, name: str, data: bytes) -> None:
        self.saved.append(name)
        await self.inner.save(name, data)


async def test_callers_asking_for_a_new_domains_key_at_once_get_one_key_made_and_stored_once(
    store: DurableStore, tmp_path: Path
) -> None:
    # The topology event and a worker's address hooks ask at the same moment: each once made its own key,
    # the later one stored over the earlier while a tunnel served the earlier, and peers refused it.
    slow = SlowStore(store)
    tunnels = DomainTunnels("lab", tmp_path, announce, keys=slow)
    keys = await asyncio.gather(*(tunnels.domain_key("d1") for _ in range(3)))
    assert len({public_line(k) for k in keys}) == 1
    assert slow.saved == ["d1.key"]
    stored = await store.load("d1.key")
    assert stored is not None
    assert public_line(asyncssh.import_private_key(stored)) == public_line(keys[0])
