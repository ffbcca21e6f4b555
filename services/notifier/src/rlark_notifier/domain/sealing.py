"""Endpoint secrets at rest: AES-256-GCM under a key derived from the platform's internal secret (HKDF).

A sealed secret is ``version byte || 12-byte nonce || ciphertext+tag``; the endpoint's id is the
associated data, so a sealed secret copied onto another endpoint's row does not open. Only the notifier
opens them, right before signing a request; they are never logged nor returned by the API (``has_secret``).
Rotating the internal secret makes stored secrets unreadable: endpoints then need their secret set again.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_VERSION = b"\x01"
_NONCE_BYTES = 12


class SealError(Exception):
    """A sealed secret could not be opened (another key, another endpoint, or damaged)."""


class SecretBox:
    def __init__(self, internal_secret: str) -> None:
        if not internal_secret:
            raise ValueError("internal_secret: needed to encrypt endpoint secrets (RLARK_INTERNAL_SECRET)")
        key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=b"rlark-notifier", info=b"endpoint-secret-v1"
        ).derive(internal_secret.encode())
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "SecretBox(<key>)"

    def seal(self, plaintext: str, endpoint_id: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext.encode(), endpoint_id.encode())

    def open(self, sealed: bytes, endpoint_id: str) -> str:
        if not sealed.startswith(_VERSION) or len(sealed) < 1 + _NONCE_BYTES + 16:
            raise SealError("not a sealed secret of this version")
        nonce, ciphertext = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, ciphertext, endpoint_id.encode()).decode()
        except InvalidTag:
            raise SealError("the secret does not open with this platform's key") from None
