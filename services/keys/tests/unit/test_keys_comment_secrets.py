"""A public key whose comment holds a secret is refused naming ``public_key.comment``, quoting nothing.

The comment is stored, listed to admins and written into workers' ``authorized_keys``: a token pasted
there (plainly, base64-, hex- or URL-encoded) must not get that far. Ordinary comments stay accepted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from urllib.parse import quote

import pytest
from keys_sshkit import GeneratedKey
from rlark_keys.domain import KeyErrorCode, KeyValidationError, parse_public_key

pytestmark = pytest.mark.unit
MakeKey = Callable[..., GeneratedKey]

TOKEN = "ghp_" + "Zq8vN2pL5xR7tY1wK4mB9cD3aE6fG0hJ2kM4"
COMMENTS = {
    "plain": f"laptop {TOKEN}",
    "base64": f"laptop {base64.b64encode(TOKEN.encode()).decode()}",
    "hex": f"laptop {TOKEN.encode().hex()}",
    "url-encoded": "laptop " + quote(f"https://bot:{TOKEN[4:20]}@git.example.com/x", safe=""),
    "assignment": "laptop HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
}


@pytest.mark.parametrize("name", sorted(COMMENTS))
def test_a_comment_holding_a_secret_is_refused_naming_the_comment(make_key: MakeKey, name: str) -> None:
    key_type, blob = make_key("ed25519").public_text.split()[:2]
    comment = COMMENTS[name]
    with pytest.raises(KeyValidationError) as refused:
        parse_public_key(f"{key_type} {blob} {comment}")
    assert refused.value.code is KeyErrorCode.SECRET_IN_COMMENT
    assert refused.value.field == "public_key.comment"
    assert refused.value.message.startswith("The key's comment holds a")
    secret_part = comment.removeprefix("laptop ")
    for shown in (str(refused.value), repr(refused.value)):
        assert TOKEN[:10] not in shown
        assert secret_part[:10] not in shown


@pytest.mark.parametrize(
    "comment",
    [
        "alice@laptop",
        "rlark-test",
        "张三 的 笔记本",
        "ci key 2f6c1d8e-0b1f-4f7e-9a44-3c2d1e0f9a8b",
        "token rotation 2026",
    ],
)
def test_ordinary_comments_are_kept(make_key: MakeKey, comment: str) -> None:
    key_type, blob = make_key("ed25519").public_text.split()[:2]
    assert parse_public_key(f"{key_type} {blob} {comment}").comment == comment
