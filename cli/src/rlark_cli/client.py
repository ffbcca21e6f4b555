"""The gateway client: one place that turns HTTP errors into readable messages and exit codes.

Exit codes: 0 ok; 1 the server refused the request (4xx); 2 usage error (typer); 3 not logged in / auth
failed; 4 the gateway is unreachable or answered 5xx.
"""

from __future__ import annotations

from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console

from rlark_cli.config import load

err = Console(stderr=True)

EXIT_REFUSED, EXIT_AUTH, EXIT_UNAVAILABLE = 1, 3, 4


def fail(message: str, code: int = EXIT_REFUSED) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
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
            fail(f"cannot reach the gateway at {self.url}: {exc}", EXIT_UNAVAILABLE)
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
            message = error.get("message") or error.get("code")
            field = error.get("field")
            text = f"{message} (field: {field})" if field else str(message)
            for detail in (error.get("details") or {}).get("errors", [])[1:]:
                text += f"\n  - {detail.get('field')}: {detail.get('message')}"
        except (ValueError, KeyError, TypeError, AttributeError):
            text = f"HTTP {response.status_code}: {response.text[:500]}"
        if response.status_code == 401:
            fail(f"{text}\nlog in with: rlark login", EXIT_AUTH)
        fail(text, EXIT_UNAVAILABLE if response.status_code >= 500 else EXIT_REFUSED)

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
            fail(f"cannot reach the gateway at {self.url}: {exc}", EXIT_UNAVAILABLE)
        if response.status_code >= 400:
            response.read()
            self._result(response)
        return response
