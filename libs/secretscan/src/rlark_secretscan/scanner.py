"""Secret scanner: finds credentials pasted into a job's env values, scripts, mounts or YAML.

Role: the server-side rule "passwords, private keys, access tokens and object-storage keys are
refused with the field and line named" (ARCHITECTURE §5). It is pure text analysis: no I/O, no
state, deterministic.

Contract:
- :func:`scan_text` returns one :class:`SecretFinding` per secret found, with its *kind*, the
  *field* it was given, and the 1-based *line* and *column* where the secret value starts inside
  the scanned text (and its *span* there, for the caller to redact). A finding **never** carries
  the secret, not even a masked prefix: findings end up in API errors, events and logs.
- :func:`scan_assignment` judges one ``name = value`` pair (an env entry, a YAML key) by its name
  and value; :func:`scan_mapping` applies it and :func:`scan_text` to every entry of a mapping.
- When two rules claim overlapping text, the more specific rule wins (a ``ghp_`` token assigned to
  ``GITHUB_TOKEN`` is reported once, as a GitHub token).

What counts as a secret:
- well-formed tokens recognised by shape wherever they appear: private key blocks (PEM, OpenSSH,
  PuTTY), AWS access key ids, GCP service-account JSON, Azure storage keys, GitHub / GitLab /
  Hugging Face / OpenAI / Anthropic / Google / Slack tokens, JWTs, ``Bearer`` tokens, URLs with
  ``user:password@``;
- assignments whose *name* says secret (``password``, ``passwd``, ``passphrase``, ``secret``,
  ``api_key``, ``private_key``, ``account_key``; ``pass``/``pwd`` as the last word) and whose value
  is a literal — in ``NAME=value``, ``NAME: value`` (a YAML or JSON key), ``--name value`` and
  ``--name=value`` forms;
- assignments named ``*token*`` when the literal is long (>= 16 characters) and high-entropy, so
  tokenizer settings like ``PAD_TOKEN=<|endoftext|>`` or ``MAX_TOKENS=4096`` pass;
- any of the above wrapped: inside a base64 (standard or URL-safe), hex or URL-encoded run that
  decodes to text (reported at the run, up to ``MAX_DEPTH`` wrappings deep), or split across lines
  (a shell ``\\`` continuation, or a token broken between the end of one line and the start of the
  next; reported where it starts). The finding's ``wrapping`` says how it was wrapped.

What does not (decided, and tested):
- references: values starting with ``$`` (``$VAR``, ``${VAR}``, ``$(cat /run/secrets/x)``, Hydra's
  ``${oc.env:X}``), a backquote, ``{{`` or ``%(``; code expressions such as ``os.getenv("X")`` or
  ``args.password``; absolute paths (``/run/secrets/db``);
- names that point at a secret rather than hold one: the last word is ``file``, ``path``, ``dir``,
  ``ref``, ``name``, ``id``, ``url``, ``stdin``, ... (``--password-file``, ``TOKEN_PATH``,
  ``secretRef``, ``PASSWORD_FILE``);
- placeholders: ``<anything>`` in angle brackets, ``***``, ``xxx`` (three or more x), ``...``,
  ``redacted``, ``none``/``null``, booleans, the empty value;
- words that merely contain a secret word: ``tokenizer``, ``secretary``, ``max_tokens``.
- ``changeme``, ``password``, ``123456`` and other real-looking literals are **not** placeholders:
  a weak password is still a password, and it is refused.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from enum import StrEnum, auto
from itertools import pairwise

from rlark_secretscan.unwrap import MAX_DEPTH, Budget, encoded_runs, join_split_lines

SPLIT = "split"
"""The wrapping of a secret found only once the lines splitting it were joined."""

__all__ = [
    "SecretFinding",
    "SecretKind",
    "classify_name",
    "describe_kind",
    "scan_assignment",
    "scan_mapping",
    "scan_text",
]


class SecretKind(StrEnum):
    """What kind of secret was found; stable strings (the lower-case member names) used in API errors."""

    PRIVATE_KEY = auto()
    AWS_ACCESS_KEY_ID = auto()
    AWS_SECRET_ACCESS_KEY = auto()
    GCP_SERVICE_ACCOUNT = auto()
    AZURE_STORAGE_KEY = auto()
    GITHUB_TOKEN = auto()
    GITLAB_TOKEN = auto()
    HUGGINGFACE_TOKEN = auto()
    OPENAI_API_KEY = auto()
    ANTHROPIC_API_KEY = auto()
    GOOGLE_API_KEY = auto()
    SLACK_TOKEN = auto()
    JWT = auto()
    BEARER_TOKEN = auto()
    URL_CREDENTIALS = auto()
    PASSWORD = auto()
    OBJECT_STORAGE_SECRET = auto()
    GENERIC_SECRET = auto()
    GENERIC_TOKEN = auto()


_DESCRIPTIONS: dict[SecretKind, str] = {
    SecretKind.PRIVATE_KEY: "a private key",
    SecretKind.AWS_ACCESS_KEY_ID: "an AWS access key id",
    SecretKind.AWS_SECRET_ACCESS_KEY: "an AWS secret access key",
    SecretKind.GCP_SERVICE_ACCOUNT: "a GCP service-account key",
    SecretKind.AZURE_STORAGE_KEY: "an Azure storage account key",
    SecretKind.GITHUB_TOKEN: "a GitHub token",
    SecretKind.GITLAB_TOKEN: "a GitLab token",
    SecretKind.HUGGINGFACE_TOKEN: "a Hugging Face token",
    SecretKind.OPENAI_API_KEY: "an OpenAI-style API key",
    SecretKind.ANTHROPIC_API_KEY: "an Anthropic API key",
    SecretKind.GOOGLE_API_KEY: "a Google API key",
    SecretKind.SLACK_TOKEN: "a Slack token",
    SecretKind.JWT: "a JSON Web Token",
    SecretKind.BEARER_TOKEN: "a bearer token",
    SecretKind.URL_CREDENTIALS: "a password inside a URL",
    SecretKind.PASSWORD: "a password",
    SecretKind.OBJECT_STORAGE_SECRET: "an object-storage secret key",
    SecretKind.GENERIC_SECRET: "a secret value",
    SecretKind.GENERIC_TOKEN: "an access token",
}


def describe_kind(kind: SecretKind) -> str:
    """Human words for a kind, e.g. ``"a GitHub token"``."""
    return _DESCRIPTIONS[kind]


@dataclass(frozen=True, slots=True)
class SecretFinding:
    """One secret found: where it is, never what it is."""

    kind: SecretKind
    field: str
    line: int
    column: int
    #: How the secret was wrapped, outermost first (``("base64", "hex")``); empty when written plainly.
    wrapping: tuple[str, ...] = ()
    #: ``[start, end)`` character offsets of the secret (of its encoded run, for a wrapped one) in the scanned
    #: text, so that the caller, which holds that text, can keep it out of what it shows (a message quoting
    #: an image tag, a preview); never sent anywhere itself, and not part of a finding's identity.
    span: tuple[int, int] = dataclass_field(default=(0, 0), compare=False)

    @property
    def what(self) -> str:
        """``"a GitHub token"``, or ``"a GitHub token (base64-encoded)"`` for a wrapped one."""
        if not self.wrapping:
            return describe_kind(self.kind)
        layers = ", inside ".join(_WRAPPING_WORDS.get(w, w) for w in self.wrapping)
        return f"{describe_kind(self.kind)} ({layers})"

    @property
    def message(self) -> str:
        where = f"{self.field} " if self.field else ""
        return (
            f"{self.what} was found in {where}(line {self.line}, column "
            f"{self.column}); pass it through a secret reference instead of inline text"
        )


_WRAPPING_WORDS: dict[str, str] = {
    "base64": "base64-encoded",
    "base64url": "URL-safe base64-encoded",
    "hex": "hex-encoded",
    "url-encoded": "URL-encoded",
    SPLIT: "split across lines",
}


# --------------------------------------------------------------------------------------------
# Rules recognising tokens by their shape. Order is priority: earlier rules win overlaps.


@dataclass(frozen=True, slots=True)
class _ShapeRule:
    kind: SecretKind
    pattern: re.Pattern[str]
    group: str | int = 0
    accept: Callable[[str], bool] | None = None


def _jwt_header_is_json(token: str) -> bool:
    header = token.split(".", 1)[0]
    padded = header + "=" * (-len(header) % 4)
    try:
        decoded = json.loads(base64.urlsafe_b64decode(padded))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict)


def _has_letter_and_digit(text: str) -> bool:
    return any(c.isalpha() for c in text) and any(c.isdigit() for c in text)


_SHAPE_RULES: tuple[_ShapeRule, ...] = (
    _ShapeRule(
        SecretKind.GCP_SERVICE_ACCOUNT,
        re.compile(r'"private_key"\s*:\s*"(?P<v>[^"\n]{16,})"'),
        "v",
    ),
    _ShapeRule(
        SecretKind.GCP_SERVICE_ACCOUNT,
        re.compile(r'"type"\s*:\s*"(?P<v>service_account)"'),
        "v",
    ),
    _ShapeRule(
        SecretKind.PRIVATE_KEY,
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----"),
    ),
    _ShapeRule(SecretKind.PRIVATE_KEY, re.compile(r"PuTTY-User-Key-File-\d+:")),
    _ShapeRule(
        SecretKind.AZURE_STORAGE_KEY,
        re.compile(r"(?i)\b(?:AccountKey|SharedAccessKey)\s*=\s*(?P<v>[A-Za-z0-9+/]{20,}={0,2})"),
        "v",
    ),
    _ShapeRule(
        SecretKind.AWS_ACCESS_KEY_ID,
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}\b"),
    ),
    _ShapeRule(SecretKind.GITHUB_TOKEN, re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b")),
    _ShapeRule(SecretKind.GITHUB_TOKEN, re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b")),
    _ShapeRule(SecretKind.GITLAB_TOKEN, re.compile(r"\bglpat-[A-Za-z0-9_-]{20,255}")),
    _ShapeRule(SecretKind.HUGGINGFACE_TOKEN, re.compile(r"\bhf_[A-Za-z0-9]{30,255}\b")),
    _ShapeRule(
        SecretKind.ANTHROPIC_API_KEY,
        re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,255}"),
    ),
    _ShapeRule(
        SecretKind.OPENAI_API_KEY,
        re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?(?P<v>[A-Za-z0-9_-]{20,255})"),
        0,
        _has_letter_and_digit,
    ),
    _ShapeRule(SecretKind.GOOGLE_API_KEY, re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    _ShapeRule(SecretKind.SLACK_TOKEN, re.compile(r"\bxox[baprs]-[A-Za-z0-9-]{10,255}")),
    _ShapeRule(
        SecretKind.SLACK_TOKEN,
        re.compile(r"https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/\w+"),
    ),
    _ShapeRule(
        SecretKind.JWT,
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,1024}\.[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{0,4096}"),
        0,
        _jwt_header_is_json,
    ),
    _ShapeRule(
        SecretKind.URL_CREDENTIALS,
        re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/@'\"]{0,256}:(?P<v>[^\s/@'\"]{1,256})@"),
        "v",
        lambda value: not _is_reference_or_placeholder(value),
    ),
    _ShapeRule(
        SecretKind.BEARER_TOKEN,
        re.compile(r"\bBearer[ \t]+(?P<v>[A-Za-z0-9._~+/=-]{16,4096})"),
        "v",
        lambda value: _looks_high_entropy(value),
    ),
)


# --------------------------------------------------------------------------------------------
# Assignments judged by the name and the value.

# Words are the upper-cased parts of a name split on punctuation and camelCase boundaries.
_PASSWORD_STEMS = ("PASSWORD", "PASSWD", "PASSPHRASE")  # also inside PGPASSWORD, DBPASSWD
_PASSWORD_LAST_WORDS = frozenset({"PASS", "PWD"})  # DB_PASS, MYSQL_PWD; not PWD alone (cwd)
_KEY_COMPOUNDS = frozenset({"APIKEY", "PRIVATEKEY", "ACCOUNTKEY"})
_KEY_PAIRS = frozenset({("API", "KEY"), ("PRIVATE", "KEY"), ("ACCOUNT", "KEY")})
_STORAGE_WORDS = frozenset(
    {"S3", "MINIO", "OSS", "COS", "OBS", "GCS", "BOS", "KS3", "R2", "B2", "BLOB", "BUCKET"}
    | {"STORAGE", "BOTO", "AZURE", "CEPH", "SWIFT"}
)
# A name whose last word is one of these points at a secret (or describes one) instead of holding
# it: PASSWORD_FILE, --token-path, secretRef, SECRET_NAME, MAX_TOKEN_LENGTH, --password-stdin.
_POINTER_LAST_WORDS = frozenset(
    {"FILE", "FILES", "PATH", "PATHS", "DIR", "DIRS", "DIRECTORY", "FOLDER", "LOCATION"}
    | {"REF", "REFS", "NAME", "NAMES", "ID", "IDS", "URL", "URI", "ENDPOINT", "HOST", "PORT"}
    | {"TYPE", "KIND", "LENGTH", "LEN", "SIZE", "COUNT", "NUM", "LIMIT", "MAX", "MIN", "TTL"}
    | {"EXPIRY", "EXPIRES", "EXPIRATION", "TIMEOUT", "MODE", "POLICY", "PROMPT", "FORMAT"}
    | {"ENABLED", "ENABLE", "DISABLED", "DISABLE", "REQUIRED", "HEADER", "FIELD", "STDIN"}
    | {"ENV", "VAR", "VARIABLE", "CMD", "COMMAND", "HINT", "LABEL", "PROVIDER", "VERSION"}
    | {"REGEX", "PATTERN", "MANAGER", "STORE", "BACKEND", "SOURCE", "KEYRING", "HELPER"}
)

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL_WORDS = re.compile(r"[A-Z0-9]+(?![a-z])|[A-Z]?[a-z0-9]+")


def _name_words(name: str) -> list[str]:
    words: list[str] = []
    for part in _WORD_SPLIT.split(name):
        words.extend(word.upper() for word in _CAMEL_WORDS.findall(part))
    return words


def _is_secret_word(word: str) -> bool:
    """SECRET, CLIENTSECRET, SECRETKEY — but not SECRETARY."""
    return word == "SECRET" or word.endswith("SECRET") or word.startswith("SECRETKEY")


def _is_token_word(word: str) -> bool:
    """TOKEN, HFTOKEN, ACCESSTOKEN — but not TOKENS or TOKENIZER."""
    return word.endswith("TOKEN")


def classify_name(name: str) -> SecretKind | None:
    """The kind of secret a variable/key/flag of this name would hold, or None.

    ``GENERIC_TOKEN`` means "only a long, high-entropy literal is a secret"; every other kind
    means "any literal is a secret".
    """
    words = _name_words(name)
    if not words or words[-1] in _POINTER_LAST_WORDS:
        return None
    wordset = set(words)
    pairs = set(pairwise(words))
    has_secret = any(_is_secret_word(word) for word in words)
    if has_secret and "AWS" in wordset:
        return SecretKind.AWS_SECRET_ACCESS_KEY
    if has_secret and wordset & _STORAGE_WORDS:
        return SecretKind.OBJECT_STORAGE_SECRET
    if ("ACCOUNT", "KEY") in pairs and wordset & _STORAGE_WORDS:
        return SecretKind.AZURE_STORAGE_KEY
    if any(stem in word for word in words for stem in _PASSWORD_STEMS):
        return SecretKind.PASSWORD
    if words[-1] in _PASSWORD_LAST_WORDS and (len(words) > 1 or words[-1] == "PASS"):
        return SecretKind.PASSWORD
    if has_secret or wordset & _KEY_COMPOUNDS or pairs & _KEY_PAIRS:
        return SecretKind.GENERIC_SECRET
    if any(_is_token_word(word) for word in words):
        return SecretKind.GENERIC_TOKEN
    return None


_PLACEHOLDERS = frozenset(
    {"redacted", "[redacted]", "(redacted)", "none", "null", "nil", "~", "-", "...", "…"}
    | {"true", "false", "yes", "no", "on", "off", "|", ">", "|-", ">-", "|+", ">+"}
)
_ABSOLUTE_PATH = re.compile(r"~?/[A-Za-z0-9._/@+-]*")
# Code, not a literal: ``os.getenv("X")``, ``os.environ["X"]``, ``args.password``.
_CALL_OR_INDEX = re.compile(r"[A-Za-z_][\w.]*\s*[(\[]")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def _is_reference_or_placeholder(value: str) -> bool:
    """True when ``value`` is not itself a secret: a reference, a path, code or a placeholder."""
    v = value.strip()
    if not v:
        return True
    if v[0] in "$`" or v.startswith(("{{", "%(")):
        return True
    if v.startswith("<") and v.endswith(">"):
        return True
    lowered = v.lower()
    if lowered in _PLACEHOLDERS:
        return True
    if set(v) == {"*"} or (len(v) >= 3 and set(lowered) == {"x"}):
        return True
    if _ABSOLUTE_PATH.fullmatch(v):
        return True
    return bool(_DOTTED_NAME.fullmatch(v) or _CALL_OR_INDEX.match(v))


def _entropy(text: str) -> float:
    counts = Counter(text)
    total = len(text)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def _looks_high_entropy(value: str) -> bool:
    """Long, mixed and random-looking: what a generated token looks like, unlike a word."""
    if len(value) < 16 or any(c.isspace() for c in value):
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
        )
    )
    return classes >= 2 and _entropy(value) >= 3.0


def _value_is_secret(kind: SecretKind, value: str) -> bool:
    if _is_reference_or_placeholder(value):
        return False
    if kind is SecretKind.GENERIC_TOKEN:
        return _looks_high_entropy(value.strip())
    return True


_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,63}"
_VALUE = r"""(?:"(?P<dq>[^"\n]*)"|'(?P<sq>[^'\n]*)'|(?P<bare>[^\s"'`;]+))"""
_ASSIGNMENT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # NAME=value, export NAME=value, --name=value, name = "value" (not ==, !=, <=, >=)
    re.compile(rf"(?<![A-Za-z0-9_])[\"']?(?P<name>{_NAME})[\"']?[ \t]*=(?!=)[ \t]*{_VALUE}"),
    # YAML key at the start of a line (optionally a list item): name: value
    re.compile(rf"(?m)^[ \t]*(?:-[ \t]+)?(?P<name>{_NAME})[ \t]*:[ \t]+{_VALUE}"),
    # JSON or quoted YAML key anywhere: "name": value
    re.compile(rf"[\"'](?P<name>{_NAME})[\"'][ \t]*:[ \t]*{_VALUE}"),
    # YAML flow mapping: {name: value, other: value}
    re.compile(rf"[{{,][ \t]*(?P<name>{_NAME})[ \t]*:[ \t]+{_VALUE}"),
    # Command-line flag with a separate value: --password xyz
    re.compile(rf"(?<![\w-])--(?P<name>[A-Za-z0-9][A-Za-z0-9_-]{{0,63}})[ \t]+(?!-){_VALUE}"),
)


