"""Keys of a domain's tunnels: one Ed25519 key pair per (domain, cluster).

Role: the key issued to a cluster's agent for one domain serves as that agent's SSH host key (its
peers pin the public half) and as its client key when it dials (its peers' servers accept only
that public half for that cluster's name). A leaked key therefore opens one domain between the
clusters that already share it, nothing else. Private keys are written with mode 0600 and never
logged; ``fingerprint`` gives the loggable form.
"""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh


def generate_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def public_line(key: asyncssh.SSHKey, comment: str = "") -> str:
    """The OpenSSH public key line of ``key`` (what peers pin)."""
    line = key.export_public_key("openssh").decode().strip()
    parts = line.split()[:2]
    return " ".join([*parts, comment]) if comment else " ".join(parts)


def fingerprint(key: asyncssh.SSHKey) -> str:
    return str(key.get_fingerprint("sha256"))


def write_private_key(key: asyncssh.SSHKey, path: Path) -> None:
    """Write ``key`` in OpenSSH format, readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.export_private_key("openssh"))


def read_private_key(path: Path) -> asyncssh.SSHKey:
    return asyncssh.read_private_key(str(path))
