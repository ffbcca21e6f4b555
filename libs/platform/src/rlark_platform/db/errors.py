"""Which database failures mean "the database is not there for this request right now" (retry), not a bug.

A request whose session was lost — PostgreSQL restarted or failed over, the session ended by an operator
or by ``idle_in_transaction_session_timeout`` (a process stalled mid-transaction past it, e.g. paused or
starved), a statement cancelled by ``statement_timeout`` under overload, no connection slot free — had
its transaction rolled back whole by the server: answering 503 (with ``Retry-After``) tells a client a
retry is safe and worth it, where a 500 says the service is broken. Anything else stays a 500.
"""

from __future__ import annotations

import asyncpg
from asyncpg import exceptions as pg

LOST_SESSION_PHRASES = ("connection is closed", "connection was closed", "another operation")
"""What asyncpg says (``InterfaceError``, ``InternalClientError``) when a session died under a caller; the
same classes also report misuse (a wrong argument count), which must stay a 500."""

_UNAVAILABLE = (
    pg.PostgresConnectionError,  # class 08: the connection failed or does not exist
    pg.OperatorInterventionError,  # class 57: shut down, terminated, cancelled (statement_timeout), starting
    pg.InsufficientResourcesError,  # class 53: no connection slot, out of memory or disk
    pg.IdleInTransactionSessionTimeoutError,
    ConnectionError,  # the server refused or reset the socket
)


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the request lost its database session or could not get one (retryable)."""
    if isinstance(exc, _UNAVAILABLE):
        return True
    if isinstance(exc, asyncpg.InterfaceError | pg.InternalClientError):
        message = str(exc)
        return any(phrase in message for phrase in LOST_SESSION_PHRASES)
    return False
