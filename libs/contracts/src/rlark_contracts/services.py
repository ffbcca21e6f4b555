"""The platform's services, listed once: each one's name, Python package and the port its HTTP API listens on
unless configured (``RLARK_HTTP_PORT``), in the order a single-host run starts them (the gateway last, so
that its readiness means everything behind it answers). The tunnel-agent is not one of them: it runs per
cluster, beside the workers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    """As it names itself in logs, metrics, database (``rlark_<name>``) and its folder under ``services/``."""
    package: str
    default_port: int


SERVICES: tuple[Service, ...] = (
    Service("inventory", "rlark_inventory", 8101),
    Service("keys", "rlark_keys", 8102),
    Service("netdomain", "rlark_netdomain", 8103),
    Service("scheduler", "rlark_scheduler", 8104),
    Service("notifier", "rlark_notifier", 8106),
    Service("gateway", "rlark_gateway", 8080),
)

SERVICE_NAMES: tuple[str, ...] = tuple(service.name for service in SERVICES)
