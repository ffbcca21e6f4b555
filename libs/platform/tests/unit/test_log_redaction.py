"""Secrets and private keys never reach a log line."""

import json

import structlog
from rlark_platform.observability import configure_logging

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"


def test_secret_named_fields_and_private_key_blocks_are_redacted(capfd) -> None:  # type: ignore[no-untyped-def]
    configure_logging("test", json_output=True)
    structlog.get_logger().info(
        "oops", password="hunter2", note=f"pasted {KEY} here", key_fingerprint="SHA256:x"
    )
    line = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert line["password"] == "[redacted]"
    assert "b3BlbnNzaC1rZXktdjEAAAAA" not in line["note"]
    assert line["key_fingerprint"] == "SHA256:x"
