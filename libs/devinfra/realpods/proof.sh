#!/bin/bash
# proof.sh KUBECONFIG NODE [NAME] [IMAGE]: POST a Pod bound to NODE with curl, watch its phase, fetch its log.
set -euo pipefail
KCFG=$1; NODE=$2; NAME=${3:-hello-$(date +%s)}; IMAGE=${4:-rlark.local/worker:bookworm}; NS=default
SERVER=$(python3 -c "import json,sys; c=json.load(open('$KCFG')); print(c['clusters'][0]['cluster']['server'])")
CA=$(python3 -c "import json,sys; c=json.load(open('$KCFG')); print(c['clusters'][0]['cluster']['certificate-authority'])")
TOKEN=$(python3 -c "import json,sys; c=json.load(open('$KCFG')); print(c['users'][0]['user']['token'])")
api() { curl -sS --cacert $CA -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }
BODY=$(cat <<JSON
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$NAME","namespace":"$NS"},
 "spec":{"nodeName":"$NODE","restartPolicy":"Never","automountServiceAccountToken":false,
  "containers":[{"name":"main","image":"$IMAGE","imagePullPolicy":"Never",
   "command":["sh","-c","echo hello-from-pod; python3 -c \"import sys; print(sys.version)\"; sleep 5; echo done"]}]}}
JSON
)
t0=$(date +%s.%N)
api -X POST "$SERVER/api/v1/namespaces/$NS/pods" -d "$BODY" -o /dev/null -w "POST %{http_code}\n"
last=""
while true; do
  phase=$(api "$SERVER/api/v1/namespaces/$NS/pods/$NAME" | python3 -c "import json,sys; p=json.load(sys.stdin); print(p['status'].get('phase','?'), p['status'].get('podIP','-'))")
  if [ "$phase" != "$last" ]; then printf '%6.2fs %s\n' $(echo "$(date +%s.%N) - $t0" | bc) "$phase"; last=$phase; fi
  case $phase in Succeeded*|Failed*) break;; esac
  [ $(echo "$(date +%s.%N) - $t0 > 120" | bc) = 1 ] && { echo TIMEOUT; break; }
  sleep 0.2
done
echo "--- GET .../pods/$NAME/log:"
api "$SERVER/api/v1/namespaces/$NS/pods/$NAME/log"
echo "--- container status:"
api "$SERVER/api/v1/namespaces/$NS/pods/$NAME" | python3 -c "import json,sys; p=json.load(sys.stdin); print(json.dumps(p['status'].get('containerStatuses'), indent=1)[:1500])"
