"""Fixtures for the keys domain tests: real keys made by ssh-keygen, in a temporary folder."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from keys_sshkit import GeneratedKey, ssh_keygen_fingerprint


@pytest.fixture(scope="session")
def make_key(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., GeneratedKey]:
    """Generate (once per arguments) a key with ``ssh-keygen -t ... -N '' -f``."""
    directory = tmp_path_factory.mktemp("sshkeys")
    cache: dict[tuple[str, ...], GeneratedKey] = {}

    def make(
        key_type: str, bits: int | None = None, comment: str = "rlark-test", *extra: str
    ) -> GeneratedKey:
        cache_key = (key_type, str(bits), comment, *extra)
        if cache_key not in cache:
            path = directory / f"key{len(cache)}"
            args = ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", comment, "-f", str(path)]
            if bits is not None:
                args += ["-b", str(bits)]
            subprocess.run([*args, *extra], check=True, capture_output=True)
            pub = path.with_name(path.name + ".pub")
            cache[cache_key] = GeneratedKey(
                private_path=path,
                public_text=pub.read_text(),
                keygen_line=ssh_keygen_fingerprint(pub),
            )
        return cache[cache_key]

    return make


@pytest.fixture
def write_pub(tmp_path: Path) -> Callable[[str], Path]:
    """Write a public key line to a .pub file, so ssh-keygen can fingerprint it."""

    def write(text: str) -> Path:
        path = tmp_path / f"hand{len(list(tmp_path.iterdir()))}.pub"
        path.write_text(text)
        return path

    return write
