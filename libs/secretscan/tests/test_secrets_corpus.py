"""The secret scanner against a corpus of realistic snippets (see secret_corpus/README.md).

Positives must yield exactly the expected (kind, line) findings, with the field passed in and
without the secret anywhere in the finding; negatives must yield nothing.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from rlark_secretscan import SecretKind, scan_text

CORPUS = Path(__file__).parent / "secret_corpus"
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"


def _pick(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, n: int) -> str:
    """Random alphanumerics with at least one lower, upper and digit (like real tokens)."""
    body = _pick(rng, ALNUM, n - 3)
    return body + rng.choice(string.ascii_lowercase) + rng.choice(string.ascii_uppercase) + "7"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": _pick(rng, ALNUM, 12), "iat": 1700000000}).encode())
    return f"{header}.{payload}.{_pick(rng, B64URL, 43)}"


GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "pem_body": lambda r: "\n".join(_pick(r, B64, 64) for _ in range(4)),
    "pem_line": lambda r: _pick(r, B64, 64),
    "aws_key_id": lambda r: "AKIA" + _pick(r, string.ascii_uppercase + "234567", 16),
    "aws_secret": lambda r: _pick(r, B64, 39) + "Q",
    "hex40": lambda r: _pick(r, "0123456789abcdef", 40),
    "hex64": lambda r: _pick(r, "0123456789abcdef", 64),
    "b64_88": lambda r: _pick(r, B64, 86) + "==",
    "github_classic": lambda r: "ghp_" + _mixed(r, 36),
    "github_oauth": lambda r: "gho_" + _mixed(r, 36),
    "github_server": lambda r: "ghs_" + _mixed(r, 36),
    "github_fine": lambda r: "github_pat_" + _mixed(r, 22) + "_" + _mixed(r, 59),
    "gitlab": lambda r: "glpat-" + _mixed(r, 20),
    "hf": lambda r: "hf_" + _pick(r, string.ascii_letters, 34),
    "openai_project": lambda r: "sk-proj-" + _mixed(r, 48),
    "openai_legacy": lambda r: "sk-" + _mixed(r, 48),
    "anthropic": lambda r: "sk-ant-api03-" + _mixed(r, 93) + "AA",
    "google": lambda r: "AIza" + _pick(r, B64URL, 35),
    "slack": lambda r: f"xoxb-{_pick(r, string.digits, 12)}-{_pick(r, string.digits, 13)}-" + _mixed(r, 24),
    "upper9": lambda r: _pick(r, string.ascii_uppercase + string.digits, 9),
    "alnum24": lambda r: _mixed(r, 24),
    "alnum32": lambda r: _mixed(r, 32),
    "alnum40": lambda r: _mixed(r, 40),
    "jwt": _jwt,
    "ssh_pub": lambda r: "AAAAC3NzaC1lZDI1NTE5AAAAI" + _pick(r, B64, 43),
}
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_EXPECT = re.compile(r"#! expect: (.*)\n")


def _load(path: Path) -> tuple[str, list[str], set[tuple[SecretKind, int]] | None]:
    """(text with placeholders filled, the generated values, expected findings or None)."""
    raw = path.read_text()
    header = _EXPECT.match(raw)
    assert header, f"{path.name}: first line must be '#! expect: ...'"
    rng = random.Random(path.name)
    generated: list[str] = []

    def fill(match: re.Match[str]) -> str:
        value = GENERATORS[match.group(1)](rng)
        generated.append(value)
        return value

    text = _PLACEHOLDER.sub(fill, raw[header.end() :])
    spec = header.group(1).strip()
    if spec == "none":
        return text, generated, None
    expected = set()
    for item in spec.split():
        kind, line = item.split("@")
        expected.add((SecretKind(kind), int(line)))
    return text, generated, expected


POSITIVES = sorted((CORPUS / "positive").iterdir())
NEGATIVES = sorted((CORPUS / "negative").iterdir())


def test_corpus_is_large_enough_and_covers_every_required_kind() -> None:
    assert len(POSITIVES) >= 25
    assert len(NEGATIVES) >= 15
    covered = {kind for path in POSITIVES for kind, _ in (_load(path)[2] or set())}
    assert set(SecretKind) <= covered, f"kinds without a sample: {set(SecretKind) - covered}"


@pytest.mark.parametrize("path", POSITIVES, ids=lambda p: p.name)
def test_positive_sample_is_found_with_kind_field_and_line(path: Path) -> None:
    text, _, expected = _load(path)
    findings = scan_text(text, "spec.runScript")
    assert {(f.kind, f.line) for f in findings} == expected
    assert all(f.field == "spec.runScript" for f in findings)
    assert all(f.column >= 1 for f in findings)


@pytest.mark.parametrize("path", POSITIVES, ids=lambda p: p.name)
def test_positive_finding_never_carries_the_secret(path: Path) -> None:
    text, generated, _ = _load(path)
    for finding in scan_text(text, "spec.runScript"):
        # The only data a finding holds: where (the span as two offsets), and which kind — plus a message
        # built from those.
        assert set(finding.__slots__) == {"kind", "field", "line", "column", "wrapping", "span"}
        start, end = finding.span
        assert isinstance(start, int)
        assert isinstance(end, int)
        assert start < end
        assert text.count("\n", 0, start) + 1 == finding.line
        shown = finding.message
        for value in generated:
            assert value[:12] not in shown
        line = text.splitlines()[finding.line - 1]
        value = re.split(r"[\s\"';]", line[finding.column - 1 :])[0]
        assert len(value) >= 6, "the column points at the secret value"
        assert value[:8] not in shown


@pytest.mark.parametrize("path", NEGATIVES, ids=lambda p: p.name)
def test_negative_sample_has_no_finding(path: Path) -> None:
    text, _, expected = _load(path)
    assert expected is None
    assert scan_text(text, "spec.runScript") == []


def test_generated_tokens_are_well_formed() -> None:
    rng = random.Random(0)
    token = _jwt(rng)
    header = token.split(".")[0]
    assert json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["alg"] == "HS256"
    assert re.fullmatch(r"AKIA[A-Z2-7]{16}", GENERATORS["aws_key_id"](rng))
    assert re.fullmatch(r"hf_[A-Za-z]{34}", GENERATORS["hf"](rng))
