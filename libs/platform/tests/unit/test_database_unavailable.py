"""Which database failures a request answers with 503 (retry) rather than 500 (``db.errors``)."""

from __future__ import annotations

import asyncpg
import pytest
from asyncpg import exceptions as pg
from rlark_platform.db.errors import database_unavailable


@pytest.mark.parametrize(
    "exc",
    [
        pg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        pg.AdminShutdownError("terminating connection due to administrator command"),
        pg.QueryCanceledError("canceling statement due to statement timeout"),
        pg.IdleInTransactionSessionTimeoutError("terminating connection due to idle-in-transaction timeout"),
        pg.TooManyConnectionsError("sorry, too many clients already"),
        pg.CannotConnectNowError("the database system is starting up"),
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        asyncpg.InterfaceError("cannot perform operation: connection is closed"),
        asyncpg.InterfaceError("cannot call Transaction.__aexit__(): the underlying connection is closed"),
        pg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
    ],
    ids=lambda exc: type(exc).__name__,
)
def test_a_lost_or_refused_session_is_unavailable(exc: BaseException) -> None:
    assert database_unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        pg.UniqueViolationError("duplicate key value violates unique constraint"),
        pg.CharacterNotInRepertoireError("invalid byte sequence for encoding"),
        pg.UndefinedTableError('relation "nope" does not exist'),
        asyncpg.InterfaceError("the server expects 2 arguments for this query, 1 was passed"),
        pg.InternalClientError("unexpected codec state"),
        ValueError("a bug"),
        KeyError("x"),
    ],
    ids=lambda exc: type(exc).__name__ + ":" + str(exc)[:12],
)
def test_bugs_and_refused_statements_stay_errors(exc: BaseException) -> None:
    assert not database_unavailable(exc)
