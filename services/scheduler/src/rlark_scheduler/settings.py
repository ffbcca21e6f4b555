"""Settings of the scheduler service (environment prefix `RLARK_`)."""

from __future__ import annotations

from pydantic import Field
from rlark_platform.settings import ServiceSettings


class SchedulerSettings(ServiceSettings):
    service_name: str = "scheduler"
    http_port: int = Field(default=8104, ge=0, le=65535)
    ray_port: int = Field(default=6379, ge=1, le=65535, description="GCS port of every job's Ray head")
    join_deadline_s: int = Field(
        default=300, ge=1, description="How long a Header waits for all Ray nodes before failing the job"
    )
    ssh_user: str = Field(
        default="rlark",
        description="The login user of a job's workers on Kubernetes (`rlark ssh`, `ssh-config`, the ssh command "
        "hint): the worker image's name for the pods' runAsUser (the agent's RLARK_K8S_RUN_AS_USER, 1000), since "
        "a worker's sshd runs as that user and lets no one else in; the project's worker images name uid 1000 "
        "`rlark` (local workers: `rlark` always, ADR 0007)",
    )
    placement_poll_s: float = Field(
        default=5.0, gt=0, description="Placement loop's fallback wake-up when no NOTIFY arrives"
    )
    address_retry_s: float = Field(
        default=30.0,
        gt=0,
        description="A job whose network domain had no free address is retried after this long, or "
        "as soon as the domain releases addresses",
    )
    log_line_max_chars: int = Field(default=16384, ge=80, description="Longer worker log lines are cut")
    failure_log_lines: int = Field(
        default=20, ge=0, le=200, description="Last log lines of a failed worker kept in the job's details"
    )
    stream_poll_s: float = Field(
        default=2.0, gt=0, description="Log/event streams re-check the database at least this often"
    )
    tunnel_grace_s: float = Field(
        default=60.0,
        gt=0,
        description="A Starting/Running job whose network-domain tunnel between two of its clusters "
        "stays down this long fails (RLARK_TUNNEL_GRACE_S)",
    )
    cluster_offline_grace_s: float = Field(
        default=60.0,
        ge=0,
        description="A Starting/Running job's cluster may be offline this long before the job is Lost; "
        "0 loses it at once (RLARK_CLUSTER_OFFLINE_GRACE_S)",
    )
    idle_gpu_threshold_pct: float = Field(
        default=10.0, ge=0, le=100, description="A Running job's GPUs averaging below this are idle"
    )
    idle_gpu_window_s: float = Field(
        default=1800.0, ge=60, le=86400, description="...over this long: one 'idle GPUs' timeline warning"
    )
    usage_raw_retention_s: float = Field(
        default=3600.0,
        ge=60,
        description="Workers' usage samples are kept as sent this long, then per minute",
    )
    usage_retention_s: float = Field(
        default=7 * 86400.0, ge=3600, description="Workers' per-minute usage is kept this long"
    )
    restart_teardown_s: float = Field(
        default=60.0,
        gt=0,
        description="A restarting job waits at most this long for its failed attempt's workers to be "
        "reported ended before it is placed again (ADR 0014)",
    )
