"""The audit trail's middleware (pure ASGI): every change under ``/api/`` (POST, PUT, PATCH, DELETE) gets one
audit entry — who (``deps.AuditNote``, filled by the route), what, the status, the client's address and the
request id — written when the answer starts, before the client sees it, so a client that reads the audit
right after its change finds it. Reads pass through untouched. A change the app fails on without answering
(an unexpected error, answered 500 further out) is not audited, as before. Granted agent lease renewals
(every few seconds per cluster) are not audited; refusals are.
"""

from __future__ import annotations

import structlog
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlark_gateway.api.deps import AuditNote, client_address
from rlark_gateway.domain.access import AGENT_LEASE_PATH, CHANGE_METHODS, audit_action
from rlark_gateway.handlers import Accounts

log = structlog.get_logger(__name__)


class AuditChanges:
    def __init__(self, app: ASGIApp, accounts: Accounts) -> None:
        self.app = app
        self.accounts = accounts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in CHANGE_METHODS
            or not scope["path"].startswith("/api/")
        ):
            await self.app(scope, receive, send)
            return
        note = AuditNote()
        request = Request(scope)
        request.state.audit = note

        async def audited_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                await self._record(request, note, message)
            await send(message)

        await self.app(scope, receive, audited_send)

    async def _record(self, request: Request, note: AuditNote, start: Message) -> None:
        status = int(start["status"])
        path = request.url.path
        if path == AGENT_LEASE_PATH and status < 400:
            return  # a lease renewal every few seconds per cluster: refusals only are audited
        request_id = next(
            (v.decode("latin-1") for k, v in start.get("headers", ()) if k.lower() == b"x-request-id"), None
        )
        default_action, default_target = audit_action(request.method, path)
        try:
            await self.accounts.record_audit(
                actor=note.actor or "anonymous",
                role=note.role,
                action=note.action or default_action,
                target=note.target if note.target is not None else default_target,
                method=request.method,
                path=path,
                status=status,
                client_ip=client_address(request),
                request_id=request_id,
            )
        except Exception as exc:
            log.error("audit entry not written", error=type(exc).__name__, path=path)
