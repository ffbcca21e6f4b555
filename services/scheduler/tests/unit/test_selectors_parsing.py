"""Node selectors: strict parsing, equality matching, canonical text."""

from __future__ import annotations

import pytest
from rlark_scheduler.domain.selectors import (
    SelectorError,
    format_selector,
    matches,
    parse_selector,
    selector_key,
    validate_selector,
)

pytestmark = pytest.mark.unit


def test_parses_pairs_with_prefixed_keys_and_ignores_spaces() -> None:
    assert parse_selector("rlark.io/gpu-model=A100, rlark.io/node-category = cloud") == {
        "rlark.io/gpu-model": "A100",
        "rlark.io/node-category": "cloud",
    }


def test_empty_text_is_the_empty_selector_which_matches_everything() -> None:
    assert parse_selector("") == {}
    assert parse_selector("   ") == {}
    assert matches({}, {"any": "thing"})


def test_double_equals_is_accepted_like_kubectl() -> None:
    assert parse_selector("zone==a") == {"zone": "a"}


def test_empty_value_is_a_valid_equality() -> None:
    assert parse_selector("gpu=") == {"gpu": ""}


@pytest.mark.parametrize(
    ("text", "bad_part", "problem"),
    [
        ("a=b,,c=d", "", "empty part"),
        ("a=b,", "", "empty part"),
        ("rlark.io/gpu-model", "rlark.io/gpu-model", "expected key=value"),
        ("zone!=a", "zone!=a", "only equality"),
        ("a=b=c", "a=b=c", "more than one '='"),
        ("=x", "=x", "key name is empty"),
        ("Bad_Prefix.io/x=1", "Bad_Prefix.io/x=1", "DNS subdomain"),
        ("/x=1", "/x=1", "prefix before '/' is empty"),
        ("-x=1", "-x=1", "start and end with a letter or digit"),
        ("x=-1", "x=-1", "value must start and end"),
        ("x=" + "v" * 64, "x=" + "v" * 64, "longer than 63"),
        ("k" * 64 + "=1", "k" * 64 + "=1", "longer than 63"),
        ("a=1,a=2", "a=2", "given more than once"),
    ],
)
def test_bad_parts_are_refused_and_named(text: str, bad_part: str, problem: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert caught.value.part.strip() == bad_part
    assert problem in caught.value.problem
    assert f'"{caught.value.part}"' in str(caught.value)


def test_matching_is_an_and_of_equalities() -> None:
    selector = {"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud"}
    assert matches(selector, {"rlark.io/gpu-model": "A100", "rlark.io/node-category": "cloud", "x": "y"})
    assert not matches(selector, {"rlark.io/gpu-model": "A100"})
    assert not matches(selector, {"rlark.io/gpu-model": "H100", "rlark.io/node-category": "cloud"})


def test_format_round_trips_and_is_canonical() -> None:
    selector = {"b": "2", "a": "1"}
    assert format_selector(selector) == "a=1,b=2"
    assert parse_selector(format_selector(selector)) == selector
    assert selector_key(selector) == selector_key({"a": "1", "b": "2"})


def test_validate_selector_refuses_invalid_mapping_pairs() -> None:
    validate_selector({"rlark.io/gpu-model": "A100"})
    with pytest.raises(SelectorError, match="gpu model=A100"):
        validate_selector({"gpu model": "A100"})
