# Shared settings for run.sh / down.sh. Node N (1=alpha, 2=beta) gets its own dirs, ports, subnet, bridge.
RP=/tmp/realpods
PAUSE_IMAGE=rlark.local/pause:3.10
WORKER_IMAGE=rlark.local/worker:bookworm
node_vars() {  # $1 = cluster name, $2 = index (1, 2, ...)
  CL=$1; IDX=$2
  D=$RP/$CL
  NODE=realnode-$IDX
  CTRD_SOCK=$D/containerd/containerd.sock
  SUBNET=10.244.$IDX.0/24
  GW=10.244.$IDX.1
  BRIDGE=rpbr$IDX
  KPORT=$((10240 + 10*IDX))        # kubelet API (10250 for alpha, 10260 for beta)
  HPORT=$((KPORT - 2))             # healthz
}
