"""Provenance checks for consumed records (ADR 0001)."""

from __future__ import annotations

from rlark_contracts import Envelope

from rlark_platform.identity import AGENT_TOKEN_HEADER, IdentityError, verify_agent_token
from rlark_platform.messaging.consumer import PoisonMessage, Verifier


def agent_report_verifier(internal_secret: str) -> Verifier:
    """Accept an agent report only with a valid agent token whose cluster is the report's ``cluster``."""

    def verify(envelope: Envelope, headers: dict[str, bytes]) -> None:
        raw = headers.get(AGENT_TOKEN_HEADER)
        if not raw:
            raise PoisonMessage(f"report has no {AGENT_TOKEN_HEADER} header")
        try:
            token_cluster = verify_agent_token(internal_secret, raw.decode())
        except (IdentityError, UnicodeDecodeError) as exc:
            raise PoisonMessage(f"agent token refused: {exc}") from None
        claimed = envelope.data.get("cluster")
        if claimed != token_cluster:
            raise PoisonMessage(f"a token of cluster {token_cluster!r} cannot report for {claimed!r}")

    return verify
