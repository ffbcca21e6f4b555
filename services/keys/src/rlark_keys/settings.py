"""Settings of the keys service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from rlark_platform.settings import ServiceSettings

from rlark_keys.domain.secrets import Keyring


class KeysSettings(ServiceSettings):
    service_name: str = "keys"
    http_port: int = Field(default=8102, ge=0, le=65535)
    secrets_keyring: SecretStr = Field(
        default=SecretStr(""),
        description="The operator's key-encryption keys for secrets: id:base64(32 bytes),... — the first seals, "
        "all open (ADR 0025). Empty: one key derived from the internal secret (make run; not for a lab)",
    )

    def keyring(self) -> Keyring:
        """The keyring secrets are sealed with (raises ``SecretError`` naming the setting when it is wrong)."""
        configured = self.secrets_keyring.get_secret_value()
        if configured:
            return Keyring.parse(configured)
        return Keyring.derived(self.internal_secret.get_secret_value())