@dataclass(frozen=True, slots=True)
class _Hit:
    start: int
    end: int
    kind: SecretKind
    priority: int
    wrapping: tuple[str, ...] = ()


# Hits found only after unwrapping rank below every plain hit: a plainly written secret is reported
# as such, and an encoded run inside an already-found secret value is not reported again.
_DECODED_PRIORITY = 1_000
_JOINED_PRIORITY = 2_000


def _value_span(match: re.Match[str]) -> tuple[str, int, int] | None:
    for group in ("dq", "sq"):
        value = match.group(group)
        if value is not None:
            return value, match.start(group), match.end(group)
    bare = match.group("bare")
    if bare is None:
        return None
    # An unquoted value ends before closing punctuation: f(api_key=args.key), {password: x}
    value = bare.rstrip(",)]}")
    if not value:
        return None
    return value, match.start("bare"), match.start("bare") + len(value)


def _find_hits(text: str) -> list[_Hit]:
    hits: list[_Hit] = []
    for priority, rule in enumerate(_SHAPE_RULES):
        for match in rule.pattern.finditer(text):
            found = match.group(rule.group)
            if rule.accept is not None and not rule.accept(found):
                continue
            hits.append(_Hit(match.start(rule.group), match.end(rule.group), rule.kind, priority))
    base = len(_SHAPE_RULES)
    for offset, pattern in enumerate(_ASSIGNMENT_PATTERNS):
        for match in pattern.finditer(text):
            kind = classify_name(match.group("name"))
            if kind is None:
                continue
            span = _value_span(match)
            if span is None or not _value_is_secret(kind, span[0]):
                continue
            hits.append(_Hit(span[1], max(span[2], span[1] + 1), kind, base + offset))
    return hits


