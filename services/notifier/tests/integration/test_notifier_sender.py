"""The HTTP adapter against a real receiver: where the host resolves is checked before anything is sent,
and redirects are never followed."""

from __future__ import annotations

from rlark_devinfra.webhook_receiver import WebhookReceiver
from rlark_notifier.domain import OutgoingRequest, UrlPolicy
from rlark_notifier.sender import HttpSender


async def test_a_host_name_resolving_to_a_refused_address_gets_nothing_sent(
    receiver: WebhookReceiver,
) -> None:
    sender = HttpSender(UrlPolicy(allow_http=True, allow_private=False), timeout_s=5)
    try:
        sent = await sender.send(OutgoingRequest(f"http://localhost:{receiver.port}/hook", {}, b"{}"))
    finally:
        await sender.aclose()
    assert sent.status_code is None
    assert "refused address" in sent.error
    assert receiver.requests == []


async def test_a_redirect_is_answered_not_followed(receiver: WebhookReceiver) -> None:
    receiver.fail("/moved", 302, times=1)
    sender = HttpSender(UrlPolicy(allow_http=True, allow_private=True), timeout_s=5)
    try:
        sent = await sender.send(OutgoingRequest(receiver.url("/moved"), {}, b"{}"))
    finally:
        await sender.aclose()
    assert sent.status_code == 302
    assert [r.path for r in receiver.requests] == ["/moved"]
