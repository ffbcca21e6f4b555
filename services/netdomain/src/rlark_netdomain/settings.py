"""Settings of the netdomain service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class NetdomainSettings(ServiceSettings):
    service_name: str = "netdomain"
    http_port: int = Field(default=8103, ge=0, le=65535)
    netdomain_relay_after_s: float = Field(
        default=20.0,
        gt=0,
        description="A direct tunnel link reported down (with an error) this long is relayed through a "
        "third cluster of the domain whose links to both ends are up. Keep it well below the scheduler's "
        "RLARK_TUNNEL_GRACE_S, or jobs fail before their pair is relayed.",
    )
    netdomain_relay_retry_s: float = Field(
        default=600.0,
        gt=0,
        description="A relayed pair tries its direct link again this long after it was relayed (and is "
        "relayed again when that still fails).",
    )
    netdomain_relay_check_s: float = Field(
        default=2.0, gt=0, description="How often the worker re-evaluates relays of domains with a down link."
    )
