#!/bin/bash
# apiserver.sh CLUSTER INDEX : a test-bed-like API server WITHOUT KWOK (the test bed's KWOK runs with
# --manage-all-nodes and fights the real kubelet). Same binaries and flags as testbed.py; own etcd
# (shared by all realpods clusters, prefix /realpods-CLUSTER), own CA/token under /tmp/realpods.
set -euo pipefail
. /tmp/realpods/lib.sh
CL=$1; IDX=$2; D=$RP/$CL; mkdir -p $D/logs
BIN=${K8S_BIN:-$HOME/.cache/rlark/k8s-v1.36.3-v1/bin}
PKI=$RP/pki; mkdir -p $PKI
if [ ! -f $PKI/ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout $PKI/ca.key -out $PKI/ca.crt -days 30 -subj /CN=realpods-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout $PKI/serving.key -out $PKI/serving.csr -subj /CN=kube-apiserver 2>/dev/null
  openssl x509 -req -in $PKI/serving.csr -CA $PKI/ca.crt -CAkey $PKI/ca.key -CAcreateserial -days 30 -out $PKI/serving.crt \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth') 2>/dev/null
  openssl genrsa -out $PKI/sa.key 2048 2>/dev/null; openssl rsa -in $PKI/sa.key -pubout -out $PKI/sa.pub 2>/dev/null
fi
ETCD_PORT=23790
if ! curl -sf http://127.0.0.1:$ETCD_PORT/readyz >/dev/null; then
  mkdir -p $RP/etcd
  setsid nohup $BIN/etcd --name=realpods --data-dir=$RP/etcd/data --listen-client-urls=http://127.0.0.1:$ETCD_PORT \
    --advertise-client-urls=http://127.0.0.1:$ETCD_PORT --listen-peer-urls=http://127.0.0.1:23800 \
    --initial-advertise-peer-urls=http://127.0.0.1:23800 --initial-cluster=realpods=http://127.0.0.1:23800 \
    --unsafe-no-fsync=true --log-level=warn >> $RP/etcd/etcd.log 2>&1 < /dev/null &
  echo $! > $RP/etcd/etcd.pid
  for i in $(seq 100); do curl -sf http://127.0.0.1:$ETCD_PORT/readyz >/dev/null && break; sleep 0.2; done
fi
PORT=$((16440 + IDX))
[ -f $D/admin.token ] || openssl rand -hex 24 > $D/admin.token
TOKEN=$(cat $D/admin.token)
echo "$TOKEN,admin,admin-uid,\"system:masters\"" > $D/tokens.csv
if ! curl -sf --cacert $PKI/ca.crt -H "Authorization: Bearer $TOKEN" https://127.0.0.1:$PORT/readyz >/dev/null; then
  setsid nohup $BIN/kube-apiserver --etcd-servers=http://127.0.0.1:$ETCD_PORT --etcd-prefix=/realpods-$CL \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$PORT --cert-dir=$D/apiserver-certs \
    --tls-cert-file=$PKI/serving.crt --tls-private-key-file=$PKI/serving.key --service-cluster-ip-range=10.0.0.0/24 \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local --service-account-key-file=$PKI/sa.pub \
    --service-account-signing-key-file=$PKI/sa.key --authorization-mode=RBAC --token-auth-file=$D/tokens.csv \
    --anonymous-auth=false --allow-privileged=true --disable-admission-plugins=ServiceAccount,TaintNodesByCondition \
    --endpoint-reconciler-type=none --enable-priority-and-fairness=false --kubelet-preferred-address-types=InternalIP \
    --profiling=false --v=0 >> $D/logs/apiserver.log 2>&1 < /dev/null &
  echo $! > $D/apiserver.pid
  for i in $(seq 300); do curl -sf --cacert $PKI/ca.crt -H "Authorization: Bearer $TOKEN" https://127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.3; done
fi
cat > $D/kubeconfig <<JSON
{"apiVersion": "v1", "kind": "Config",
 "clusters": [{"name": "$CL", "cluster": {"server": "https://127.0.0.1:$PORT", "certificate-authority": "$PKI/ca.crt"}}],
 "users": [{"name": "$CL-admin", "user": {"token": "$TOKEN"}}],
 "contexts": [{"name": "$CL", "context": {"cluster": "$CL", "user": "$CL-admin"}}], "current-context": "$CL"}
JSON
chmod 600 $D/kubeconfig
echo "apiserver $CL https://127.0.0.1:$PORT kubeconfig $D/kubeconfig"
