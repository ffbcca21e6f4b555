"""Settings of the notifier service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings

from rlark_notifier.domain import Backoff, UrlPolicy


class NotifierSettings(ServiceSettings):
    service_name: str = "notifier"
    http_port: int = Field(default=8106, ge=0, le=65535)

    notifier_allow_http: bool = Field(
        default=False, description="Accept http:// webhook URLs (default: https only)"
    )
    notifier_allow_private: bool = Field(
        default=False,
        description="Accept webhooks on loopback and private addresses (link-local and metadata never)",
    )
    notifier_backoff_initial_s: float = Field(
        default=2.0, gt=0, description="Wait after a failed attempt; doubles after each further one"
    )
    notifier_backoff_max_s: float = Field(default=600.0, gt=0, description="Longest wait between attempts")
    notifier_max_attempts: int = Field(default=8, ge=1, le=50, description="Attempts before a delivery fails")
    notifier_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of one webhook request")
    notifier_concurrency: int = Field(
        default=32, ge=1, le=1000, description="Endpoints served at once (each one delivery at a time)"
    )
    notifier_poll_interval_s: float = Field(
        default=1.0, gt=0, description="Delivery queue polling fallback (NOTIFY wakes it at once)"
    )

    def url_policy(self) -> UrlPolicy:
        return UrlPolicy(allow_http=self.notifier_allow_http, allow_private=self.notifier_allow_private)

    def backoff(self) -> Backoff:
        return Backoff(
            initial_s=self.notifier_backoff_initial_s,
            max_s=self.notifier_backoff_max_s,
            max_attempts=self.notifier_max_attempts,
        )
