"""Agent credentials: a random secret shown once, stored only as its SHA-256.

A password hash (scrypt, argon2) is for low-entropy secrets people choose. This credential is 256 random
bits from ``secrets``, so brute-forcing a SHA-256 of it is as hopeless as guessing it, and a fast hash
lets the session endpoint find the cluster by an indexed lookup instead of trying every cluster's salt.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

PREFIX = "rlark-agent-"
_RANDOM_BYTES = 32


def new_credential() -> str:
    """A fresh credential, ``rlark-agent-<43 url-safe characters>``."""
    return PREFIX + secrets.token_urlsafe(_RANDOM_BYTES)


def hash_credential(credential: str) -> bytes:
    return hashlib.sha256(credential.encode()).digest()


def fingerprint(credential_hash: bytes) -> str:
    """A short, loggable name of a credential: a prefix of its hash (reveals nothing of the secret)."""
    return "sha256:" + credential_hash.hex()[:12]


def kafka_epoch(credential_hash: bytes) -> str:
    """The epoch an agent's Kafka password is derived for (ADR 0004): the stored hash, which changes on
    every rotation. Public, like the hash; the password also needs the internal secret."""
    return credential_hash.hex()


def plausible(credential: str) -> bool:
    """Cheap shape check before any lookup; never a substitute for comparing hashes."""
    return credential.startswith(PREFIX) and 20 <= len(credential) <= 200


def matches(credential: str, stored_hash: bytes) -> bool:
    """Constant-time comparison of the presented credential's hash with the stored one."""
    return hmac.compare_digest(hash_credential(credential), stored_hash)
