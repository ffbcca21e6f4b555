"""Named secrets: their names, their values' limits, and envelope encryption at rest (ADR 0025). Pure.

Each secret value is sealed with a data key of its own (AES-256-GCM, a fresh 96-bit nonce) and that data key
is wrapped with the operator's key-encryption key (AES-256-GCM again). The row keeps only the wrapped data key,
the id of the key that wrapped it, the nonces and the ciphertext. Both seals are bound to where the row
belongs (``aad``: scope, owner, name and version), so a ciphertext moved to another secret's row, or an old
version replayed as a new one, does not open.

The operator holds the key-encryption keys (``RLARK_SECRETS_KEYRING``: ``id:base64,...``, the first one seals;
every one listed opens). Rotation: put a new key first, run ``python -m rlark_keys rewrap`` (every data key is
wrapped again under the first key; values are never decrypted for it), then drop the old key. Without a
keyring a key is derived from the internal secret (id ``internal-v1``): fine for ``make run``, not for a lab.

Values never appear in an error, a log line or a repr: ``SecretValue`` hides its text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from rlark_contracts.messages import Text, text
from rlark_contracts.secrets import SECRET_NAME

NAME_PATTERN = SECRET_NAME
"""A secret's name: what jobs reference it by (also a file name in the worker and a Kubernetes Secret key)."""
MAX_VALUE_BYTES = 64 * 1024
"""A secret's value is a token, a key pair or a small credentials file, never a data set."""
DERIVED_KEY_ID = "internal-v1"
KEY_BYTES = 32
NONCE_BYTES = 12


class Scope(StrEnum):
    USER = "user"
    PROJECT = "project"


class SecretError(ValueError):
    """A refused name, value or keyring, with a stable code, a catalogue sentence and the field; never quotes
    a value."""

    def __init__(self, code: str, said: Text, field: str) -> None:
        super().__init__(str(said))
        self.code, self.text, self.field = code, said, field


@dataclass(frozen=True, slots=True)
class SecretValue:
    """A secret's plain value; its text never shows in a repr, a log or an error."""

    data: bytes = field(repr=False)

    def __repr__(self) -> str:
        return "SecretValue(***)"

    __str__ = __repr__

    def text(self) -> str:
        return self.data.decode("utf-8")


def validate_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise SecretError("invalid_secret_name", text("invalid_secret_name"), "name")
    return name


def validate_value(value: str) -> SecretValue:
    data = value.encode("utf-8")
    if not data:
        raise SecretError("invalid_secret_value", text("invalid_secret_value.empty"), "value")
    if len(data) > MAX_VALUE_BYTES:
        raise SecretError(
            "invalid_secret_value", text("invalid_secret_value.too_long", limit=MAX_VALUE_BYTES), "value"
        )
    if "\0" in value:
        raise SecretError("invalid_secret_value", text("invalid_secret_value.nul"), "value")
    return SecretValue(data)


@dataclass(frozen=True, slots=True)
class Keyring:
    """The operator's key-encryption keys by id; ``active`` seals, all open."""

    keys: dict[str, bytes] = field(repr=False)
    active: str

    def __repr__(self) -> str:
        return f"Keyring(active={self.active!r}, ids={sorted(self.keys)!r})"

    @classmethod
    def parse(cls, setting: str) -> Keyring:
        """``id:base64(32 bytes)`` entries, comma-separated; the first is active."""
        keys: dict[str, bytes] = {}
        active = ""
        for entry in (part.strip() for part in setting.split(",")):
            if not entry:
                continue
            key_id, sep, encoded = entry.partition(":")
            if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key_id):
                raise SecretError("invalid_keyring", text("invalid_keyring.entry"), "keyring")
            try:
                key = base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise SecretError(
                    "invalid_keyring", text("invalid_keyring.key", id=key_id), "keyring"
                ) from None
            if len(key) != KEY_BYTES:
                raise SecretError("invalid_keyring", text("invalid_keyring.key", id=key_id), "keyring")
            if key_id in keys:
                raise SecretError("invalid_keyring", text("invalid_keyring.twice", id=key_id), "keyring")
            keys[key_id] = key
            active = active or key_id
        if not keys:
            raise SecretError("invalid_keyring", text("invalid_keyring.empty"), "keyring")
        return cls(keys, active)

    @classmethod
    def derived(cls, internal_secret: str) -> Keyring:
        """The fallback keyring: one key derived from the internal secret."""
        if not internal_secret:
            raise SecretError("invalid_keyring", text("invalid_keyring.empty"), "keyring")
        key = hmac.new(
            internal_secret.encode(), b"rlark secrets key-encryption key v1", hashlib.sha256
        ).digest()
        return cls({DERIVED_KEY_ID: key}, DERIVED_KEY_ID)


@dataclass(frozen=True, slots=True)
class Sealed:
    """What a row keeps of a value."""

    key_id: str
    wrapped_key: bytes
    key_nonce: bytes
    nonce: bytes
    ciphertext: bytes


def aad(scope: Scope, owner: str, name: str, version: int) -> bytes:
    """Where a sealed value belongs: its row's identity and version."""
    return f"rlark-secret\n{scope.value}\n{owner}\n{name}\n{version}".encode()


def seal(keyring: Keyring, value: SecretValue, where: bytes) -> Sealed:
    data_key = AESGCM.generate_key(bit_length=256)
    nonce, key_nonce = os.urandom(NONCE_BYTES), os.urandom(NONCE_BYTES)
    ciphertext = AESGCM(data_key).encrypt(nonce, value.data, where)
    wrapped = AESGCM(keyring.keys[keyring.active]).encrypt(key_nonce, data_key, where)
    return Sealed(keyring.active, wrapped, key_nonce, nonce, ciphertext)


class SealBroken(Exception):
    """A value that does not open: its key is not in the keyring, or the row was altered or moved."""


def _data_key(keyring: Keyring, sealed: Sealed, where: bytes) -> bytes:
    kek = keyring.keys.get(sealed.key_id)
    if kek is None:
        raise SealBroken(f"key {sealed.key_id} is not in the keyring")
    try:
        return AESGCM(kek).decrypt(sealed.key_nonce, sealed.wrapped_key, where)
    except InvalidTag:
        raise SealBroken("the data key does not open under its key (altered or moved row)") from None


def open_sealed(keyring: Keyring, sealed: Sealed, where: bytes) -> SecretValue:
    data_key = _data_key(keyring, sealed, where)
    try:
        return SecretValue(AESGCM(data_key).decrypt(sealed.nonce, sealed.ciphertext, where))
    except InvalidTag:
        raise SealBroken("the value does not open under its data key (altered or moved row)") from None


def rewrap(keyring: Keyring, sealed: Sealed, where: bytes) -> Sealed:
    """The same sealed value with its data key wrapped under the active key (the value stays sealed)."""
    if sealed.key_id == keyring.active:
        return sealed
    data_key = _data_key(keyring, sealed, where)
    key_nonce = os.urandom(NONCE_BYTES)
    wrapped = AESGCM(keyring.keys[keyring.active]).encrypt(key_nonce, data_key, where)
    return Sealed(keyring.active, wrapped, key_nonce, sealed.nonce, sealed.ciphertext)
