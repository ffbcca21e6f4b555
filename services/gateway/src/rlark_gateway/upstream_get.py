"""One GET the gateway itself makes to a service as a signed caller (not a proxied request): the job an
SSH relay is for, the credential an agent token must match. An unreachable service or an unexpected
status is a 503 naming the service; what a 200 or a 404 means is the caller's."""

from __future__ import annotations

import httpx
from rlark_platform.identity import Caller, SignedRequest, sign_caller

from rlark_gateway.domain.relay import RelayRefused


def unavailable(service: str, detail: str = "") -> RelayRefused:
    message = detail or f"the {service} service is unavailable; try again later"
    return RelayRefused(503, "service_unavailable", message, service)


async def signed_get(
    service: str, base_url: str, secret: str, caller: Caller, target: str, *, timeout_s: float = 10.0
) -> httpx.Response:
    """``GET target`` on ``service`` as ``caller``; its answer when it is 200 or 404, else ``unavailable``."""
    headers = sign_caller(secret, caller, SignedRequest(service, "GET", target))
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, trust_env=False) as client:
            response = await client.get(target, headers=headers)
    except httpx.HTTPError:
        raise unavailable(service) from None
    if response.status_code not in (200, 404):
        raise unavailable(service, f"the {service} answered HTTP {response.status_code}")
    return response
