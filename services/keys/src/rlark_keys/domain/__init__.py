"""Pure domain logic of the keys service: SSH public key parsing, validation and fingerprints.

No I/O here; the repository stores what ``parse_public_key`` returns and the handlers map
``KeyValidationError`` (code, message, field) onto 4xx responses.
"""

from rlark_keys.domain.errors import KeyErrorCode, KeyValidationError
from rlark_keys.domain.key_name import MAX_KEY_NAME_CHARS, validate_key_name
from rlark_keys.domain.public_key import (
    MIN_RSA_BITS,
    KeyType,
    PublicKey,
    fingerprint_sha256,
    looks_like_private_key,
    parse_public_key,
)

__all__ = [
    "MAX_KEY_NAME_CHARS",
    "MIN_RSA_BITS",
    "KeyErrorCode",
    "KeyType",
    "KeyValidationError",
    "PublicKey",
    "fingerprint_sha256",
    "looks_like_private_key",
    "parse_public_key",
    "validate_key_name",
]
