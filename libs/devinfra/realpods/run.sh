#!/bin/bash
# run.sh: two real nodes (realnode-1 on cluster "alpha", realnode-2 on "beta"), each a containerd 1.6 +
# real kubelet v1.36.3 pair (CTRD=2: containerd v2.4.2 built from Go modules instead of Debian's 1.6.20), against KWOK-less API servers built by the test bed; then the proofs.
set -euo pipefail
RP=/tmp/realpods; cd $RP
./build.sh
[ -f state.ip_forward ] || cat /proc/sys/net/ipv4/ip_forward > state.ip_forward   # CNI bridge turns it on
modprobe br_netfilter 2>/dev/null || true
for n in "alpha 1" "beta 2"; do
  set -- $n
  ./apiserver.sh $1 $2
  if [ "${CTRD:-1}" = 2 ]; then ./containerd2.sh $1 $2; else ./containerd.sh $1 $2 | grep -v '^sha256'; fi
  t=$(date +%s.%N)
  ./kubelet.sh $1 $2 $RP/$1/kubeconfig
  K=$RP/$1/kubeconfig; S=$(python3 -c "import json; print(json.load(open('$K'))['clusters'][0]['cluster']['server'])")
  for i in $(seq 120); do
    curl -s --cacert pki/ca.crt -H "Authorization: Bearer $(cat $1/admin.token)" $S/api/v1/nodes/realnode-$2 | \
      python3 -c "import json,sys; n=json.load(sys.stdin); st=n.get('status'); st=st if isinstance(st, dict) else {}; sys.exit(0 if any(c['type']=='Ready' and c['status']=='True' for c in st.get('conditions',[])) else 1)" && break
    sleep 0.5
  done
  printf 'realnode-%s Ready %.1f s after kubelet start\n' $2 $(echo "$(date +%s.%N) - $t" | bc)
done
./proof.sh alpha/kubeconfig realnode-1 hello-$(date +%s)
./proof.sh beta/kubeconfig realnode-2 hello-$(date +%s) > logs/proof-beta.log; head -7 logs/proof-beta.log
./nettest.sh alpha/kubeconfig realnode-1
[ -f worker/worker-ray-oci.tar ] && { ctr -a alpha/containerd/containerd.sock -n k8s.io images import worker/worker-ray-oci.tar; ./raytest.sh alpha/kubeconfig realnode-1; }
echo "run.sh: all up (./down.sh stops everything)"
