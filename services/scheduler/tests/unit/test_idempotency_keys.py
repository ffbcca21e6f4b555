"""Idempotency keys: which header values are keys, and when two submissions carry the same document."""

from __future__ import annotations

import base64
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlark_scheduler.domain.idempotency import IdempotencyKeyInvalid, check_key, document_fingerprint


@pytest.mark.parametrize("key", ["a", "k" * 128, "2f6c1d8e-0b1f-4f7e-9a44-3c2d1e0f9a8b", "with space ~!"])
def test_printable_ascii_keys_of_1_to_128_characters_are_accepted(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", "k" * 129, "tab\there", "nul\x00", "del\x7f", "clé", "键"])
def test_empty_long_and_non_printable_keys_are_refused(key: str) -> None:
    with pytest.raises(IdempotencyKeyInvalid, match="Idempotency-Key"):
        check_key(key)


def test_documents_with_the_same_content_have_the_same_fingerprint_whatever_their_order() -> None:
    one = {"metadata": {"name": "x"}, "spec": {"tasks": [{"name": "a"}], "header": "a"}}
    other = {"spec": {"header": "a", "tasks": [{"name": "a"}]}, "metadata": {"name": "x"}}
    assert document_fingerprint(one, b"ignored") == document_fingerprint(other, b"also ignored")
    assert document_fingerprint(one, b"") != document_fingerprint({**one, "metadata": {"name": "y"}}, b"")


def test_unparsed_documents_are_compared_by_their_text() -> None:
    assert document_fingerprint(None, b"spec: [") == document_fingerprint(None, "spec: [")
    assert document_fingerprint(None, b"spec: [") != document_fingerprint(None, b"spec: [ ")
    assert document_fingerprint(None, b"{}") != document_fingerprint({}, b"{}")


GITHUB_TOKEN = "ghp_" + "Zq8vN2pL5xR7tY1wK4mB9cD3aE6fG0hJ2kM4"


@pytest.mark.parametrize(
    "key",
    [
        GITHUB_TOKEN,
        f"retry-{GITHUB_TOKEN}",
        base64.b64encode(GITHUB_TOKEN.encode()).decode(),
        GITHUB_TOKEN.encode().hex()[:128],
        "password=hunter2",
    ],
    ids=["plain", "inside", "base64", "hex", "assignment"],
)
def test_a_key_holding_a_secret_is_refused_without_quoting_it(key: str) -> None:
    with pytest.raises(IdempotencyKeyInvalid, match=r"^Idempotency-Key holds ") as refused:
        check_key(key)
    assert key[:12] not in str(refused.value)
    assert "hunter2" not in str(refused.value)


@settings(max_examples=200, deadline=None)
@given(st.uuids())
def test_uuid_keys_are_accepted(value: uuid.UUID) -> None:
    assert check_key(str(value)) == str(value)
    assert check_key(value.hex) == value.hex
