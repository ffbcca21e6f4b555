# One image for every RLark Python service (the command picks the service and its role), plus the web
# console build. Used by docker-compose.yml and deploy/.
#
# The base images are build arguments. A lab that can pull from Docker Hub builds with the defaults
# (`docker build --target service .`); a machine that cannot passes bases of its own made from Debian
# packages, as `make prereqs` does with buildah (README, "Deploying with containers"; ADR 0023).

ARG NODE_BASE=node:20-bookworm-slim
ARG GO_BASE=golang:1.24-bookworm
ARG PYTHON_BASE=python:3.11-slim-bookworm

FROM ${NODE_BASE} AS web
WORKDIR /web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY web/ ./
RUN npm run build

# The tunnel's Go data path (ADR 0008), static, for the agent image's local runtime.
FROM ${GO_BASE} AS tunnel-dp
WORKDIR /src
COPY services/tunnel_agent/dataplane/go.mod services/tunnel_agent/dataplane/go.sum ./
RUN go mod download
COPY services/tunnel_agent/dataplane/ ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/rlark-tunnel-dp .

FROM ${PYTHON_BASE} AS python
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never
RUN pip install --no-cache-dir uv==0.13.8
WORKDIR /app
COPY pyproject.toml uv.lock ./
# The locked third-party packages in a layer of their own, so that a change to RLark's sources reinstalls
# only RLark's packages (uv cannot check the lock without every member's pyproject.toml: --frozen).
RUN uv sync --frozen --no-dev --no-install-workspace && rm -rf /root/.cache
COPY libs/ libs/
COPY services/ services/
COPY cli/ cli/
RUN uv sync --frozen --no-dev && rm -rf /root/.cache
ENV PATH=/app/.venv/bin:$PATH

FROM python AS service
RUN useradd --uid 10001 --create-home rlark
COPY --from=web /web/dist /app/web/dist
ENV RLARK_WEB_DIR=/app/web/dist RLARK_HTTP_HOST=0.0.0.0
USER 10001
# e.g. `python -m rlark_scheduler api`
ENTRYPOINT ["python", "-m"]

FROM python AS agent
# The tunnel-agent manages network devices for network domains: it runs as root inside its own pod/container
# with NET_ADMIN only (see deploy/agent), never privileged. rclone and fuse3: the same image is RLark's CSI node
# plugin (`python -m rlark_tunnel_agent csi-node`, deploy/agent/csi), which mounts buckets with rclone (ADR 0024).
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 openssh-client rclone fuse3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=tunnel-dp /out/rlark-tunnel-dp /usr/local/bin/rlark-tunnel-dp
# A local-runtime agent moves domain packets in the Go data path; the Kubernetes runtime ignores it.
ENV RLARK_TUNNEL_DATAPLANE=/usr/local/bin/rlark-tunnel-dp
ENTRYPOINT ["python", "-m", "rlark_tunnel_agent"]
