"""Wrapped secrets: base64 (standard and URL-safe), hex, URL-encoded, split across lines, and nested.

Each secret of the corpus below is wrapped each way and must be found with its kind, at the start of the
wrapped run, with the wrapping named and nothing of the secret (plain or wrapped) in the message. Benign
values — UUIDs, file digests, base64/hex/URL encodings of text with no secret — must stay clean.
"""

from __future__ import annotations

import base64
import hashlib
import random
import string
from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rlark_secretscan import SecretFinding, SecretKind, scan_text
from rlark_secretscan.unwrap import MAX_DEPTH, MAX_RUN_CHARS, Budget, encoded_runs

RNG = random.Random(14)
ALNUM = string.ascii_letters + string.digits


def _mixed(n: int) -> str:
    return "".join(RNG.choice(ALNUM) for _ in range(n - 3)) + "aZ7"


SECRETS: dict[str, tuple[str, SecretKind]] = {
    "github": ("ghp_" + _mixed(36), SecretKind.GITHUB_TOKEN),
    "huggingface": (
        "hf_" + "".join(RNG.choice(string.ascii_letters) for _ in range(34)),
        SecretKind.HUGGINGFACE_TOKEN,
    ),
    "aws_key_id": (
        "AKIA" + "".join(RNG.choice(string.ascii_uppercase + "234567") for _ in range(16)),
        SecretKind.AWS_ACCESS_KEY_ID,
    ),
    "password_assignment": ("DB_PASSWORD=hunter2-" + _mixed(8), SecretKind.PASSWORD),
    "url_credentials": ("https://bot:" + _mixed(12) + "@git.example.com/x.git", SecretKind.URL_CREDENTIALS),
    "private_key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
        SecretKind.PRIVATE_KEY,
    ),
}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _hex(text: str) -> str:
    return text.encode().hex()


def _url(text: str) -> str:
    return quote(text, safe="")


def _url_every_byte(text: str) -> str:
    return "".join(f"%{byte:02X}" for byte in text.encode())


ENCODINGS: dict[str, tuple[Callable[[str], str], tuple[str, ...]]] = {
    "base64": (_b64, ("base64",)),
    "base64url": (_b64url, ("base64url",)),
    "hex": (_hex, ("hex",)),
    "url-encoded": (_url_every_byte, ("url-encoded",)),
    "base64_of_hex": (lambda t: _b64(_hex(t)), ("base64", "hex")),
    "hex_of_base64": (lambda t: _hex(_b64(t)), ("hex", "base64")),
}


def _assert_nothing_shown(finding: SecretFinding, *texts: str) -> None:
    shown = finding.message + repr(finding)
    for text in texts:
        for part in (text[:10], text[-10:]):
            assert part not in shown


@pytest.mark.parametrize("secret_name", sorted(SECRETS))
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_an_encoded_secret_is_found_at_the_encoded_run(secret_name: str, encoding: str) -> None:
    secret, kind = SECRETS[secret_name]
    encode, wrapping = ENCODINGS[encoding]
    wrapped = encode(secret)
    if wrapping == ("base64url",) and not any(c in wrapped for c in "-_"):
        wrapping = ("base64",)  # the same text in both alphabets
    text = f"set -e\nexport BUILD_CONFIG={wrapped}\npython train.py\n"
    assert scan_text(text, "spec.runScript") == [
        SecretFinding(kind, "spec.runScript", 2, len("export BUILD_CONFIG=") + 1, wrapping)
    ]
    _assert_nothing_shown(scan_text(text, "spec.runScript")[0], secret, wrapped)


def test_the_message_names_the_wrapping() -> None:
    secret, _ = SECRETS["github"]
    (finding,) = scan_text(f"X={_b64(_hex(secret))}", "env.X")
    assert finding.message.startswith(
        "a GitHub token (base64-encoded, inside hex-encoded) was found in env.X (line 1, column 3)"
    )


@pytest.mark.parametrize("secret_name", ["github", "huggingface", "aws_key_id"])
def test_a_token_split_across_two_lines_is_found_where_it_starts(secret_name: str) -> None:
    secret, kind = SECRETS[secret_name]
    cut = len(secret) // 2
    text = f"run: |\n  export AUTH={secret[:cut]}\n    {secret[cut:]}\n  python train.py\n"
    assert scan_text(text, "s") == [SecretFinding(kind, "s", 2, len("  export AUTH=") + 1, ("split",))]


