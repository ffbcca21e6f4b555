"""The relay's wire contract between the gateway and the agents (ADR 0010).

An agent keeps a WebSocket control link open at ``AGENT_LINK_PATH`` (``Authorization: Bearer <agent token>``).
The gateway sends it JSON text orders ``{"op", "relay", "secret", "job", "worker", ...}``; the agent
resolves what the order names itself (never an address or a host path from the control plane) and dials
``AGENT_RELAY_PATH`` with its agent token and the order's secret in ``RELAY_SECRET_HEADER``.

- ``op: "ssh"``: the agent connects the worker's sshd and relays binary frames both ways. When it cannot,
  it answers on the link ``{"op": "ssh-failed", "relay", "reason"}``.
- ``op: "tcp"`` (``service``: ``"tensorboard"`` or ``"ray-dashboard"``): as ``ssh``, to a TCP service of
  the worker (the TensorBoard server the agent starts on demand; the Header's Ray dashboard); the gateway
  speaks HTTP/1.1 over the relayed bytes, on its tools origin (ADR 0012). Failures are answered like
  ``ssh``'s (``ssh-failed``).
- ``op: "files"`` (``action``: ``"list"`` or ``"download"``; ``path``: a path inside one of the job's
  declared outputs, as the worker sees it): the agent dials back, sends one text frame, the *files head*
  (``{"ok": true, "kind": "file"|"dir"|"list", "name", "size"?}`` or ``{"ok": false, "status", "code",
  "message"}``), then the content as binary frames (a file's bytes, a directory as a tar stream, a list as
  JSON lines of ``{"path", "size", "mtime"}``) and closes with code 1000 when complete — any other close
  means the content is cut.
"""

from typing import Final

AGENT_LINK_PATH: Final = "/api/v1/agent/link"
AGENT_RELAY_PATH: Final = "/api/v1/agent/relay/{relay_id}"
RELAY_SECRET_HEADER: Final = "X-RLark-Relay-Secret"  # noqa: S105 - a header's name, not a secret
USER_SSH_PATH: Final = "/api/v1/jobs/{job_id}/workers/{worker}/ssh"
OP_SSH: Final = "ssh"
OP_SSH_FAILED: Final = "ssh-failed"
OP_TCP: Final = "tcp"
SERVICE_TENSORBOARD: Final = "tensorboard"
SERVICE_RAY_DASHBOARD: Final = "ray-dashboard"
TOOL_PATH: Final = "/jobs/{job_id}/{tool}"
"""Where the gateway's tools origin serves a job's tool (ADR 0012); ``tool`` is a ``tcp`` service's name."""
TOOL_OPEN_PATH: Final = "/api/v1/jobs/{job_id}/tools/{tool}/"
"""On the gateway's main origin: opens the tool in a browser (a signed ticket, then the tools origin)."""
TENSORBOARD_PATH: Final = "/jobs/{job_id}/tensorboard"
"""Where the tools origin serves a job's TensorBoard (``TOOL_PATH``); its server runs with this
``--path_prefix``."""
TENSORBOARD_START_S: Final = 60.0
"""How long an agent gives a TensorBoard server to listen before it says it failed; the gateway waits that
long, plus its usual connect-back time, for the agent of a ``tensorboard`` order to connect back."""
OP_FILES: Final = "files"
FILES_LIST: Final = "list"
FILES_DOWNLOAD: Final = "download"
FILES_LIST_LIMIT: Final = 10_000
"""The most entries the agent lists for one worker (the head of a list says ``truncated``)."""
RELAY_FRAME_BYTES: Final = 256 * 1024
"""The most bytes the agent and the CLI put in one frame (the gateway accepts up to 1 MiB)."""
