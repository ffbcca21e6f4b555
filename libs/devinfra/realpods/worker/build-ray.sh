#!/bin/bash
# Optional: worker image + venv /opt/ray with ray[default]==2.60.0 (the project's locked version), via chroot + PyPI.
set -euo pipefail
cd /tmp/realpods/worker
rm -rf rootfs-ray; cp -a rootfs rootfs-ray
start=$(date +%s)
cp /etc/resolv.conf rootfs-ray/etc/resolv.conf
# this machine's HTTPS goes through an intercepting proxy whose CA is only in the host bundle
cp rootfs-ray/etc/ssl/certs/ca-certificates.crt rootfs-ray/tmp/ca.orig
cp /etc/ssl/certs/ca-certificates.crt rootfs-ray/etc/ssl/certs/ca-certificates.crt
mount -t proc proc rootfs-ray/proc
trap 'umount rootfs-ray/proc || true' EXIT
PIP_FIND_LINKS= nice -n 10 chroot rootfs-ray /bin/sh -c 'python3 -m venv /opt/ray && /opt/ray/bin/pip install --no-cache-dir -q "ray[default]==2.60.0" && /opt/ray/bin/python -c "import ray; print(ray.__version__)"'
umount rootfs-ray/proc; trap - EXIT
mv rootfs-ray/tmp/ca.orig rootfs-ray/etc/ssl/certs/ca-certificates.crt; find rootfs-ray/opt/ray -name __pycache__ -prune -o -true >/dev/null
mid=$(date +%s)
python3 ../mkoci.py rootfs-ray rlark.local/worker:bookworm-ray2.60.0 worker-ray-oci.tar --cmd '["/bin/bash"]' \
  --env PATH=/opt/ray/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
end=$(date +%s)
echo "pip install: $((mid-start)) s, pack: $((end-mid)) s; rootfs $(du -sh rootfs-ray | cut -f1), tar $(du -sh worker-ray-oci.tar | cut -f1)"