def _select(hits: list[_Hit]) -> list[_Hit]:
    """Keep the highest-priority hit of every group of overlapping hits, in text order.

    Kept hits never overlap, so a candidate only needs checking against its two neighbours in
    start order: O(n log n), which matters for documents made of thousands of assignments.
    """
    starts: list[int] = []
    kept: list[_Hit] = []
    for hit in sorted(hits, key=lambda h: (h.priority, h.start)):
        at = bisect.bisect_left(starts, hit.start)
        if at > 0 and kept[at - 1].end > hit.start:
            continue
        if at < len(kept) and kept[at].start < hit.end:
            continue
        starts.insert(at, hit.start)
        kept.insert(at, hit)
    return kept


def _unwrapped_hits(text: str, depth: int, budget: Budget) -> list[_Hit]:
    """Hits in ``text`` as written, inside its encoded runs and across the breaks that split values.

    A secret inside an encoded run is reported at the run; one that a join revealed, at its start in
    the original text, and only when it spans the join (otherwise it was judged as written).
    """
    hits = _find_hits(text)
    if depth >= MAX_DEPTH:
        return hits
    for run in encoded_runs(text, budget):
        for inner in _select(_unwrapped_hits(run.decoded, depth + 1, budget)):
            hits.append(
                _Hit(
                    run.start,
                    run.end,
                    inner.kind,
                    _DECODED_PRIORITY + inner.priority % _DECODED_PRIORITY,
                    (run.encoding, *inner.wrapping),
                )
            )
    joined = join_split_lines(text)
    if joined is not None:
        for hit in _unwrapped_hits(joined.text, depth + 1, budget):
            if not joined.spans_join(hit.start, hit.end):
                continue
            start, end = joined.original(hit.start), joined.original(hit.end - 1) + 1
            wrapping = hit.wrapping if SPLIT in hit.wrapping else (SPLIT, *hit.wrapping)
            hits.append(
                _Hit(start, end, hit.kind, _JOINED_PRIORITY + hit.priority % _DECODED_PRIORITY, wrapping)
            )
    return hits


