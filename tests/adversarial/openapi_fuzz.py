"""Schemathesis against a served OpenAPI document, as one or more roles; run by ``test_schemathesis.py`` in its
own interpreter (see ``FUZZ`` there for why).

Reads ``{"document": ..., "base_url": ..., "roles": [[role, token], ...]}`` as JSON on stdin (tokens never on
the command line) and prints ``{"calls": N, "findings": [line, ...]}`` as JSON on stdout: one line per distinct
(operation, role, check, status) with the request that showed it. Failures are collected, not raised inside
hypothesis, which would shrink each for minutes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import status_code_conformance

MAX_EXAMPLES = 12
"""Per operation and role: about 1,300 requests over the gateway's 59 operations (``derandomize``: the same
cases every run). The requests are the run's time (80% of it); 20 examples made 2,200 of them."""
SKIPPED = {
    ("GET", "/api/v1/events"),
    ("POST", "/api/v1/auth/login"),
    ("POST", "/api/v1/auth/logout"),
    ("POST", "/api/v1/auth/password"),
}
"""Left out, with the reasons in ``test_schemathesis.py``'s docstring."""
REQUEST_TIMEOUT_S = 30


@dataclass
class Findings:
    """What went wrong, one line per distinct (operation, role, check, status)."""

    seen: dict[tuple[str, str, str, int], str] = field(default_factory=dict)
    calls: int = 0

    def add(self, operation: str, role: str, check: str, status: int, detail: str) -> None:
        self.seen.setdefault((operation, role, check, status), detail)

    def lines(self) -> list[str]:
        return [
            f"{op} as {role}: {check} (status {status}): {detail}"
            for (op, role, check, status), detail in sorted(self.seen.items())
        ]


def _request(case: schemathesis.Case) -> str:
    """The request, for the failure report: method, path, query and body; never the token."""
    query = f"?{case.query}" if case.query else ""
    body = f" body={case.body!r:.200}" if case.body is not None and not _is_unset(case.body) else ""
    return f"{case.method} {case.formatted_path}{query}{body}"


def _is_unset(value: object) -> bool:
    return type(value).__name__ == "NotSet"


def fuzz(document: dict[str, Any], base_url: str, role: str, token: str, findings: Findings) -> None:
    """Every operation of ``document`` but :data:`SKIPPED` with ``MAX_EXAMPLES`` generated cases."""
    schema = schemathesis.openapi.from_dict(document)
    headers = {"Authorization": f"Bearer {token}"}
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) not in SKIPPED:
            _fuzz_operation(operation, base_url, role, headers, findings)


def _fuzz_operation(
    operation: schemathesis.APIOperation,
    base_url: str,
    role: str,
    headers: dict[str, str],
    findings: Findings,
) -> None:
    label = f"{operation.method.upper()} {operation.path}"
    checks = [("server_error", not_a_server_error), ("undocumented_status", status_code_conformance)]

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def run(case: schemathesis.Case) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=REQUEST_TIMEOUT_S)
        findings.calls += 1
        for name, check in checks:
            try:
                case.validate_response(response, checks=[check], headers=headers)
            except (AssertionError, FailureGroup) as failure:
                found = failure.exceptions if isinstance(failure, FailureGroup) else [failure]
                titles = "; ".join(getattr(f, "title", name) for f in found)
                body = response.text[:160].replace("\n", " ")
                findings.add(label, role, name, response.status_code, f"{titles}: {body} — {_request(case)}")

    run()


def main() -> int:
    request = json.load(sys.stdin)
    findings = Findings()
    for role, token in request["roles"]:
        fuzz(request["document"], request["base_url"], role, token, findings)
    json.dump({"calls": findings.calls, "findings": findings.lines()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
