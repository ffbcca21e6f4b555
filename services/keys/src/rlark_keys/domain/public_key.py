"""Parsing and validation of users' OpenSSH public keys.

Role: turn the text a user pasted into a ``PublicKey`` value (type, canonical blob, comment, size,
``ssh-keygen -l`` fingerprint) or refuse it with a ``KeyValidationError`` whose code says why.

Contract:
- Exactly one one-line OpenSSH public key (``<type> <base64> [comment]``), surrounding whitespace
  allowed. Accepted types: ed25519, ECDSA on nistp256/384/521, the two FIDO ``sk-`` types and RSA
  of at least ``MIN_RSA_BITS`` bits.
- The base64 blob is decoded and parsed as SSH wire data; its embedded type must equal the declared
  one and its structure must be exactly what OpenSSH writes (no trailing bytes, right point and key
  lengths, ECDSA points on their curve).
- Anything that looks like a private key is refused first, with a message that quotes nothing of
  the input: a pasted private key must never travel further (logs, error bodies, events).
- authorized_keys options are refused, because the platform writes ``authorized_keys`` itself and
  a user-chosen ``command=`` or ``from=`` would silently change what the key can do.
- A comment holding a secret (what :func:`rlark_secretscan.scan_text` finds, wrapped or not) is
  refused (``secret_in_comment``, field ``public_key.comment``): comments are stored and shown.

Pure: no I/O. ``cryptography`` is used only to check that ECDSA points lie on their curve.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NoReturn

from cryptography.hazmat.primitives.asymmetric import ec
from rlark_contracts import messages
from rlark_contracts.messages import Text
from rlark_secretscan import scan_text

from rlark_keys.domain.errors import KeyErrorCode, KeyValidationError
from rlark_keys.domain.sshwire import WireFormatError, WireReader

#: Smallest RSA modulus accepted; NIST SP 800-57 rates 3072 bits as 128-bit security.
MIN_RSA_BITS: Final = 3072
#: Largest RSA modulus OpenSSH accepts.
MAX_RSA_BITS: Final = 16384
#: Longest input considered at all; a 16384-bit RSA key line is under 3 KiB.
MAX_INPUT_CHARS: Final = 16 * 1024
MAX_COMMENT_CHARS: Final = 1024
#: The field named when the comment is refused: the comment part of the ``public_key`` request field.
COMMENT_FIELD: Final = "public_key.comment"


class KeyType(StrEnum):
    """Key types RLark accepts, spelled as in the first field of a ``.pub`` file."""

    ED25519 = "ssh-ed25519"
    ECDSA_NISTP256 = "ecdsa-sha2-nistp256"
    ECDSA_NISTP384 = "ecdsa-sha2-nistp384"
    ECDSA_NISTP521 = "ecdsa-sha2-nistp521"
    SK_ED25519 = "sk-ssh-ed25519@openssh.com"
    SK_ECDSA_NISTP256 = "sk-ecdsa-sha2-nistp256@openssh.com"
    RSA = "ssh-rsa"


_SUPPORTED_NAMES: Final = frozenset(t.value for t in KeyType)

#: The type label ``ssh-keygen -l`` prints in parentheses.
_DISPLAY_TYPE: Final[dict[KeyType, str]] = {
    KeyType.ED25519: "ED25519",
    KeyType.ECDSA_NISTP256: "ECDSA",
    KeyType.ECDSA_NISTP384: "ECDSA",
    KeyType.ECDSA_NISTP521: "ECDSA",
    KeyType.SK_ED25519: "ED25519-SK",
    KeyType.SK_ECDSA_NISTP256: "ECDSA-SK",
    KeyType.RSA: "RSA",
}


@dataclass(frozen=True, slots=True)
class _Curve:
    name: bytes
    curve: ec.EllipticCurve
    point_len: int
    bits: int


_CURVES: Final[dict[KeyType, _Curve]] = {
    KeyType.ECDSA_NISTP256: _Curve(b"nistp256", ec.SECP256R1(), 65, 256),
    KeyType.ECDSA_NISTP384: _Curve(b"nistp384", ec.SECP384R1(), 97, 384),
    KeyType.ECDSA_NISTP521: _Curve(b"nistp521", ec.SECP521R1(), 133, 521),
    KeyType.SK_ECDSA_NISTP256: _Curve(b"nistp256", ec.SECP256R1(), 65, 256),
}

_ED25519_KEY_LEN: Final = 32
_CERT_SUFFIX: Final = "-cert-v01@openssh.com"

#: Known names we refuse, with the reason shown to the user.
#: Type names that are not (or no longer) accepted, and the message key saying why.
_UNSUPPORTED_REASONS: Final[dict[str, str]] = {
    "ssh-dss": "unsupported_key_type.dsa",
    "rsa-sha2-256": "unsupported_key_type.signature_algorithm",
    "rsa-sha2-512": "unsupported_key_type.signature_algorithm",
    "ssh-ed448": "unsupported_key_type.ed448",
    "ssh-xmss@openssh.com": "unsupported_key_type.xmss",
}

#: authorized_keys option keywords that take no value (see sshd(8), AUTHORIZED_KEYS FILE FORMAT).
_FLAG_OPTIONS: Final = frozenset(
    {
        "agent-forwarding",
        "cert-authority",
        "no-agent-forwarding",
        "no-port-forwarding",
        "no-pty",
        "no-user-rc",
        "no-x11-forwarding",
        "no-touch-required",
        "port-forwarding",
        "pty",
        "restrict",
        "user-rc",
        "verify-required",
        "x11-forwarding",
    }
)

_PRIVATE_KEY_PATTERNS: Final = (
    # PEM and RFC 4716 armour of any private key: RSA, EC, DSA, OPENSSH, PKCS#8 (plain and
    # ENCRYPTED), PGP, and "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----". Matching the
    # "PRIVATE KEY" + dashes tail also catches a paste that lost its BEGIN line.
    re.compile(r"PRIVATE\s+KEY(?:\s+BLOCK)?\s*-{3,}", re.IGNORECASE),
    re.compile(r"PuTTY-User-Key-File-", re.IGNORECASE),
    re.compile(r"^\s*Private-(?:Lines|MAC):", re.IGNORECASE | re.MULTILINE),
    # base64 of "openssh-key-v1\0", the start of an OpenSSH private key body without armour.
    re.compile(r"b3BlbnNzaC1rZXktdjE"),
)

_PUBLIC_ARMOUR: Final = re.compile(r"-{4,}\s*BEGIN\s+(?:SSH2\s+|RSA\s+)?PUBLIC\s+KEY\s*-{4,}", re.IGNORECASE)
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_TYPE_LIKE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]{0,63}(?:@[A-Za-z0-9.-]{1,64})?")
_BASE64_LIKE: Final = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
_KEY_LINE: Final = re.compile(r"(\S+)\s+(\S+)(?:\s+(.*))?", re.DOTALL)
_BAD_COMMENT_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A validated OpenSSH public key.

    ``blob_b64`` is the canonical base64 of the key blob (what OpenSSH would write), ``bits`` and
    ``fingerprint_sha256`` are exactly what ``ssh-keygen -l`` prints, so users can compare them
    with their own machine.
    """

    key_type: KeyType
    blob_b64: str
    comment: str
    bits: int
    fingerprint_sha256: str

    @property
    def blob(self) -> bytes:
        return base64.b64decode(self.blob_b64)

    @property
    def display_type(self) -> str:
        """Type as ``ssh-keygen -l`` shows it: ``ED25519``, ``ECDSA``, ``RSA``, ``ED25519-SK``..."""
        return _DISPLAY_TYPE[self.key_type]

    def authorized_keys_line(self) -> str:
        """The line to append to ``authorized_keys``: type, blob and comment, no options."""
        parts = [self.key_type.value, self.blob_b64]
        if self.comment:
            parts.append(self.comment)
        return " ".join(parts)

    def fingerprint_line(self) -> str:
        """The line ``ssh-keygen -l -f key.pub`` prints for this key."""
        comment = self.comment or "no comment"
        return f"{self.bits} {self.fingerprint_sha256} {comment} ({self.display_type})"


