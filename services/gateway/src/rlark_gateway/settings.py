"""Settings of the gateway service (environment prefix ``RLARK_``).

The gateway owns users, sessions, API tokens, login failures and the audit log (database ``rlark_gateway``),
and knows where the services behind it listen. There is no default password anywhere: the first admin comes from
``python -m rlark_gateway create-admin`` or from the bootstrap pair below, used only while no admin exists.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode
from rlark_platform.settings import ServiceSettings


def checkout_web_dist() -> Path:
    """``web/dist`` of the source checkout this package runs from (it may not exist)."""
    return Path(__file__).resolve().parents[4] / "web" / "dist"


class GatewaySettings(ServiceSettings):
    service_name: str = "gateway"
    http_port: int = Field(default=8080, ge=0, le=65535)

    inventory_url: str = Field(default="http://127.0.0.1:8101", description="Inventory service base URL")
    keys_url: str = Field(default="http://127.0.0.1:8102", description="Keys service base URL")
    netdomain_url: str = Field(default="http://127.0.0.1:8103", description="Netdomain service base URL")
    scheduler_url: str = Field(default="http://127.0.0.1:8104", description="Scheduler service base URL")
    notifier_url: str = Field(default="http://127.0.0.1:8106", description="Notifier service base URL")
    upstream_connect_timeout_s: float = Field(default=5.0, gt=0)
    upstream_timeout_s: float = Field(
        default=60.0, gt=0, description="Read timeout of proxied requests (not of event streams)"
    )
    upstream_idle_s: float = Field(
        default=2.0,
        gt=0,
        description="A connection to a service idle longer than this is not reused; keep it below the "
        "services' http_keep_alive_s (5 s), or a call can go out on a connection its service is closing "
        "and fail 503",
    )

    web_dir: Path | None = Field(
        default=None, description="Built web console (index.html); default web/dist of the checkout"
    )

    session_ttl_s: int = Field(default=12 * 3600, ge=60, description="Console session lifetime")
    credential_cache_s: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="How long a replica may answer who holds a token or session without asking the database"
        " (changes reach every replica at once through NOTIFY; 0 asks every time)",
    )
    cookie_secure: bool = Field(
        default=False,
        description="Always mark the session cookie Secure; it is anyway when the request came over HTTPS",
    )
    login_max_failures: int = Field(default=5, ge=1, description="Failed logins per username+IP per window")
    login_max_failures_per_account: int = Field(
        default=20, ge=1, description="Failed logins per username from all addresses together per window"
    )
    login_max_failures_per_address: int = Field(
        default=30,
        ge=1,
        description="Failed logins from one client address for all usernames together per window",
    )
    login_window_s: float = Field(default=300.0, gt=0)

    trusted_proxies: Annotated[list[IPv4Network | IPv6Network], NoDecode] = Field(
        default_factory=list,
        description="Peers (comma-separated addresses or CIDRs) whose X-Forwarded-For/-Proto are believed",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins besides the gateway's own whose browsers may make changes (comma-separated)",
    )
    metrics_token: SecretStr = Field(
        default=SecretStr(""), description="Bearer token for GET /metrics; unset: /metrics is off"
    )
    events_max_streams_per_user: int = Field(
        default=4, ge=1, description="Open GET /api/v1/events streams per user (per gateway process)"
    )

    password_min_length: int = Field(default=8, ge=1)
    # argon2id cost; the defaults are argon2-cffi's (RFC 9106 low-memory profile). Tests lower them.
    password_time_cost: int = Field(default=3, ge=1)
    password_memory_kib: int = Field(default=65536, ge=8)
    password_parallelism: int = Field(default=4, ge=1)

    bootstrap_admin_username: str = Field(
        default="", description="First admin created at start when no admin exists (with the password)"
    )
    bootstrap_admin_password: SecretStr = Field(default=SecretStr(""))

    events_ping_s: float = Field(default=15.0, gt=0, description="Keep-alive interval of event streams")
    agent_link_recheck_s: float = Field(
        default=30.0,
        gt=0,
        description="How often an agent's open control link is checked against its cluster's current "
        "credential; a rotated or deleted cluster's link is closed within this time",
    )

    replica_url: str = Field(
        default="",
        description="This replica's own address as the other gateway replicas reach it (http://POD_IP:8080; "
        "ADR 0028): a replica that gets a request for a cluster whose agent link another replica holds "
        "forwards it there. Default: http://127.0.0.1 with the API port (one process)",
    )

    tools_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="Port of the tools origin, the second listener serving only jobs' TensorBoard and Ray "
        "dashboard (ADR 0012); default: the API port + 1",
    )
    tools_url: str = Field(
        default="",
        description="The tools origin as browsers reach it (https://tools.example.org); default: the "
        "request's scheme and host name with the tools port. Must not be the console's origin",
    )
    tool_ticket_ttl_s: int = Field(
        default=60, ge=5, le=600, description="Lifetime of a ticket that opens a job's tool (one use)"
    )
    tool_cookie_ttl_s: int = Field(
        default=3600, ge=60, description="Lifetime of the tools origin's cookie for one job's tool"
    )

    @field_validator("trusted_proxies", "allowed_origins", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """A comma-separated list, or a JSON list (what a list setting serialised into the environment is)."""
        if isinstance(value, str) and value.strip().startswith("["):
            return json.loads(value)
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            scheme, sep, rest = origin.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(f"{origin!r} is not an origin like https://console.example.org")
        return [origin.lower().rstrip("/") for origin in value]

    @field_validator("tools_url")
    @classmethod
    def _tools_url(cls, value: str) -> str:
        origin = value.strip().lower().rstrip("/")
        scheme, sep, rest = origin.partition("://")
        if origin and (scheme not in ("http", "https") or not sep or not rest or "/" in rest):
            raise ValueError(f"{value!r} is not an origin like https://tools.example.org")
        return origin

    @field_validator("replica_url")
    @classmethod
    def _replica_url(cls, value: str) -> str:
        url = value.strip().rstrip("/")
        scheme, sep, rest = url.partition("://")
        if url and (scheme not in ("http", "https") or not sep or not rest or "/" in rest or "?" in rest):
            raise ValueError(f"{value!r} is not a replica address like http://10.1.2.3:8080")
        return url

    @model_validator(mode="after")
    def _tools_apart(self) -> GatewaySettings:
        if self.tools_url and self.tools_url in self.allowed_origins:
            raise ValueError(
                f"tools_url {self.tools_url!r} is in allowed_origins: jobs' tools must not make changes "
                "with a user's session (ADR 0012)"
            )
        if self.http_port and self.resolved_tools_port() == self.http_port:
            raise ValueError("tools_port must differ from http_port (the tools origin is a second listener)")
        return self

    def resolved_tools_port(self) -> int:
        """The tools origin's port: ``tools_port``, else the API port + 1 (a random port when both are 0)."""
        if self.tools_port is not None:
            return self.tools_port
        return self.http_port + 1 if self.http_port else 0

    def resolved_replica_url(self) -> str:
        """Where the other replicas reach this one: ``replica_url``, else this host's loopback and API port."""
        return self.replica_url or f"http://127.0.0.1:{self.http_port}"

    def resolved_web_dir(self) -> Path | None:
        """The console directory to serve, or None when the console is not built."""
        candidate = self.web_dir if self.web_dir is not None else checkout_web_dist()
        return candidate if (candidate / "index.html").is_file() else None

    def upstreams(self) -> dict[str, str]:
        """Service name → base URL (no trailing slash)."""
        return {
            "inventory": self.inventory_url.rstrip("/"),
            "keys": self.keys_url.rstrip("/"),
            "netdomain": self.netdomain_url.rstrip("/"),
            "scheduler": self.scheduler_url.rstrip("/"),
            "notifier": self.notifier_url.rstrip("/"),
        }
