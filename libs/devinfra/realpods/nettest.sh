#!/bin/bash
# nettest.sh KUBECONFIG NODE: pod-to-pod, pod-to-host, host-to-pod over the CNI bridge.
set -euo pipefail
KCFG=$1; NODE=$2; NS=default
SERVER=$(python3 -c "import json; print(json.load(open('$KCFG'))['clusters'][0]['cluster']['server'])")
CA=$(python3 -c "import json; print(json.load(open('$KCFG'))['clusters'][0]['cluster']['certificate-authority'])")
TOKEN=$(python3 -c "import json; print(json.load(open('$KCFG'))['users'][0]['user']['token'])")
api() { curl -sS --cacert $CA -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }
pod() { # name, command
  api -X POST "$SERVER/api/v1/namespaces/$NS/pods" -o /dev/null -w "POST $1 %{http_code}\n" -d "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",
  \"metadata\":{\"name\":\"$1\"},\"spec\":{\"nodeName\":\"$NODE\",\"restartPolicy\":\"Never\",\"automountServiceAccountToken\":false,
  \"containers\":[{\"name\":\"main\",\"image\":\"rlark.local/worker:bookworm\",\"imagePullPolicy\":\"Never\",\"command\":[\"sh\",\"-c\",$2]}]}}"
}
field() { api "$SERVER/api/v1/namespaces/$NS/pods/$1" | python3 -c "import json,sys; p=json.load(sys.stdin); print(p['status'].get('$2',''))"; }
HOSTIP=$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
python3 -m http.server 18080 --bind 0.0.0.0 >/dev/null 2>&1 & HS=$!
pod srv "\"echo srv-ok > /tmp/index.html; cd /tmp && exec python3 -m http.server 8080\""
for i in $(seq 50); do ip=$(field srv podIP); [ -n "$ip" ] && [ "$(field srv phase)" = Running ] && break; sleep 0.3; done
echo "srv podIP=$ip"; sleep 1
echo "host -> pod: $(curl -s --max-time 5 http://$ip:8080/index.html)"
pod cli "\"python3 -c 'import urllib.request as u; print(\\\"pod->pod\\\", u.urlopen(\\\"http://$ip:8080/index.html\\\", timeout=5).read().decode().strip()); print(\\\"pod->host\\\", u.urlopen(\\\"http://$HOSTIP:18080/\\\", timeout=5).status)'; ip -4 -br addr show eth0\""
for i in $(seq 60); do ph=$(field cli phase); case $ph in Succeeded|Failed) break;; esac; sleep 0.5; done
echo "cli phase=$ph podIP=$(field cli podIP)"; api "$SERVER/api/v1/namespaces/$NS/pods/cli/log"
kill $HS
for p in srv cli; do api -X DELETE "$SERVER/api/v1/namespaces/$NS/pods/$p?gracePeriodSeconds=0" -o /dev/null; done