def test_a_value_continued_with_a_backslash_is_joined() -> None:
    secret, _ = SECRETS["huggingface"]
    text = f"export HF_TOKEN={secret[:12]}\\\n    {secret[12:]}\n"
    (finding,) = scan_text(text, "s")
    assert (finding.kind, finding.line, finding.wrapping) == (SecretKind.HUGGINGFACE_TOKEN, 1, ("split",))
    generic = "Zq8vN2pL5xR7tY1wK4mB9cD3"
    text = f"API_TOKEN={generic[:8]}\\\n{generic[8:]}\n"
    assert [(f.kind, f.line) for f in scan_text(text, "s")] == [(SecretKind.GENERIC_TOKEN, 1)]


def test_base64_wrapped_at_76_columns_is_joined_then_decoded() -> None:
    secret, _ = SECRETS["github"]
    encoded = _b64(f"machine github.com login bot password {secret}\n" * 3)
    lines = [encoded[i : i + 76] for i in range(0, len(encoded), 76)]
    text = "data: |\n" + "".join(f"  {line}\n" for line in lines)
    findings = scan_text(text, "s")
    assert findings, "the token inside the wrapped base64 is found"
    for finding in findings:
        # Each 76-character line is base64 of its own (76 is a multiple of 4): a token whole in one
        # line's text is found at that line, one spread over lines where the joined run starts.
        assert (finding.kind, finding.column) == (SecretKind.GITHUB_TOKEN, 3)
        assert 2 <= finding.line <= len(lines) + 1
        assert finding.wrapping in {("base64",), ("split", "base64")}


def test_a_plain_secret_inside_an_encoded_looking_value_is_reported_once_as_written() -> None:
    secret, _ = SECRETS["github"]
    assert scan_text(f"X={secret}", "s") == [SecretFinding(SecretKind.GITHUB_TOKEN, "s", 1, 3)]


def test_wrapping_deeper_than_the_limit_is_not_undone() -> None:
    secret, _ = SECRETS["github"]
    wrapped = secret
    for _ in range(MAX_DEPTH):
        wrapped = _b64(wrapped)
    assert [f.wrapping for f in scan_text(wrapped, "s")] == [("base64",) * MAX_DEPTH]
    assert scan_text(_b64(wrapped), "s") == []


def test_decoding_is_bounded_in_run_size_and_total_budget() -> None:
    secret, _ = SECRETS["github"]
    too_long = _b64(secret + " " * MAX_RUN_CHARS)
    assert scan_text(too_long, "s") == []
    runs = f"{_b64(secret)} {_b64(secret)}"
    assert len(list(encoded_runs(runs, Budget()))) == 2
    assert len(list(encoded_runs(runs, Budget(len(secret) + 1)))) == 1


def test_binary_decodings_are_not_scanned() -> None:
    assert list(encoded_runs(hashlib.sha256(b"x").hexdigest(), Budget())) == []
    assert list(encoded_runs(base64.b64encode(bytes(range(64))).decode(), Budget())) == []


# -- benign values: no finding ------------------------------------------------------------------

BENIGN = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@BENIGN
@given(st.uuids())
def test_uuids_are_not_secrets(value: object) -> None:
    text = f"RUN_ID={value}\nrlark jobs submit --idempotency-key {value}\n{str(value).replace('-', '')}\n"
    assert scan_text(text, "s") == []


@BENIGN
@given(st.binary(max_size=4096))
def test_digests_of_files_are_not_secrets(data: bytes) -> None:
    text = "\n".join(
        [
            f"sha256:{hashlib.sha256(data).hexdigest()}",
            f"git checkout {hashlib.sha1(data).hexdigest()}",  # noqa: S324 - a commit id, not security
            f"md5sum {hashlib.md5(data).hexdigest()}",  # noqa: S324
            f"integrity: sha512-{base64.b64encode(hashlib.sha512(data).digest()).decode()}",
            f"etag: {base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()}",
        ]
    )
    assert scan_text(text, "s") == []


@BENIGN
@given(st.text(min_size=1, max_size=300))
def test_encodings_of_text_without_a_secret_have_no_secret(plain: str) -> None:
    assume(scan_text(plain, "s") == [])
    for encode in (_b64, _b64url, _hex, _url):
        assert scan_text(f"CONFIG={encode(plain)}", "s") == []


@BENIGN
@given(st.lists(st.from_regex(r"[a-z0-9./]{1,40}", fullmatch=True), min_size=2, max_size=12))
def test_lines_of_ordinary_words_and_paths_have_no_secret(words: list[str]) -> None:
    assume(all(scan_text(word, "s") == [] for word in words))
    assume(scan_text(" ".join(words), "s") == [])
    assert scan_text("\n".join(words), "s") == []
