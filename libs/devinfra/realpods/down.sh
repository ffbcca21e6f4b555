#!/bin/bash
# down.sh [--purge]: delete pods (so the kubelets tear down sandboxes and CNI), stop kubelets, containerds,
# API servers and etcd started by run.sh; unmount, remove bridges/cgroups; --purge also removes state dirs.
RP=/tmp/realpods; cd $RP; . ./lib.sh
alive() { [ -f "$1" ] && kill -0 $(cat "$1") 2>/dev/null; }
stop() { alive "$1" || return 0; local p=$(cat "$1"); kill $p; for i in $(seq 50); do kill -0 $p 2>/dev/null || return 0; sleep 0.2; done; kill -9 $p; }
for cl in alpha beta; do
  node_vars $cl 0; [ -d $D ] || continue
  if alive $D/kubelet.pid && alive $D/apiserver.pid; then
    S=$(python3 -c "import json; print(json.load(open('$D/kubeconfig'))['clusters'][0]['cluster']['server'])")
    curl -s --cacert pki/ca.crt -H "Authorization: Bearer $(cat $D/admin.token)" -X DELETE "$S/api/v1/namespaces/default/pods?gracePeriodSeconds=0" -o /dev/null
    for i in $(seq 60); do [ -z "$(ctr -a $CTRD_SOCK -n k8s.io tasks ls -q 2>/dev/null)" ] && break; sleep 0.5; done
    sleep 2   # let StopPodSandbox (CNI DEL) finish
  fi
  stop $D/kubelet.pid
  if alive $D/containerd.pid; then
    for t in $(ctr -a $CTRD_SOCK -n k8s.io tasks ls -q 2>/dev/null); do ctr -a $CTRD_SOCK -n k8s.io tasks kill -s KILL $t; done; sleep 1
    for t in $(ctr -a $CTRD_SOCK -n k8s.io tasks ls -q 2>/dev/null); do ctr -a $CTRD_SOCK -n k8s.io tasks rm -f $t; done
    for c in $(ctr -a $CTRD_SOCK -n k8s.io containers ls -q 2>/dev/null); do ctr -a $CTRD_SOCK -n k8s.io containers rm $c; done
  fi
  stop $D/containerd.pid
  # shims of this containerd (they carry its socket in their command line)
  for p in $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io .*-address $CTRD_SOCK" || true); do kill $p; done
  stop $D/apiserver.pid
done
stop $RP/etcd/etcd.pid
grep " $RP/" /proc/mounts | awk '{print $2}' | sort -r | while read m; do umount -l "$m"; done
for b in rpbr1 rpbr2; do ip link del $b 2>/dev/null; done
iptables-save -t nat | grep -E 'rp-(alpha|beta)' | sed -n 's/^-A \(POSTROUTING.*\)/\1/p' | while read r; do eval iptables -t nat -D $r; done
for ch in $(iptables-save -t nat | grep -oE '^:CNI-[0-9a-f]{24}'| tr -d :); do iptables -t nat -F $ch; iptables -t nat -X $ch; done 2>/dev/null
for cl in alpha beta; do for c in /sys/fs/cgroup/*/rp-$cl; do [ -d $c ] && find $c -depth -type d -exec rmdir {} \; 2>/dev/null; done; done
[ -f state.ip_forward ] && { cat state.ip_forward > /proc/sys/net/ipv4/ip_forward; rm state.ip_forward; }
if [ "${1:-}" = --purge ]; then rm -rf $RP/alpha $RP/beta $RP/etcd $RP/pki; fi
echo "down.sh: done"; pgrep -af "$RP" || true
