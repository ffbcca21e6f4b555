#!/bin/bash
# build.sh: what run.sh needs built once (each step skipped when its output exists):
#   bin/kubelet (k8s.io/kubernetes v1.36.3, module copied from the test bed's src-kubernetes),
#   pause/pause-oci.tar (static Go pause), worker/worker-oci.tar (mmdebstrap bookworm),
#   worker/worker-ray-oci.tar when WITH_RAY=1.
set -euo pipefail
RP=/tmp/realpods; cd $RP; mkdir -p bin logs
need=""; for p in containerd runc containernetworking-plugins mmdebstrap iptables bc; do dpkg -s $p >/dev/null 2>&1 || need="$need $p"; done
[ -z "$need" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
TB=${RLARK_K8S_ROOT:-$HOME/.cache/rlark/k8s-v1.36.3-v1}
for b in etcd kube-apiserver; do [ -x $TB/bin/$b ] || { echo "missing $TB/bin/$b: run 'make prereqs' in the RLark checkout"; exit 1; }; done
if [ ! -x bin/kubelet ]; then
  mkdir -p kubelet-src; cd kubelet-src
  cp $TB/src-kubernetes/go.mod $TB/src-kubernetes/go.sum . ; sed -i 's#^module .*#module rlark.local/kubeletbuild#' go.mod
  export CGO_ENABLED=0 GOWORK=off GOFLAGS="-p=2 -buildvcs=false" GOMAXPROCS=2
  t=$(date +%s)
  nice -n 19 go get -tool k8s.io/kubernetes/cmd/kubelet@v1.36.3
  V="-X k8s.io/component-base/version"
  nice -n 19 go build -trimpath -ldflags "-s -w $V.gitVersion=v1.36.3 $V.gitMajor=1 $V.gitMinor=36 $V.gitTreeState=clean" \
    -o $RP/bin/kubelet k8s.io/kubernetes/cmd/kubelet
  echo "kubelet built in $(( $(date +%s)-t )) s"; cd $RP
fi
if [ ! -f pause/pause-oci.tar ]; then
  (cd pause && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags '-s -w' -o pause . && mkdir -p rootfs && cp pause rootfs/pause)
  python3 mkoci.py pause/rootfs rlark.local/pause:3.10 pause/pause-oci.tar --entrypoint '["/pause"]'
fi
[ -f worker/worker-oci.tar ] || ./worker/build.sh
if [ "${CTRD:-1}" = 2 ] && [ ! -x bin/containerd2 ]; then   # containerd v2.4.2 + its runc shim from Go modules
  mkdir -p containerd2-src; cd containerd2-src; [ -f go.mod ] || go mod init rlark.local/containerd2
  export CGO_ENABLED=0 GOWORK=off GOFLAGS="-p=2 -buildvcs=false" GOMAXPROCS=2; t=$(date +%s)
  nice -n 19 go get -tool github.com/containerd/containerd/v2/cmd/containerd@v2.4.2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v2.4.2
  nice -n 19 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=v2.4.2" -o $RP/bin/containerd2 github.com/containerd/containerd/v2/cmd/containerd
  nice -n 19 go build -trimpath -ldflags "-s -w" -o $RP/bin/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  echo "containerd v2 built in $(( $(date +%s)-t )) s"; cd $RP
fi
[ "${WITH_RAY:-0}" = 1 ] && { [ -f worker/worker-ray-oci.tar ] || ./worker/build-ray.sh; }
exit 0
