"""Envelope encryption of secrets (ADR 0025): a value opens only where it was sealed, under a key of the ring;
rewrapping moves the data key to the active key without opening the value; keyrings are checked."""

from __future__ import annotations

import base64
import os

import pytest
from rlark_keys.domain.secrets import (
    DERIVED_KEY_ID,
    Keyring,
    Scope,
    SealBroken,
    SecretError,
    SecretValue,
    aad,
    open_sealed,
    rewrap,
    seal,
    validate_name,
    validate_value,
)

pytestmark = pytest.mark.unit


def ring(*ids: str) -> Keyring:
    return Keyring.parse(",".join(f"{i}:{base64.b64encode(os.urandom(32)).decode()}" for i in ids))


def test_a_value_opens_where_it_was_sealed_and_nowhere_else() -> None:
    keys = ring("k1")
    where = aad(Scope.USER, "alice", "hf-token", 1)
    sealed = seal(keys, SecretValue(b"hf_abcdefghijklmnop"), where)
    assert b"hf_abcdefghijklmnop" not in sealed.ciphertext + sealed.wrapped_key
    assert open_sealed(keys, sealed, where).data == b"hf_abcdefghijklmnop"
    for elsewhere in (
        aad(Scope.USER, "mallory", "hf-token", 1),  # moved to another user's row
        aad(Scope.USER, "alice", "other", 1),  # to another name
        aad(Scope.USER, "alice", "hf-token", 2),  # replayed as the next version
        aad(Scope.PROJECT, "alice", "hf-token", 1),
    ):
        with pytest.raises(SealBroken):
            open_sealed(keys, sealed, elsewhere)
    with pytest.raises(SealBroken, match="not in the keyring"):
        open_sealed(ring("k2"), sealed, where)


def test_two_seals_of_one_value_share_nothing() -> None:
    keys, where = ring("k1"), aad(Scope.USER, "alice", "a", 1)
    first, second = seal(keys, SecretValue(b"same"), where), seal(keys, SecretValue(b"same"), where)
    assert first.ciphertext != second.ciphertext
    assert first.wrapped_key != second.wrapped_key


def test_rewrap_moves_the_data_key_to_the_active_key_and_the_old_key_can_go() -> None:
    old = ring("old")
    where = aad(Scope.PROJECT, "lab", "s3", 3)
    sealed = seal(old, SecretValue(b"key-pair"), where)
    both = Keyring({"new": os.urandom(32), **old.keys}, "new")
    moved = rewrap(both, sealed, where)
    assert (moved.key_id, moved.ciphertext, moved.nonce) == ("new", sealed.ciphertext, sealed.nonce)
    only_new = Keyring({"new": both.keys["new"]}, "new")
    assert open_sealed(only_new, moved, where).data == b"key-pair"
    assert rewrap(only_new, moved, where) is moved  # already under the active key


def test_keyrings_are_checked_and_never_show_their_keys() -> None:
    good = ring("a", "b")
    assert good.active == "a"
    assert base64.b64encode(good.keys["a"]).decode() not in repr(good)
    for bad in (
        "",
        "a",
        "a:notbase64!",
        f"a:{base64.b64encode(b'short').decode()}",
        "a:" + "A" * 44 + ",a:" + "A" * 44,
    ):
        with pytest.raises(SecretError) as refused:
            Keyring.parse(bad)
        assert refused.value.field == "keyring"
    derived = Keyring.derived("internal")
    assert derived.active == DERIVED_KEY_ID
    assert derived.keys == Keyring.derived("internal").keys != Keyring.derived("other").keys


def test_names_and_values_are_checked_and_a_value_never_shows() -> None:
    assert validate_name("hf-token") == "hf-token"
    for bad in ("", "-x", "x-", "Upper", "a/b", "x" * 64, ".hidden"):
        with pytest.raises(SecretError) as refused:
            validate_name(bad)
        assert refused.value.field == "name"
    value = validate_value("s3cr3t-value")
    assert "s3cr3t" not in repr(value)
    assert "s3cr3t" not in str(value)
    for bad in ("", "x" * (64 * 1024 + 1), "a\0b"):
        with pytest.raises(SecretError) as refused:
            validate_value(bad)
        assert refused.value.field == "value"
        assert not bad or bad[:10] not in str(refused.value)