def fingerprint_sha256(blob: bytes) -> str:
    """OpenSSH SHA256 fingerprint of a key blob: ``SHA256:`` + unpadded base64 of its digest."""
    digest = hashlib.sha256(blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def looks_like_private_key(text: str) -> bool:
    """True when ``text`` holds (part of) a private key in any common format.

    Meant for callers that must keep private keys out of storage and logs (e.g. a log filter or a
    secret scanner), so it errs on the side of saying yes.
    """
    return any(pattern.search(text) for pattern in _PRIVATE_KEY_PATTERNS)


def parse_public_key(text: str) -> PublicKey:
    """Parse one OpenSSH public key line, or raise ``KeyValidationError`` saying why not.

    See the module docstring for what is accepted. The error codes are those of ``KeyErrorCode``;
    the ``field`` of every error raised here is ``public_key``.
    """
    if looks_like_private_key(text):
        raise _error(KeyErrorCode.PRIVATE_KEY_REFUSED, messages.text("private_key_refused"))
    stripped = text.strip()
    if not stripped:
        raise _error(KeyErrorCode.EMPTY_KEY, messages.text("empty_key"))
    if len(stripped) > MAX_INPUT_CHARS:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.too_long", max=MAX_INPUT_CHARS))
    if _PUBLIC_ARMOUR.search(stripped):
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.armoured"))
    lines = [line for line in _LINE_BREAK.split(stripped) if line.strip()]
    if len(lines) > 1:
        raise _error(KeyErrorCode.MULTIPLE_KEYS, messages.text("multiple_keys", lines=len(lines)))
    return _parse_line(lines[0].strip())


def _parse_line(line: str) -> PublicKey:
    tokens = line.split()
    start = _first_key_start(tokens)
    if start is None:
        _raise_unrecognised(tokens)
    if start > 0:
        raise _error(KeyErrorCode.OPTIONS_NOT_ALLOWED, messages.text("options_not_allowed"))
    for index in range(2, len(tokens) - 1):
        if _is_key_start(tokens, index, strong=True):
            raise _error(KeyErrorCode.MULTIPLE_KEYS, messages.text("multiple_keys.one_line"))

    declared = tokens[0]
    key_type = _supported_type(declared)
    match = _KEY_LINE.fullmatch(line)
    if match is None:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.no_data", type=key_type.value))
    blob = _decode_blob(match.group(2))
    bits = _parse_blob(key_type, blob)
    comment = _checked_comment((match.group(3) or "").strip())
    return PublicKey(
        key_type=key_type,
        blob_b64=base64.b64encode(blob).decode("ascii"),
        comment=comment,
        bits=bits,
        fingerprint_sha256=fingerprint_sha256(blob),
    )


def _first_key_start(tokens: list[str]) -> int | None:
    for index in range(len(tokens)):
        if _is_key_start(tokens, index, strong=False):
            return index
    return None


def _is_key_start(tokens: list[str], index: int, *, strong: bool) -> bool:
    """Does a key (``<type> <blob>``) start at ``tokens[index]``?

    A known type name suffices for the first key; anything else (an unknown name, or a second key
    inside what would be the comment) must be followed by a blob that declares that same type, so
    a comment such as "my ssh-rsa laptop" is not mistaken for a key.
    """
    name = tokens[index]
    if not strong and _is_known_type_name(name):
        return True
    if not _TYPE_LIKE.fullmatch(name) or index + 1 >= len(tokens):
        return False
    return _embedded_type(tokens[index + 1]) == name


def _is_known_type_name(name: str) -> bool:
    return (
        name in _SUPPORTED_NAMES
        or name in _UNSUPPORTED_REASONS
        or name.endswith(_CERT_SUFFIX)
        or name.startswith("x509v3-")
    )


def _embedded_type(token: str) -> str | None:
    """The type string a base64 blob declares, or None when it is not a decodable blob."""
    if not _BASE64_LIKE.fullmatch(token):
        return None
    try:
        return WireReader(base64.b64decode(token, validate=True)).read_string().decode("ascii")
    except (binascii.Error, WireFormatError, UnicodeDecodeError):
        return None


def _raise_unrecognised(tokens: list[str]) -> NoReturn:
    first = tokens[0]
    if "=" in first or "," in first or '"' in first or first.lower() in _FLAG_OPTIONS:
        raise _error(KeyErrorCode.OPTIONS_NOT_ALLOWED, messages.text("options_not_allowed.leading"))
    if len(tokens) >= 2 and _TYPE_LIKE.fullmatch(first) and _BASE64_LIKE.fullmatch(tokens[1]):
        raise _unsupported(first)
    raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.not_openssh"))


def _supported_type(name: str) -> KeyType:
    try:
        return KeyType(name)
    except ValueError:
        raise _unsupported(name) from None


def _unsupported(name: str) -> KeyValidationError:
    supported = ", ".join(t.value for t in KeyType)
    shown = name if _TYPE_LIKE.fullmatch(name) else "this"
    if name in _UNSUPPORTED_REASONS:
        message = messages.text(_UNSUPPORTED_REASONS[name], type=shown)
    elif name.endswith(_CERT_SUFFIX):
        message = messages.text("unsupported_key_type.certificate", type=shown)
    else:
        message = messages.text("unsupported_key_type", type=shown, supported=supported)
    return _error(KeyErrorCode.UNSUPPORTED_KEY_TYPE, message)


def _decode_blob(token: str) -> bytes:
    try:
        blob = base64.b64decode(token, validate=True)
    except binascii.Error:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.not_base64")) from None
    if not blob:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.data_empty"))
    return blob


def _parse_blob(key_type: KeyType, blob: bytes) -> int:
    """Check the blob's structure against ``key_type`` and return the key size in bits."""
    reader = WireReader(blob)
    try:
        embedded = reader.read_string()
        if embedded != key_type.value.encode("ascii"):
            raise _mismatch(key_type, embedded)
        if key_type is KeyType.RSA:
            bits = _parse_rsa(reader)
        elif key_type in _CURVES:
            bits = _parse_ecdsa(key_type, reader)
        else:
            key = reader.read_string()
            if len(key) != _ED25519_KEY_LEN:
                raise _error(
                    KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.ed25519_length", length=len(key))
                )
            bits = 256
        if key_type in (KeyType.SK_ED25519, KeyType.SK_ECDSA_NISTP256):
            _parse_sk_application(reader)
        reader.expect_end()
    except WireFormatError as exc:
        raise _malformed(str(exc)) from None
    return bits


def _parse_rsa(reader: WireReader) -> int:
    exponent = reader.read_mpint()
    modulus = reader.read_mpint()
    if exponent < 3 or exponent % 2 == 0:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.rsa_exponent"))
    if modulus % 2 == 0 or modulus <= exponent:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.rsa_modulus"))
    bits = modulus.bit_length()
    if bits < MIN_RSA_BITS:
        raise _error(
            KeyErrorCode.RSA_KEY_TOO_SHORT, messages.text("rsa_key_too_short", bits=bits, min=MIN_RSA_BITS)
        )
    if bits > MAX_RSA_BITS:
        raise _error(
            KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.rsa_too_long", max=MAX_RSA_BITS)
        )
    return bits


def _parse_ecdsa(key_type: KeyType, reader: WireReader) -> int:
    curve = _CURVES[key_type]
    name = reader.read_string()
    if name != curve.name:
        raise _error(
            KeyErrorCode.MALFORMED_KEY,
            messages.text("malformed_key.ecdsa_curve", type=key_type.value, curve=curve.name.decode()),
        )
    point = reader.read_string()
    if len(point) != curve.point_len or point[0] != 0x04:
        raise _error(
            KeyErrorCode.MALFORMED_KEY,
            messages.text(
                "malformed_key.ecdsa_point_length", curve=curve.name.decode(), length=curve.point_len
            ),
        )
    try:
        ec.EllipticCurvePublicKey.from_encoded_point(curve.curve, point)
    except ValueError:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.ecdsa_not_on_curve")) from None
    return curve.bits


def _parse_sk_application(reader: WireReader) -> None:
    application = reader.read_string()
    if not application:
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.sk_application_missing"))
    try:
        application.decode("utf-8")
    except UnicodeDecodeError:
        raise _error(
            KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.sk_application_not_text")
        ) from None


def _checked_comment(comment: str) -> str:
    if len(comment) > MAX_COMMENT_CHARS:
        raise _error(
            KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.comment_too_long", max=MAX_COMMENT_CHARS)
        )
    if any(unicodedata.category(ch) in _BAD_COMMENT_CATEGORIES for ch in comment):
        raise _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.comment_control"))
    findings = scan_text(comment, COMMENT_FIELD)
    if findings:
        raise KeyValidationError(
            KeyErrorCode.SECRET_IN_COMMENT,
            messages.text("secret_in_comment", what=findings[0].what),
            COMMENT_FIELD,
        )
    return comment


def _mismatch(key_type: KeyType, embedded: bytes) -> KeyValidationError:
    actual = embedded.decode("ascii", errors="replace")
    if not _TYPE_LIKE.fullmatch(actual):
        return _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key.no_type"))
    return _error(
        KeyErrorCode.KEY_TYPE_MISMATCH, messages.text("key_type_mismatch", type=key_type.value, actual=actual)
    )


def _malformed(detail: str) -> KeyValidationError:
    return _error(KeyErrorCode.MALFORMED_KEY, messages.text("malformed_key", detail=detail))


def _error(code: KeyErrorCode, message: Text) -> KeyValidationError:
    return KeyValidationError(code, message, field="public_key")
