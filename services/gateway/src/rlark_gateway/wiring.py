"""The gateway's long-lived parts, built once per process by ``main.on_start`` and shared by the API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rlark_contracts import TopicNames

from rlark_gateway.domain.streams import StreamSlots
from rlark_gateway.domain.tools import UsedTickets
from rlark_gateway.handlers import Accounts
from rlark_gateway.proxy import Proxy
from rlark_gateway.relays import RelayHub
from rlark_gateway.replicas import Replicas
from rlark_gateway.settings import GatewaySettings


@dataclass
class Gateway:
    settings: GatewaySettings
    accounts: Accounts
    proxy: Proxy
    names: TopicNames
    streams: StreamSlots
    relays: RelayHub[Any] = field(default_factory=RelayHub)
    """Agents' control links and SSH relays waiting for their agent (ADR 0010)."""
    replicas: Replicas | None = None
    """Where the other replicas hold agents' links (ADR 0028); None: this process alone."""
    used_tickets: UsedTickets = field(default_factory=UsedTickets)
    """Tool tickets already exchanged on the tools origin (ADR 0012)."""
    background: list[asyncio.Task[None]] = field(default_factory=list)
    """The process's own tasks (the credential cache's listener), cancelled on stop."""
