"""Reachability check a Header worker runs before its run script.

Role: prove that every peer's virtual IP answers on a TCP port through the tunnel (for example
each Ray node's raylet or object-manager port) before the job starts, so a broken data path fails
fast with the unreachable addresses named instead of as a Ray timeout minutes later.

``python -m rlark_tunnel_agent.tunnel.health --port 6379 --timeout 30 10.100.1.2 10.100.1.3``
exits 0 when all answer, 1 otherwise, and prints a JSON report either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, slots=True)
class Reachability:
    """Per address: connect time in ms when it answered, else the last error."""

    port: int
    answered: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


async def _probe(address: str, port: int, deadline: float, retry_s: float) -> float | str:
    error = "not tried"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return error
        started = time.monotonic()
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), left)
        except TimeoutError:
            return f"no answer within the deadline (last: {error})"
        except OSError as exc:
            error = exc.strerror or str(exc)
            await asyncio.sleep(min(retry_s, max(0.0, deadline - time.monotonic())))
            continue
        elapsed = (time.monotonic() - started) * 1000
        writer.close()
        return round(elapsed, 3)


async def check_reachability(
    addresses: Sequence[str], port: int, *, timeout_s: float = 30.0, retry_s: float = 0.5
) -> Reachability:
    """Connect to ``address:port`` for every address, retrying until ``timeout_s`` passes.

    An address answers when a TCP connection is established; a refusal (nothing listening yet)
    is retried like a timeout, because the check is about the service being reachable.
    """
    deadline = time.monotonic() + timeout_s
    results = await asyncio.gather(*(_probe(a, port, deadline, retry_s) for a in addresses))
    report = Reachability(port=port)
    for address, result in zip(addresses, results, strict=True):
        if isinstance(result, float):
            report.answered[address] = result
        else:
            report.failed[address] = result
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlark_tunnel_agent.tunnel.health")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("addresses", nargs="+")
    args = parser.parse_args(argv)
    report = asyncio.run(check_reachability(args.addresses, args.port, timeout_s=args.timeout))
    print(json.dumps(asdict(report)))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
