"""Idempotency keys: which header values are keys, and when two submissions carry the same document."""

from __future__ import annotations

import pytest
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
