"""The credential cache's rules on their own (``credential_cache.CredentialCache``), on a clock of the test's:
nothing kept while not listening, a lookup older than a change is not kept, entries end at the TTL or a
session's expiry, the oldest goes first when full."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rlark_gateway import credential_cache
from rlark_gateway.credential_cache import CredentialCache
from rlark_gateway.repository import PrincipalRecord

ALICE = PrincipalRecord("alice", "user", "tok1")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def listening_cache(ttl_s: float = 5.0) -> tuple[CredentialCache, Clock]:
    clock = Clock()
    cache = CredentialCache(ttl_s, clock=clock)
    cache.listening = True
    return cache, clock


def test_nothing_is_kept_while_nobody_listens() -> None:
    cache = CredentialCache(5.0)
    cache.put("d", ALICE, cache.generation)
    assert cache.get("d") is None


def test_a_lookup_that_began_before_a_change_is_not_kept() -> None:
    cache, _ = listening_cache()
    before = cache.generation
    cache.forget_all()  # a notification arrives while the lookup runs
    cache.put("d", ALICE, before)
    assert cache.get("d") is None
    cache.put("d", ALICE, cache.generation)
    assert cache.get("d") == ALICE


def test_entries_end_at_the_ttl_or_the_sessions_expiry() -> None:
    cache, clock = listening_cache(ttl_s=5.0)
    cache.put("token", ALICE, cache.generation)
    cache.put("session", ALICE, cache.generation, expires_in_s=2.0)
    cache.put("expired", ALICE, cache.generation, expires_in_s=-1.0)
    assert cache.get("expired") is None
    clock.now += 2.0
    assert cache.get("session") is None
    assert cache.get("token") == ALICE
    clock.now += 3.0
    assert cache.get("token") is None


def test_a_ttl_of_zero_keeps_nothing() -> None:
    cache, _ = listening_cache(ttl_s=0)
    cache.put("d", ALICE, cache.generation)
    assert cache.get("d") is None


def test_a_recorded_use_updates_the_kept_record() -> None:
    cache, _ = listening_cache()
    cache.put("d", ALICE, cache.generation)
    when = datetime(2026, 12, 2, tzinfo=UTC)
    cache.touched("d", when)
    kept = cache.get("d")
    assert kept is not None
    assert kept.last_used_at == when
    assert (kept.username, kept.role, kept.token_id) == ("alice", "user", "tok1")


def test_the_oldest_goes_first_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credential_cache, "MAX_ENTRIES", 3)
    cache, _ = listening_cache()
    for name in ("a", "b", "c", "d"):
        cache.put(name, ALICE, cache.generation)
    assert cache.get("a") is None
    assert [cache.get(name) for name in ("b", "c", "d")] == [ALICE] * 3
