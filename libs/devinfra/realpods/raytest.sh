#!/bin/bash
# raytest.sh KUBECONFIG NODE: a pod from the Ray image starts a local Ray head and runs a task.
KCFG=$1; NODE=$2; NAME=ray-$(date +%s)
SERVER=$(python3 -c "import json; print(json.load(open('$KCFG'))['clusters'][0]['cluster']['server'])")
CA=$(python3 -c "import json; print(json.load(open('$KCFG'))['clusters'][0]['cluster']['certificate-authority'])")
TOKEN=$(python3 -c "import json; print(json.load(open('$KCFG'))['users'][0]['user']['token'])")
api() { curl -sS --cacert $CA -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' "$@"; }
PY='import ray, time; t=time.time(); ray.init(num_cpus=1, include_dashboard=False); print("ray", ray.__version__, "init", round(time.time()-t,1), "s"); print("task ->", ray.get(ray.remote(lambda: "hello-from-ray-task").remote())); ray.shutdown()'
BODY=$(python3 -c "import json,sys; print(json.dumps({'apiVersion':'v1','kind':'Pod','metadata':{'name':'$NAME'},'spec':{'nodeName':'$NODE','restartPolicy':'Never','automountServiceAccountToken':False,'containers':[{'name':'main','image':'rlark.local/worker:bookworm-ray2.60.0','imagePullPolicy':'Never','command':['python','-c',sys.argv[1]],'resources':{'limits':{'memory':'4Gi'}}}]}}))" "$PY")
t0=$(date +%s); api -X POST "$SERVER/api/v1/namespaces/default/pods" -d "$BODY" -o /dev/null -w "POST %{http_code}\n"
for i in $(seq 240); do ph=$(api "$SERVER/api/v1/namespaces/default/pods/$NAME" | python3 -c "import json,sys; print(json.load(sys.stdin)['status'].get('phase'))"); case $ph in Succeeded|Failed) break;; esac; sleep 0.5; done
echo "phase=$ph after $(( $(date +%s)-t0 )) s"; api "$SERVER/api/v1/namespaces/default/pods/$NAME/log" | tail -15
