"""The SSH relay's wire contract between the gateway and the agents (ADR 0010).

An agent keeps a WebSocket control link open at ``AGENT_LINK_PATH`` (``Authorization: Bearer <agent token>``).
The gateway sends it JSON text orders ``{"op": "ssh", "relay", "secret", "job", "worker"}``; the agent
resolves the worker's sshd itself, connects to it and dials ``AGENT_RELAY_PATH`` with its agent token and the
order's secret in ``RELAY_SECRET_HEADER``, then relays binary frames. When it cannot, it answers on the link
``{"op": "ssh-failed", "relay", "reason"}``.
"""

from typing import Final

AGENT_LINK_PATH: Final = "/api/v1/agent/link"
AGENT_RELAY_PATH: Final = "/api/v1/agent/relay/{relay_id}"
RELAY_SECRET_HEADER: Final = "X-RLark-Relay-Secret"  # noqa: S105 - a header's name, not a secret
USER_SSH_PATH: Final = "/api/v1/jobs/{job_id}/workers/{worker}/ssh"
OP_SSH: Final = "ssh"
OP_SSH_FAILED: Final = "ssh-failed"
RELAY_FRAME_BYTES: Final = 64 * 1024
"""The most bytes the agent and the CLI put in one frame (the gateway accepts up to 1 MiB)."""