def scan_text(text: str, field: str) -> list[SecretFinding]:
    """Every secret in ``text``, in text order; ``field`` is copied into each finding.

    Besides the text as written, its base64, hex and URL-encoded runs are decoded and scanned, and
    values split across lines are joined (:mod:`rlark_secretscan.unwrap`; bounded in size and depth).
    """
    if not text:
        return []
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    findings: list[SecretFinding] = []
    for hit in _select(_unwrapped_hits(text, 0, Budget())):
        line_index = bisect.bisect_right(line_starts, hit.start) - 1
        findings.append(
            SecretFinding(
                kind=hit.kind,
                field=field,
                line=line_index + 1,
                column=hit.start - line_starts[line_index] + 1,
                wrapping=hit.wrapping,
                span=(hit.start, hit.end),
            )
        )
    return findings


def scan_assignment(name: str, value: str, field: str) -> list[SecretFinding]:
    """Judge one ``name = value`` pair (an env entry, a mapping key) by its name and value.

    A secret-looking name with a literal value is one finding at line 1, column 1 of the value;
    the value's own content is also scanned, and specific token shapes take precedence.
    """
    findings = scan_text(value, field)
    kind = classify_name(name)
    if kind is None or not _value_is_secret(kind, value):
        return findings
    if any(f.line == 1 for f in findings):
        return findings
    return [SecretFinding(kind, field, 1, 1, span=(0, len(value))), *findings]


def scan_mapping(env: Mapping[str, str], field_prefix: str) -> list[SecretFinding]:
    """Scan every entry of an env-like mapping; fields are ``<field_prefix>.<NAME>``."""
    findings: list[SecretFinding] = []
    for name, value in env.items():
        findings.extend(scan_assignment(name, value, f"{field_prefix}.{name}"))
    return findings
