"""Password hashing with argon2id (argon2-cffi), off the event loop.

Hashing costs tens to hundreds of milliseconds of CPU by design, so it runs in a worker thread. A login
for an unknown user still verifies against a dummy hash, so unknown users and wrong passwords take the
same time and give the same answer.
"""

from __future__ import annotations

import asyncio
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError


class Passwords:
    def __init__(self, *, time_cost: int = 3, memory_kib: int = 65536, parallelism: int = 4) -> None:
        self._hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism)
        self._dummy = self._hasher.hash(secrets.token_hex(16))

    async def hash(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        """True when ``password`` matches ``stored_hash``; None (no such user) is always False."""

        def check() -> bool:
            try:
                return self._hasher.verify(stored_hash or self._dummy, password)
            except (VerificationError, InvalidHashError):
                return False

        matched = await asyncio.to_thread(check)
        return matched and stored_hash is not None

    def needs_rehash(self, stored_hash: str) -> bool:
        """True when the hash was made with other parameters than the current ones."""
        try:
            return self._hasher.check_needs_rehash(stored_hash)
        except InvalidHashError:
            return True
