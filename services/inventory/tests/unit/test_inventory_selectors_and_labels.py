"""Label syntax and equality selectors: what parses, what is refused, and that the error names the field."""

from __future__ import annotations

import pytest

from rlark_inventory.domain.errors import InvalidInput
from rlark_inventory.domain.labels import format_selector, parse_selector, validate_labels

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {}),
        ("", {}),
        ("  ", {}),
        ("rlark.io/gpu-model=A100", {"rlark.io/gpu-model": "A100"}),
        ("a=1, b=2", {"a": "1", "b": "2"}),
        ("a==1", {"a": "1"}),
        ("a=", {"a": ""}),
        ("a=1,a=1", {"a": "1"}),
    ],
)
def test_selectors_parse_into_required_pairs(text: str | None, expected: dict[str, str]) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "gpu",
        "a=b,,c=d",
        "a!=b",
        "a in (b)",
        "bad key=x",
        "a=b=c",
        "a=1,a=2",
        "rlark.io/=x",
        "/a=b",
        "a=-x",
        "a=" + "x" * 64,
    ],
)
def test_malformed_selectors_are_refused_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_selector(text, field="roles[0].selector")
    assert caught.value.field == "roles[0].selector"
    assert caught.value.code == "invalid_selector"


def test_selectors_have_a_bounded_number_of_terms() -> None:
    with pytest.raises(InvalidInput):
        parse_selector(",".join(f"k{i}=v" for i in range(21)))


def test_format_is_the_inverse_of_parse() -> None:
    pairs = {"zone": "z1", "rlark.io/gpu-model": "A100"}
    assert parse_selector(format_selector(pairs)) == pairs


def test_label_entries_are_named_in_errors() -> None:
    assert validate_labels({"rlark.io/tier": "gold", "x": ""}) == {"rlark.io/tier": "gold", "x": ""}
    with pytest.raises(InvalidInput) as caught:
        validate_labels({"ok": "1", "Bad.Prefix/x": "1"})
    assert caught.value.field == "labels.Bad.Prefix/x"
