# One image for every RLark Python service (the command picks the service and its role), plus the web
# console build. Used by docker-compose.yml and deploy/.
# syntax=docker/dockerfile:1.7

FROM node:20-bookworm-slim AS web
WORKDIR /web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY web/ ./
RUN npm run build

# The tunnel's Go data path (ADR 0008), static, for the agent image's local runtime.
FROM golang:1.24-bookworm AS tunnel-dp
WORKDIR /src
COPY services/tunnel_agent/dataplane/go.mod services/tunnel_agent/dataplane/go.sum ./
RUN go mod download
COPY services/tunnel_agent/dataplane/ ./
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/rlark-tunnel-dp .

FROM python:3.11-slim-bookworm AS python
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy
RUN pip install --no-cache-dir uv==0.13.8
WORKDIR /app
COPY pyproject.toml uv.lock ./
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
# with NET_ADMIN only (see deploy/agent), never privileged.
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 openssh-client && rm -rf /var/lib/apt/lists/*
COPY --from=tunnel-dp /out/rlark-tunnel-dp /usr/local/bin/rlark-tunnel-dp
# A local-runtime agent moves domain packets in the Go data path; the Kubernetes runtime ignores it.
ENV RLARK_TUNNEL_DATAPLANE=/usr/local/bin/rlark-tunnel-dp
ENTRYPOINT ["python", "-m", "rlark_tunnel_agent"]
