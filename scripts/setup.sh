#!/usr/bin/env bash
# One-time setup on a fresh machine, idempotent and quiet when nothing is missing:
# uv (from PyPI), the locked Python environment, and the Debian packages tests and `make run` use.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
if ! command -v uv >/dev/null 2>&1 || [ "$(uv --version | awk '{print $2}')" != "$UV_VERSION" ]; then
  echo "setup: installing uv $UV_VERSION from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
fi

# --inexact: keeps the `rlinf` group that `make prereqs` adds for the end-to-end tests (5 GB; not
# removed and re-linked on every make call).
uv sync --frozen --inexact --quiet

# The web console is built and tested with Node.js (npm); `make test` runs its component tests.
if ! command -v npm >/dev/null 2>&1; then
  echo "setup: npm is missing: install Node.js 20 or newer (Debian: apt-get install -y nodejs npm)" >&2
  exit 1
fi

# Debian packages: Java + Maven assemble the Kafka broker; iproute2 for the local runtime's network
# namespaces; chromium for the console's browser tests. Installed only when missing.
missing=()
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)
[ -x /usr/bin/chromium ] || missing+=(chromium)
# A CJK font, or the zh-CN console's screenshots show boxes where the Chinese is.
{ command -v fc-list >/dev/null 2>&1 && fc-list :lang=zh | grep -q .; } || missing+=(fonts-noto-cjk)
# Network domains: SSH tunnels between agents are measured against OpenSSH `ssh -w`, with iperf3 and ping.
command -v iperf3 >/dev/null 2>&1 || missing+=(iperf3)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ps >/dev/null 2>&1 || missing+=(procps)
# `make bench gateway` drives the real gateway with wrk.
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
# The local runtime keeps jobs apart on its bridge and the host out of workers' reach with nftables (ADR 0022).
{ command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ]; } || missing+=(nftables)
# The Kubernetes test bed's real nodes (ADR 0021): a container runtime and the CNI bridge per node, and
# mmdebstrap for the worker image (`make prereqs` builds it).
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# The service and agent images: built from the Dockerfile by buildah (`make prereqs`), started by podman in
# the tests (ADR 0023); neither needs a Docker engine.
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v podman >/dev/null 2>&1 || missing+=(podman)
# Buckets (objectStorage mounts) on the local runtime: the agent mounts them with rclone over FUSE (ADR 0024).
command -v rclone >/dev/null 2>&1 || missing+=(rclone)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
for extra in ${RLARK_SETUP_APT:-}; do
  command -v "$extra" >/dev/null 2>&1 || missing+=("$extra")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: please install: ${missing[*]} (apt-get install -y ...)" >&2
    exit 1
  fi
  echo "setup: apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
