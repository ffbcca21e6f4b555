"""Event use case of link states: an agent reported the state of one link of a domain
(``agent.tunnel.state_changed.v1``) → the ``tunnel_states`` table, shown with the domain and read by
the relay check. Writes no event and takes no lock: each report is one conditional upsert.
"""

from __future__ import annotations

from datetime import datetime

from rlark_contracts.events.agent import LINK_CLOSED, TunnelStateChanged
from rlark_platform.db.pool import Connection
from rlark_platform.messaging import PoisonMessage

from rlark_netdomain.repository import tunnel_states
from rlark_netdomain.repository.tunnel_states import TunnelLinkState


async def apply_tunnel_state(conn: Connection, payload: TunnelStateChanged, now: datetime) -> bool:
    """Keep an agent's report on one link of a domain, for ``GET /api/v1/domains/{name}``; a ``closed``
    link is forgotten. The report's time is the agent's, capped at ours; reports on unknown domains
    are dropped."""
    if not payload.domain or not payload.peer or payload.peer == payload.cluster:
        raise PoisonMessage("a tunnel state report names a domain and a peer other than its cluster")
    at = min(payload.at, now)
    if payload.state == LINK_CLOSED:
        return await tunnel_states.delete_tunnel_state(
            conn, payload.domain, payload.cluster, payload.peer, at
        )
    return await tunnel_states.upsert_tunnel_state(
        conn,
        payload.domain,
        TunnelLinkState(
            cluster=payload.cluster,
            peer=payload.peer,
            state="up" if payload.state == "up" else "down",
            since=at,
            rtt_ms=payload.rtt_ms,
            bytes_sent=max(payload.bytes_sent, 0),
            bytes_received=max(payload.bytes_received, 0),
            last_error=payload.last_error[:500],
            reported_at=at,
        ),
    )
