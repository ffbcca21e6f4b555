"""The agent's durable state in a real Kubernetes Secret (ADR 0018): the Secret of
``deploy/agent/state-secret.yaml`` read and merge-patched through the real API server, entries kept
across saves, and a replacement agent (another pod: no shared disk) using the host key its predecessor
stored. The same contract as ``tests/agent/test_agent_durable_state.py`` runs there on a fake API."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rlark_devinfra.paths import repo_root
from rlark_tunnel_agent.agent.durable import SecretStore
from rlark_tunnel_agent.agent.tunnels import DomainTunnels
from rlark_tunnel_agent.runtime.kubernetes.kube import Kube
from rlark_tunnel_agent.tunnel.keys import public_line

pytestmark = pytest.mark.k8s


def state_secret(kube: Kube, namespace: str) -> SecretStore:
    """The manifests' empty state Secret, created in the test's namespace, as the agent's store."""
    manifest = yaml.safe_load((repo_root() / "deploy/agent/state-secret.yaml").read_text())
    manifest["metadata"]["namespace"] = namespace
    assert kube.create("secret", namespace, manifest) is not None
    return SecretStore(kube, namespace, manifest["metadata"]["name"], prefix="tunnel-key.")


async def announce(_: object) -> None:
    return None


async def test_entries_are_stored_read_back_and_kept_across_saves(admin_kube: Kube, namespace: str) -> None:
    store = state_secret(admin_kube, namespace)
    assert await store.load("d1.key") is None
    await store.save("d1.key", b"one")
    await store.save("d2.key", b"two")
    await store.save("d1.key", b"uno")
    assert await store.load("d1.key") == b"uno"
    assert await store.load("d2.key") == b"two"
    found = admin_kube.get("secret", namespace, store.secret)
    assert found is not None
    assert set(found["data"]) == {"tunnel-key.d1.key", "tunnel-key.d2.key"}


async def test_a_replacement_agent_pod_uses_the_host_key_its_predecessor_stored(
    admin_kube: Kube, namespace: str, tmp_path: Path
) -> None:
    store = state_secret(admin_kube, namespace)
    key = await DomainTunnels("lab", tmp_path / "old-pod", announce, keys=store).domain_key("d1")
    again = await DomainTunnels("lab", tmp_path / "new-pod", announce, keys=store).domain_key("d1")
    assert public_line(again) == public_line(key)
    assert not (tmp_path / "new-pod" / "tunnel-keys").exists()  # nothing on the pod's own disk
