#!/bin/bash
# containerd2.sh CLUSTER INDEX : like containerd.sh but containerd v2.4.2 built from Go modules (config version 3).
set -euo pipefail
. /tmp/realpods/lib.sh
node_vars "$1" "$2"
mkdir -p $D/containerd/{root,state} $D/cni/net.d $D/logs
cat > $D/containerd/config.toml <<TOML
version = 3
root = "$D/containerd/root"
state = "$D/containerd/state"
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$D/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins."io.containerd.cri.v1.runtime"]
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/bin/runc"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$D/cni/net.d"
    max_conf_num = 1
TOML
cat > $D/cni/net.d/10-rp.conflist <<JSON
{"cniVersion": "0.4.0", "name": "rp-$CL", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET", "gateway": "$GW"}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$D/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "loopback"}]}
JSON
PATH=$RP/bin:$PATH setsid nohup $RP/bin/containerd2 --config $D/containerd/config.toml >> $D/logs/containerd.log 2>&1 < /dev/null &
echo $! > $D/containerd.pid
for i in $(seq 50); do ctr -a $CTRD_SOCK version >/dev/null 2>&1 && break; sleep 0.2; done
ctr -a $CTRD_SOCK version | grep Version
for t in $RP/pause/pause-oci.tar $RP/worker/worker-oci.tar; do ctr -a $CTRD_SOCK -n k8s.io images import $t; done
