"""Endpoint secrets at rest: sealed, bound to their endpoint, opened only with the platform's key."""

from __future__ import annotations

import pytest
from rlark_notifier.domain import SealError, SecretBox


def test_a_sealed_secret_opens_for_its_endpoint_only() -> None:
    box = SecretBox("internal-secret")
    sealed = box.seal("hunter2-webhook-secret", "endpoint-a")
    assert b"hunter2" not in sealed
    assert box.open(sealed, "endpoint-a") == "hunter2-webhook-secret"
    with pytest.raises(SealError):
        box.open(sealed, "endpoint-b")
    with pytest.raises(SealError):
        SecretBox("another-internal-secret").open(sealed, "endpoint-a")


def test_sealing_twice_gives_different_bytes_and_the_box_hides_its_key() -> None:
    box = SecretBox("internal-secret")
    assert box.seal("s", "e") != box.seal("s", "e")
    assert "internal" not in repr(box)
