"""structlog configuration, and the secret filter every log line passes through.

JSON lines when stdout is not a terminal (or ``log_json``), readable console lines otherwise. Context is
bound per unit of work with ``structlog.contextvars`` (request id, event id, job id).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

import structlog

_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)", re.S
)
_SECRET_FIELDS = {"password", "secret", "token", "credential", "private_key", "authorization", "cookie"}


def _redact(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """Last line of defence: drop secret-named fields and private key blocks from every log line."""
    for key in list(event_dict):
        lowered = key.lower()
        if any(s in lowered for s in _SECRET_FIELDS) and not lowered.endswith(("_id", "_fingerprint")):
            event_dict[key] = "[redacted]"
        elif isinstance(event_dict[key], str) and "PRIVATE KEY" in event_dict[key]:
            event_dict[key] = _PRIVATE_KEY.sub("[redacted private key]", event_dict[key])
    return event_dict


class _ProcessStdout:
    """The process's real standard output (``sys.__stdout__``), looked up at each write.

    Not ``sys.stdout``: test runners and CLI test helpers swap that object (and close the swapped one), while
    loggers are cached for the life of the process. Output on file descriptor 1 is still captured by pytest.
    """

    def write(self, text: str) -> int:
        stream = sys.__stdout__ or sys.stdout
        return stream.write(text)

    def flush(self) -> None:
        stream = sys.__stdout__ or sys.stdout
        stream.flush()


def configure_logging(service: str, level: str = "INFO", json_output: bool | None = None) -> None:
    as_json = (not sys.stdout.isatty()) if json_output is None else json_output
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(_ProcessStdout()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)
    # Libraries log through stdlib logging; keep them at WARNING so one unit of work stays one line.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    for noisy in ("aiokafka", "kafka", "asyncio", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.ERROR if noisy == "aiokafka" else logging.WARNING)
