"""The gateway client: one place that turns HTTP errors into readable messages and exit codes.

Exit codes: 0 ok; 1 the server refused the request (4xx); 2 usage error (typer); 3 not logged in / auth
failed; 4 the gateway is unreachable or answered 5xx.

Retries: only requests the server makes idempotent are retried — :meth:`Gateway.post_idempotent` sends an
``Idempotency-Key`` and repeats the very same request with it when the connection fails or the gateway
answers 502/503/504 (a service restarting), a bounded number of times with growing, jittered waits, saying
so on stderr each time. Whatever happened to an earlier attempt, the server then creates at most one thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from rlark_cli.config import load
from rlark_cli.lang import own, say
from rlark_cli.output import print_text

err = Console(stderr=True)

EXIT_REFUSED, EXIT_AUTH, EXIT_UNAVAILABLE = 1, 3, 4

IDEMPOTENCY_HEADER = "Idempotency-Key"
RETRY_STATUSES = frozenset({502, 503, 504})
"""Gateway answers that mean "the service behind me is down or slow right now", worth a retry."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently an idempotent request is repeated (at most ``attempts`` tries)."""

    attempts: int = 6
    first_wait_s: float = 0.5
    max_wait_s: float = 8.0
    jitter_s: float = 1.0
    """Up to this much is added to each wait at random, so clients failed together do not retry together."""


class TransientFailure(Exception):
    """One attempt failed in a way a retry may fix (the connection, or 502/503/504)."""


def _why(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"HTTP {response.status_code} {error.get('code')}: {error.get('message')}"
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"HTTP {response.status_code}"


def fail(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    print_text((own("error"), "bold red"), f" {message}", console=err)
    raise typer.Exit(code)


class Gateway:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        config = load()
        self.url = (url or config.url).rstrip("/")
        headers = {"Authorization": f"Bearer {token or config.token}"} if (token or config.token) else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            fail(own("unreachable", url=self.url, why=exc), EXIT_UNAVAILABLE)
        return self._result(response)

    def _result(self, response: httpx.Response) -> Any:
        if response.status_code < 400:
            if not response.content:
                return None
            if response.headers.get("content-type", "").startswith("application/json"):
                return response.json()
            return response.text
        try:
            error = response.json()["error"]
            message = say(error, str(error.get("message") or error.get("code")))
            field = error.get("field")
            # A message that starts with its field names it already.
            text = (
                str(message)
                if not field or str(message).startswith(f"{field}:")
                else message + own("field", field=field)
            )
            for detail in (error.get("details") or {}).get("errors", [])[1:]:
                said, where = say(detail), detail.get("field")
                # Most messages start with their field already: print it once.
                text += (
                    f"\n  - {said}" if not where or said.startswith(f"{where}:") else f"\n  - {where}: {said}"
                )
        except (ValueError, KeyError, TypeError, AttributeError):
            text = f"HTTP {response.status_code}: {response.text[:500]}"
        if response.status_code == 401:
            fail(f"{text}\n{own('log_in')}", EXIT_AUTH)
        fail(text, EXIT_UNAVAILABLE if response.status_code >= 500 else EXIT_REFUSED)

    def post_idempotent(
        self,
        path: str,
        key: str,
        *,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[int, str], None] | None = None,
        **kwargs: Any,
    ) -> Any:
        """POST with ``Idempotency-Key: key``, retried per ``policy`` on transient failures.

        Each retry is announced on stderr (and passed to ``on_retry(attempt, why)``); when the attempts run
        out the command fails with exit code 4 and the last reason. Any other answer is handled as by
        :meth:`request`.
        """
        policy = policy or RetryPolicy()
        headers = {**kwargs.pop("headers", {}), IDEMPOTENCY_HEADER: key}

        def attempt() -> httpx.Response:
            try:
                response = self._http.post(path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                raise TransientFailure(f"{type(exc).__name__}: {exc}") from exc
            if response.status_code in RETRY_STATUSES:
                raise TransientFailure(_why(response))
            return response

        def announce(state: RetryCallState) -> None:
            why = str(state.outcome.exception()) if state.outcome is not None else "?"
            wait = state.next_action.sleep if state.next_action is not None else 0.0
            print_text(
                ("retrying", "yellow"),
                f" ({why}); attempt {state.attempt_number + 1} of {policy.attempts} "
                f"in {wait:.1f}s with the same {IDEMPOTENCY_HEADER}",
                console=err,
            )
            if on_retry is not None:
                on_retry(state.attempt_number, why)

        retrying = Retrying(
            stop=stop_after_attempt(policy.attempts),
            wait=wait_exponential_jitter(
                multiplier=policy.first_wait_s, max=policy.max_wait_s, jitter=policy.jitter_s
            ),
            retry=retry_if_exception_type(TransientFailure),
            before_sleep=announce,
            reraise=True,
        )
        try:
            response = retrying(attempt)
        except TransientFailure as exc:
            fail(
                f"gave up after {policy.attempts} attempts on {self.url}: {exc}\n"
                f"the request is safe to repeat with the same {IDEMPOTENCY_HEADER}: {key}",
                EXIT_UNAVAILABLE,
            )
        return self._result(response)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> Any:
        return self.request("PATCH", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> Any:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def stream(self, path: str, **kwargs: Any) -> httpx.Response:
        """An open streaming response (server-sent events); the caller closes it."""
        request = self._http.build_request("GET", path, **kwargs)
        try:
            response = self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            fail(own("unreachable", url=self.url, why=exc), EXIT_UNAVAILABLE)
        if response.status_code >= 400:
            response.read()
            self._result(response)
        return response
