#!/bin/bash
# kubelet.sh CLUSTER INDEX KUBECONFIG : start a real kubelet for node realnode-INDEX against that API server.
set -euo pipefail
. /tmp/realpods/lib.sh
node_vars "$1" "$2"; KCFG=$3
NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')}
mkdir -p $D/kubelet/{root,pki,manifests} $D/logs
cp $KCFG $D/kubelet/kubeconfig
mkdir -p $D/pod-logs
# cgroup v1: create /rp-$CL in every hierarchy (the kubelet wants its cgroupRoot to exist)
for c in /sys/fs/cgroup/*/; do
  [ "$c" = /sys/fs/cgroup/unified/ ] && continue
  mkdir -p $c/rp-$CL
  if [ -f $c/cpuset.cpus ]; then cat $c/cpuset.cpus > $c/rp-$CL/cpuset.cpus; cat $c/cpuset.mems > $c/rp-$CL/cpuset.mems; fi
done
cat > $D/kubelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
# its own cgroup parent per node: two kubelets sharing /kubepods would delete each other's pod cgroups
cgroupRoot: /rp-$CL
podLogsDir: $D/pod-logs
failSwapOn: false
address: 0.0.0.0
port: $KPORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HPORT
enableServer: true
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://$CTRD_SOCK
imageServiceEndpoint: unix://$CTRD_SOCK
staticPodPath: $D/kubelet/manifests
tlsCertFile: ""
registerNode: true
podCIDR: $SUBNET
resolvConf: /etc/resolv.conf
cgroupsPerQOS: ${CGROUPS_PER_QOS:-true}
enforceNodeAllocatable: []
protectKernelDefaults: false
makeIPTablesUtilChains: false
localStorageCapacityIsolation: true
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
maxPods: 50
logging: {format: text}
featureGates: {}
YAML
setsid nohup $RP/bin/kubelet \
  --config=$D/kubelet/config.yaml \
  --kubeconfig=$D/kubelet/kubeconfig \
  --root-dir=$D/kubelet/root \
  --cert-dir=$D/kubelet/pki \
  --hostname-override=$NODE \
  --node-ip=$NODE_IP \
  --node-labels=rlark.io/real-node=true \
  --v=${KV:-2} >> $D/logs/kubelet.log 2>&1 < /dev/null &
echo $! > $D/kubelet.pid
echo "kubelet $NODE pid $(cat $D/kubelet.pid) port $KPORT ip $NODE_IP"
