"""Whether an agent token still speaks for its cluster: genuine and unexpired, and issued under the
cluster's current credential, as the inventory says now.

Role: a token is signed for a period (the inventory's ``agent_token_ttl_s``). Rotating a compromised
host's credential, or deleting its cluster, must end that host's access at once, not when its last token
expires: the token names the credential rotation it was issued under, and the gateway compares it with the
cluster's ``credential_rotated_at`` on every agent connection (and periodically on the long-lived control
link). The inventory is asked as a plain signed user: a cluster's detail is visible to every user.
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

from rlark_platform.identity import Caller, IdentityError, Role, agent_token_claims

from rlark_gateway.domain.relay import RelayRefused
from rlark_gateway.upstream_get import signed_get, unavailable

LOOKUP_CALLER = Caller("rlark-gateway", Role.USER)


async def agent_cluster(inventory_url: str, secret: str, token: str, *, timeout_s: float = 10.0) -> str:
    """The cluster ``token`` speaks for; ``RelayRefused`` 401 when it is forged or expired, its cluster was
    deleted, or its credential was rotated since it was issued; 503 when the inventory cannot be asked."""
    try:
        claims = agent_token_claims(secret, token)
    except IdentityError:
        raise RelayRefused(401, "invalid_agent_token", "the agent token is forged or expired") from None
    rotated_at = await credential_rotated_at(inventory_url, secret, claims.cluster, timeout_s=timeout_s)
    if rotated_at is None:
        raise RelayRefused(401, "invalid_agent_token", f"cluster {claims.cluster} no longer exists")
    if not claims.issued_under(rotated_at):
        raise RelayRefused(
            401,
            "invalid_agent_token",
            f"cluster {claims.cluster}'s agent credential was rotated after this token was issued: "
            "the agent must log in with its current credential",
        )
    return claims.cluster


async def credential_rotated_at(
    inventory_url: str, secret: str, cluster: str, *, timeout_s: float = 10.0
) -> datetime | None:
    """When ``cluster``'s agent credential was last set, or None when the cluster does not exist."""
    target = f"/api/v1/clusters/{quote(cluster, safe='')}"
    response = await signed_get(
        "inventory", inventory_url, secret, LOOKUP_CALLER, target, timeout_s=timeout_s
    )
    if response.status_code == 404:
        return None
    try:
        return datetime.fromisoformat(str(response.json()["credential_rotated_at"]))
    except (ValueError, KeyError, TypeError):
        raise unavailable(
            "inventory", "the inventory's cluster detail has no credential_rotated_at"
        ) from None
