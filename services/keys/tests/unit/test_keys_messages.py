"""Every key refusal can be said in every language (ADR 0011)."""

from __future__ import annotations

import pytest
from rlark_contracts.messages import LANGUAGES, catalogue
from rlark_keys.domain import KeyErrorCode, KeyValidationError, parse_public_key, validate_key_name


@pytest.mark.parametrize("code", list(KeyErrorCode))
def test_every_key_error_code_has_a_sentence_in_every_language(code: KeyErrorCode) -> None:
    for lang in LANGUAGES:
        assert any(key == code.value or key.startswith(f"{code.value}.") for key in catalogue(lang)), lang


@pytest.mark.parametrize(
    ("refused", "key"),
    [
        (lambda: parse_public_key(""), "empty_key"),
        (lambda: parse_public_key("ssh-dss AAAAB3NzaC1kc3MAAA== x"), "unsupported_key_type.dsa"),
        (lambda: validate_key_name("x" * 65), "invalid_key_name.too_long"),
    ],
)
def test_a_refusal_carries_its_key_and_params_and_says_them_in_chinese(refused: object, key: str) -> None:
    with pytest.raises(KeyValidationError) as caught:
        refused()  # type: ignore[operator]
    said = caught.value.text
    assert said.key == key
    assert said.english == caught.value.message
    assert said.render("zh-CN") != said.english
