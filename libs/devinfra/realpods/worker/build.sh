#!/bin/bash
# Build the worker image: Debian bookworm minbase + python3/venv/ssh/iproute2/procps/ca-certs, packed as OCI.
set -euo pipefail
cd /tmp/realpods/worker
rm -rf rootfs; start=$(date +%s)
nice -n 10 mmdebstrap --variant=minbase --mode=root \
  --include=python3,python3-venv,openssh-server,iproute2,procps,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  bookworm rootfs "deb http://deb.debian.org/debian bookworm main" "deb http://deb.debian.org/debian-security bookworm-security main"
mid=$(date +%s)
python3 ../mkoci.py rootfs rlark.local/worker:bookworm worker-oci.tar --cmd '["/bin/bash"]'
end=$(date +%s)
echo "mmdebstrap: $((mid-start)) s, pack: $((end-mid)) s; rootfs $(du -sh rootfs | cut -f1), tar $(du -sh worker-oci.tar | cut -f1)"
