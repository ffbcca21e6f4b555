"""Behaviour of ``validate_key_name``: short, one-line, printable names only."""

from __future__ import annotations

import pytest
from rlark_keys.domain import (
    MAX_KEY_NAME_CHARS,
    KeyErrorCode,
    KeyValidationError,
    validate_key_name,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("my-workstation", "my-workstation"),
        ("  laptop 2024  ", "laptop 2024"),
        ("张三的笔记本", "张三的笔记本"),
        ("x", "x"),
        ("n" * MAX_KEY_NAME_CHARS, "n" * MAX_KEY_NAME_CHARS),
    ],
)
def test_valid_names_are_returned_stripped(name: str, expected: str) -> None:
    assert validate_key_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "",
        "   ",
        "n" * (MAX_KEY_NAME_CHARS + 1),
        "two\nlines",
        "tab\there",
        "bell\x07",
        "zero\u200bwidth",
        "right-to-left\u202eoverride",
    ],
)
def test_invalid_names_are_refused_with_invalid_key_name_on_the_name_field(name: str) -> None:
    with pytest.raises(KeyValidationError) as info:
        validate_key_name(name)

    assert info.value.code is KeyErrorCode.INVALID_KEY_NAME
    assert info.value.field == "name"
    assert info.value.message


def test_length_limit_applies_after_stripping() -> None:
    padded = "  " + "n" * MAX_KEY_NAME_CHARS + "  "

    assert validate_key_name(padded) == "n" * MAX_KEY_NAME_CHARS
