#!/bin/bash
# containerd.sh CLUSTER INDEX : write config + CNI conflist for this node and start containerd; import images.
set -euo pipefail
. /tmp/realpods/lib.sh
node_vars "$1" "$2"
mkdir -p $D/containerd/{root,state} $D/cni/net.d $D/logs
cat > $D/containerd/config.toml <<TOML
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$D/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  enable_cdi = false
  netns_mounts_under_state_dir = true
  # this sandbox lacks CAP_SYS_RESOURCE: runc cannot set the sandbox oom_score_adj -998 (fails with
  # "can't get final child's PID from pipe: EOF"); clamp container scores to containerd's own (0)
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/bin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
TOML
cat > $D/cni/net.d/10-rp.conflist <<JSON
{
  "cniVersion": "0.4.0",
  "name": "rp-$CL",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET", "gateway": "$GW"}]],
              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$D/cni/ipam"}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
JSON
if [ -S $CTRD_SOCK ] && ctr -a $CTRD_SOCK version >/dev/null 2>&1; then echo "containerd $CL already running"; else
  setsid nohup containerd --config $D/containerd/config.toml >> $D/logs/containerd.log 2>&1 < /dev/null &
  echo $! > $D/containerd.pid
  for i in $(seq 50); do ctr -a $CTRD_SOCK version >/dev/null 2>&1 && break; sleep 0.2; done
fi
ctr -a $CTRD_SOCK version | grep Version
for t in $RP/pause/pause-oci.tar $RP/worker/worker-oci.tar; do
  [ -f $t ] || continue
  ctr -a $CTRD_SOCK -n k8s.io images import $t
done
ctr -a $CTRD_SOCK -n k8s.io images ls -q
