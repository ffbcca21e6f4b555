#!/usr/bin/env bash
# RLark worker bootstrap: what runs inside every worker of a job (ARCHITECTURE §6).
#
# The same script runs in a Kubernetes pod and in a local-runtime process group. It:
#   1. writes the selected public keys to ~/.ssh/authorized_keys (dir 700, file 600) and starts
#      sshd when one is installed (a missing sshd is not an error); not as root, an unprivileged sshd
#      with the worker's own host key that lets only this user in;
#   2. exports RLINF_NODE_RANK and the platform variables BEFORE `ray start` (Ray freezes the
#      environment of its processes at start; RLinf reads the rank from there);
#   3. runs the prepare script under `bash -e -o pipefail`; variables it exports (a venv
#      activation, say) carry over to `ray start` and the run script; a failure ends the worker
#      with the script's exit code;
#   4. Header: `ray start --head` on its own address with fixed, declared ports, serving Ray's
#      dashboard and state API on RLARK_RAY_DASHBOARD_PORT bound to that address (RLinf's failure
#      handler and `ray list` need it; it costs the head about 200 MiB), started again after a
#      failure up to RLARK_HEAD_START_ATTEMPTS times (3) within the join deadline; others wait until the
#      head's GCS port answers, then `ray start --address=<header>:<port>`, retrying until the
#      join deadline (counted from the head's first answer). Every worker exports RAY_ADDRESS
#      and RAY_API_SERVER_ADDRESS (http://<header>:<dashboard port>) before `ray start`;
#   5. Header: waits until all expected Ray nodes (and GPUs) registered, or fails with
#      "2/3 Ray nodes joined after 120s"; with more than one node, checks that every other
#      node answers on its raylet and object manager ports (through the tunnels, in a network
#      domain), retrying until RLARK_REACH_DEADLINE_S, or fails with each silent address:port
#      named ("peer 10.200.0.3 did not answer on 6380 (Ray raylet) within 30s: Connection
#      timed out"); then runs the run script under `bash -e -o pipefail` with RAY_ADDRESS set
#      and exits with its code. Other workers stay up until stopped (they exit 1 if their
#      raylet dies);
#   6. prints marker lines `##rlark {"event":...}` on stdout (parsed by markers.py) and, on any
#      exit, stops its own processes (never `ray stop`, which acts on the whole host) and prints
#      the output manifest of the declared output paths.
#
# Inputs (environment). Required: RLARK_JOB_ID RLARK_WORKER_ID RLARK_ROLE RLARK_WORKER_INDEX
# RLARK_NODE_RANK RLARK_NUM_NODES RLARK_IS_HEADER (1|0); RLARK_HEADER_ADDRESS (non-Header).
# Optional: RLARK_NODE_IP (default: first address of `hostname -I`), RLARK_RAY_PORT (6379) and
# the other RLARK_RAY_*_PORT variables (defaults below), RLARK_GPUS, RLARK_EXPECTED_GPUS,
# RLARK_NUM_CPUS, RLARK_JOIN_DEADLINE_S (120), RLARK_REACH_DEADLINE_S (30: how long the Header's
# peer check retries), RLARK_PREPARE_SCRIPT and RLARK_RUN_SCRIPT (paths),
# RLARK_AUTHORIZED_KEYS_FILE, RLARK_OUTPUTS (':'-separated), RLARK_TENSORBOARD_DIR,
# RLARK_WORKDIR (default $HOME/work), RLARK_RAY_TEMP_DIR (default /tmp/ray), RLARK_PYTHON,
# RLARK_RAY (the `ray` executable), RLARK_START_SSHD (1), RLARK_SSH_PORT (22),
# RLARK_HEAD_WAIT_S (0: wait for the head's port without limit), RLARK_HEAD_START_ATTEMPTS (3),
# RLARK_STOP_GRACE_S (2), RLARK_MANIFEST_MAX_FILES (10000), RLARK_STATUS_FILE (exit status JSON),
# RLARK_TERMINATION_GRACE_S (the Header's run script's time after SIGTERM before the rest is stopped),
# RLARK_PROGRESS_DEADLINE_S and RLARK_PROGRESS_POLL_S (the Header reports new TensorBoard steps under
# RLARK_TENSORBOARD_DIR, else the outputs, every POLL seconds),
# RLARK_BOOTSTRAP_TOKEN (default: generated), RLARK_SSH_HOST_KEY (sshd runs as this user with that host
# key and reads RLARK_AUTHORIZED_KEYS_FILE: the local runtime's unprivileged workers; not root and unset, as
# in a Kubernetes pod: the bootstrap makes the key itself, $HOME/.ssh/ssh_host_ed25519_key), RLARK_GPU_SAMPLE_S
# (Kubernetes, workers holding GPUs: when the container has `nvidia-smi`, print its GPUs' use every that
# many seconds as `gpus_sampled` markers; unset, or no `nvidia-smi`: nothing starts), RAY_AUTH_MODE and
# RAY_AUTH_TOKEN_PATH (Ray's own: the job attempt's token, kept through the prepare script), RLARK_SECRETS_DIR and
# RLARK_SECRET_ENV (named secrets: their files, and the variables set from them).
#
# Exit codes: the prepare/run script's code; 124 when Ray nodes did not join in time; 69
# (EX_UNAVAILABLE) when a peer's Ray ports did not answer the Header; 64 when these inputs are
# wrong; 128+N when stopped by signal N.

set -u
set -o pipefail

RLARK_BOOTSTRAP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HELPER="$RLARK_BOOTSTRAP_DIR/rlark_node.py"

marker() { printf '##rlark %s\n' "$1"; }

json_str() { # a JSON string literal for $1
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}

log() { printf 'rlark-bootstrap: %s\n' "$*" >&2; }

# --- inputs -------------------------------------------------------------------------------------
missing=()
for name in RLARK_JOB_ID RLARK_WORKER_ID RLARK_ROLE RLARK_WORKER_INDEX RLARK_NODE_RANK \
  RLARK_NUM_NODES RLARK_IS_HEADER; do
  [[ -n ${!name:-} ]] || missing+=("$name")
done
if [[ ${RLARK_IS_HEADER:-} != 1 && -z ${RLARK_HEADER_ADDRESS:-} ]]; then
  missing+=(RLARK_HEADER_ADDRESS)
fi
if ((${#missing[@]})); then
  log "missing required variables: ${missing[*]}"
  exit 64
fi

IS_HEADER=$RLARK_IS_HEADER
NODE_IP=${RLARK_NODE_IP:-}
if [[ -z $NODE_IP ]]; then
  NODE_IP=$(hostname -I 2>/dev/null | awk '{print $1}')
  NODE_IP=${NODE_IP:-127.0.0.1}
fi
RAY_PORT=${RLARK_RAY_PORT:-6379}
DASHBOARD_PORT=${RLARK_RAY_DASHBOARD_PORT:-8265}
HEADER_HOST=${RLARK_HEADER_ADDRESS:-}
[[ $IS_HEADER == 1 && -z $HEADER_HOST ]] && HEADER_HOST=$NODE_IP
JOIN_DEADLINE=${RLARK_JOIN_DEADLINE_S:-120}
JOIN_DEADLINE=${JOIN_DEADLINE%%.*}
WORKDIR=${RLARK_WORKDIR:-$HOME/work}
RAY_TEMP=${RLARK_RAY_TEMP_DIR:-/tmp/ray}
STOP_GRACE=${RLARK_STOP_GRACE_S:-2}
RAY_BIN=${RLARK_RAY:-ray}
# Marks our processes (see rlark_node.py `Ours`); a runtime may choose it to find them too.
export RLARK_BOOTSTRAP_TOKEN=${RLARK_BOOTSTRAP_TOKEN:-"${RLARK_WORKER_ID}.$$.${RANDOM}${RANDOM}"}

# Ray's token authentication as the runtime set it (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH: the job attempt's
# token, ADR 0022): pinned like the platform's variables, so a prepare script cannot start Ray open.
RAY_AUTH_PINNED_MODE=${RAY_AUTH_MODE:-}
RAY_AUTH_PINNED_PATH=${RAY_AUTH_TOKEN_PATH:-}

# The platform's variables; exported now and again after the prepare script, so a prepare
# script cannot change the rank or the Ray address Ray will freeze.
export_platform_env() {
  export RLINF_NODE_RANK=$RLARK_NODE_RANK
  export RLARK_JOB_ID RLARK_WORKER_ID RLARK_ROLE RLARK_WORKER_INDEX RLARK_NODE_RANK RLARK_NUM_NODES
  export RAY_ADDRESS="$HEADER_HOST:$RAY_PORT"
  # Ray's state API and job CLI read this before asking the GCS where the dashboard is.
  export RAY_API_SERVER_ADDRESS="http://$HEADER_HOST:$DASHBOARD_PORT"
  export RLARK_OUTPUTS=${RLARK_OUTPUTS:-}
  export RLARK_TENSORBOARD_DIR=${RLARK_TENSORBOARD_DIR:-}
  export RLARK_NODE_IP=$NODE_IP
  export RLARK_WORKDIR=$WORKDIR
  if [[ -n $RAY_AUTH_PINNED_PATH ]]; then
    export RAY_AUTH_MODE=$RAY_AUTH_PINNED_MODE RAY_AUTH_TOKEN_PATH=$RAY_AUTH_PINNED_PATH
    unset RAY_AUTH_TOKEN # Ray would prefer it to the file
  fi
}
export_platform_env

find_python() {
  if [[ -n ${RLARK_PYTHON:-} ]]; then
    PY=$RLARK_PYTHON
  else
    PY=$(command -v python3 || command -v python || true)
  fi
}
find_python

# --- exit: stop our processes, list outputs, report -------------------------------------------
CHILD=
RUN_TOKEN=
SSHD_PID=
FINAL_RC=

# Run a command as a background child and wait for it, so that a SIGTERM reaches our trap at
# once instead of after the command (bash defers traps during a foreground command).
run_child() {
  "$@" &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=
  return "$rc"
}

# Our processes: our process group, our token in their environment, our Ray temp dir in their
# command line (see rlark_node.py `Ours`).
ours=(--token "$RLARK_BOOTSTRAP_TOKEN" --group-of "$$" --match "$RAY_TEMP/")

reap() {
  [[ -n $PY ]] || return 0
  "$PY" "$HELPER" reap "${ours[@]}" --grace "$STOP_GRACE" "$@" >&2
}

on_exit() {
  local rc=$?
  # Cleanup runs to its end even if a stop arrives now (the Header may be stopped right after
  # its run script exits): the manifest must not be lost. The runtime's SIGKILL still bounds it.
  trap - EXIT
  trap '' TERM INT HUP
  [[ -n $FINAL_RC ]] && rc=$FINAL_RC
  reap
  if [[ -n $PY && -n $RLARK_OUTPUTS ]]; then
    local outs=()
    IFS=: read -r -a outs <<<"$RLARK_OUTPUTS"
    "$PY" "$HELPER" manifest --limit "${RLARK_MANIFEST_MAX_FILES:-10000}" "${outs[@]}"
  fi
  if [[ -n ${RLARK_STATUS_FILE:-} ]]; then
    printf '{"exit_code":%d}\n' "$rc" >"$RLARK_STATUS_FILE.tmp" &&
      mv -f "$RLARK_STATUS_FILE.tmp" "$RLARK_STATUS_FILE"
  fi
  exit "$rc"
}

on_signal() { # $1 name, $2 number
  marker "{\"event\":\"stopping\",\"signal\":\"$1\"}"
  FINAL_RC=$((128 + $2))
  if [[ -n $RUN_TOKEN && ${RLARK_TERMINATION_GRACE_S:-0} -gt 0 ]]; then
    # The job's termination grace: the run script gets SIGTERM and this long to save a checkpoint and
    # exit before the rest of the worker (Ray) is stopped.
    "$PY" "$HELPER" term-run-script "$RUN_TOKEN" --grace "$RLARK_TERMINATION_GRACE_S" >&2
  fi
  exit "$FINAL_RC"
}

trap on_exit EXIT
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT
trap 'on_signal HUP 1' HUP

finish() { # exit with $1 (after the EXIT trap's cleanup)
  FINAL_RC=$1
  exit "$1"
}

# --- 1. keys and sshd -----------------------------------------------------------------------
install_keys() {
  local ssh_dir="$HOME/.ssh" count=0 tmp
  mkdir -p "$ssh_dir" && chmod 700 "$ssh_dir" || return 1
  tmp="$ssh_dir/.authorized_keys.$$"
  (
    umask 077
    : >"$tmp"
    if [[ -n ${RLARK_AUTHORIZED_KEYS_FILE:-} && -r $RLARK_AUTHORIZED_KEYS_FILE ]]; then
      # Public keys only: a line that looks like key material is dropped, never echoed.
      grep -v -e 'PRIVATE KEY' -e '^[[:space:]]*$' "$RLARK_AUTHORIZED_KEYS_FILE" >"$tmp" || true
    fi
  ) || return 1
  chmod 600 "$tmp" && mv -f "$tmp" "$ssh_dir/authorized_keys" || return 1
  count=$(grep -c . "$ssh_dir/authorized_keys" || true)
  marker "{\"event\":\"keys_installed\",\"count\":${count:-0}}"
}

start_sshd() {
  [[ ${RLARK_START_SSHD:-1} == 1 ]] || return 0
  local sshd_bin port=${RLARK_SSH_PORT:-22}
  sshd_bin=$(command -v sshd || true)
  [[ -z $sshd_bin && -x /usr/sbin/sshd ]] && sshd_bin=/usr/sbin/sshd
  if [[ -z $sshd_bin ]]; then
    log "no sshd in this image; SSH access is not available"
    return 0
  fi
  mkdir -p /run/sshd 2>/dev/null || true
  local sshd_args=(-o "AuthorizedKeysFile=$HOME/.ssh/authorized_keys") host_key=${RLARK_SSH_HOST_KEY:-} user
  user=$(id -un 2>/dev/null || true)
  if [[ -z $host_key && $(id -u) != 0 ]]; then
    # Not root (a Kubernetes pod's runAsUser, say): the image's host keys are root's and Debian's
    # configuration (PAM, privilege separation) needs root, so this worker's sshd gets a host key of its own.
    host_key=$(own_host_key) || {
      log "cannot make a host key in $HOME/.ssh (no ssh-keygen?); SSH access is not available"
      return 0
    }
  fi
  if [[ -n $host_key ]]; then
    # The unprivileged sshd: it runs as this worker's user with the worker's own host key and reads the keys
    # file the runtime writes (rotations land there), from a path under /tmp perhaps. It can only let its own
    # user in (logging in as anyone else fails after the key was accepted: "Failed to set uids to 0."), so
    # it refuses every other name at once, and says why in its log.
    sshd_args=(-h "$host_key" -o "AuthorizedKeysFile=${RLARK_AUTHORIZED_KEYS_FILE:-$HOME/.ssh/authorized_keys}"
      -o UsePAM=no -o PidFile=none -o StrictModes=no)
    if [[ -n $user ]]; then
      sshd_args+=(-o "AllowUsers=$user")
    else
      log "uid $(id -u) has no entry in this image's /etc/passwd: sshd can let no one in (log in as the" \
        "image's user of that uid: add one, or set the runtime's user to one the image has)"
    fi
  fi
  "$sshd_bin" -D -e -p "$port" "${sshd_args[@]}" &
  SSHD_PID=$!
  marker "{\"event\":\"sshd_started\",\"port\":$port,\"user\":$(json_str "$user")}"
}

# This worker's own ed25519 host key (made once, mode 600, in a directory only its user reads); prints its path.
own_host_key() {
  local key="$HOME/.ssh/ssh_host_ed25519_key"
  command -v ssh-keygen >/dev/null 2>&1 || return 1
  mkdir -p "$HOME/.ssh" && chmod 700 "$HOME/.ssh" || return 1
  if [[ ! -s $key ]]; then
    rm -f "$key" "$key.pub"
    (umask 077 && ssh-keygen -q -t ed25519 -N '' -C "rlark-worker-host" -f "$key" </dev/null >/dev/null) ||
      return 1
  fi
  printf '%s\n' "$key"
}

mkdir -p "$WORKDIR" && cd "$WORKDIR" || {
  log "cannot use workdir $WORKDIR"
  finish 64
}
if [[ -n $RLARK_OUTPUTS ]]; then
  IFS=: read -r -a _outs <<<"$RLARK_OUTPUTS"
  for _o in "${_outs[@]}"; do mkdir -p "$_o" 2>/dev/null || log "cannot create output $_o"; done
fi
install_keys || log "could not write $HOME/.ssh/authorized_keys"
start_sshd

# --- named secrets as variables ----------------------------------------------------------------
# RLARK_SECRET_ENV="VAR=name,..." (ADR 0025): each VAR from the file of its secret in RLARK_SECRETS_DIR, which only
# this worker reads; the environment the runtime gave names files, never values. Exported before the prepare
# script, so it, Ray's processes and the run script see them.
if [[ -n ${RLARK_SECRET_ENV:-} ]]; then
  IFS=, read -r -a _pairs <<<"$RLARK_SECRET_ENV"
  for _pair in "${_pairs[@]}"; do
    _var=${_pair%%=*}
    _name=${_pair#*=}
    if [[ ! $_var =~ ^[A-Za-z_][A-Za-z0-9_]*$ || ! -r ${RLARK_SECRETS_DIR:-}/$_name ]]; then
      log "the secret $_name for $_var is not in ${RLARK_SECRETS_DIR:-its directory}"
      finish 64
    fi
    export "$_var=$(<"$RLARK_SECRETS_DIR/$_name")"
  done
  unset _pairs _pair _var _name
fi

# --- 3. prepare script --------------------------------------------------------------------------
if [[ -n ${RLARK_PREPARE_SCRIPT:-} ]]; then
  marker '{"event":"prepare_started"}'
  env_dump=$(mktemp "${TMPDIR:-/tmp}/rlark-prepare-env.XXXXXX")
  # One command per line, so errexit is in force inside the sourced script; the last line
  # records the environment the script leaves behind.
  run_child bash -e -o pipefail -c 'source "$1"
env -0 >"$2"' rlark-prepare "$RLARK_PREPARE_SCRIPT" "$env_dump"
  rc=$?
  if ((rc != 0)); then
    rm -f "$env_dump"
    marker "{\"event\":\"prepare_failed\",\"exit_code\":$rc}"
    finish "$rc"
  fi
  while IFS= read -r -d '' kv; do
    name=${kv%%=*}
    case $name in
    _ | PWD | OLDPWD | SHLVL | RLARK_BOOTSTRAP_TOKEN) continue ;;
    esac
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && export "$kv"
  done <"$env_dump"
  rm -f "$env_dump"
  export_platform_env
  find_python
  cd "$WORKDIR" || finish 64
  marker '{"event":"prepare_done"}'
fi
if [[ -z $PY ]]; then
  log "no python3 on PATH (set RLARK_PYTHON); Ray needs one"
  finish 64
fi

# --- GPU samples --------------------------------------------------------------------------------
# Only where the runtime asks (Kubernetes gives RLARK_GPU_SAMPLE_S to workers holding GPUs; its agent uses
# them where no DCGM exporter measures the pod, ADR 0017) and the container can see its GPUs. In our process
# group and with our token, so `reap` ends it with the rest.
GPU_SAMPLER_PID=
if [[ -n ${RLARK_GPU_SAMPLE_S:-} ]] && command -v nvidia-smi >/dev/null 2>&1; then
  "$PY" "$HELPER" gpu-usage --interval "$RLARK_GPU_SAMPLE_S" &
  GPU_SAMPLER_PID=$!
fi

# --- 4. Ray -------------------------------------------------------------------------------------
ray_args=(
  --node-ip-address="$NODE_IP"
  --temp-dir="$RAY_TEMP"
  --disable-usage-stats
  --node-manager-port="${RLARK_RAY_NODE_MANAGER_PORT:-6380}"
  --object-manager-port="${RLARK_RAY_OBJECT_MANAGER_PORT:-6381}"
  --dashboard-agent-grpc-port="${RLARK_RAY_DASHBOARD_AGENT_GRPC_PORT:-6382}"
  --dashboard-agent-listen-port="${RLARK_RAY_DASHBOARD_AGENT_LISTEN_PORT:-6383}"
  --metrics-export-port="${RLARK_RAY_METRICS_EXPORT_PORT:-6384}"
  --runtime-env-agent-port="${RLARK_RAY_RUNTIME_ENV_AGENT_PORT:-6385}"
  --min-worker-port="${RLARK_RAY_MIN_WORKER_PORT:-10002}"
  --max-worker-port="${RLARK_RAY_MAX_WORKER_PORT:-10999}"
  --num-gpus="${RLARK_GPUS:-0}"
)
[[ -n ${RLARK_NUM_CPUS:-} ]] && ray_args+=(--num-cpus="$RLARK_NUM_CPUS")

# What a failed `ray start` attempt's clean-up leaves running.
keep=()
[[ -n $SSHD_PID ]] && keep=(--keep "$SSHD_PID")
[[ -n $GPU_SAMPLER_PID ]] && keep+=(--keep "$GPU_SAMPLER_PID")

if [[ $IS_HEADER == 1 ]]; then
  # Ray gives the head's raylet a fixed 30 s to register with its GCS: on a loaded node `ray start --head`
  # can fail for that alone ("The current node timed out during startup"). So a failed start is cleaned up
  # and tried again, RLARK_HEAD_START_ATTEMPTS times in all (3) within the join deadline; a start that
  # timed out (124) is not retried. The workers keep retrying their join meanwhile.
  attempts=${RLARK_HEAD_START_ATTEMPTS:-3}
  deadline=$((SECONDS + JOIN_DEADLINE))
  for ((attempt = 1; ; attempt++)); do
    remaining=$((deadline - SECONDS))
    ((remaining > 0)) || remaining=1
    # `timeout --foreground` keeps Ray in our process group (plain `timeout` makes a new one).
    run_child timeout --foreground -k 5 "$remaining" "$RAY_BIN" start --head \
      --port="$RAY_PORT" --include-dashboard=true --dashboard-host="$NODE_IP" \
      --dashboard-port="$DASHBOARD_PORT" "${ray_args[@]}"
    rc=$?
    ((rc == 0)) && break
    if ((attempt >= attempts || rc == 124 || deadline - SECONDS <= 1)); then
      marker "{\"event\":\"ray_start_failed\",\"exit_code\":$rc}"
      finish "$rc"
    fi
    log "ray start --head failed with $rc (attempt $attempt of $attempts); cleaning up and starting again"
    reap "${keep[@]}"
    run_child sleep 1
  done
  marker "{\"event\":\"ray_head_up\",\"address\":$(json_str "$RAY_ADDRESS")}"

  # --- 5. wait for every node, then the run script ------------------------------------------
  run_child "$PY" "$HELPER" wait-nodes "$RAY_ADDRESS" --expected "$RLARK_NUM_NODES" \
    --gpus "${RLARK_EXPECTED_GPUS:-0}" --deadline "$JOIN_DEADLINE"
  rc=$?
  ((rc == 0)) || finish "$rc"

  # Registered is not reachable: a node joins by calling the GCS, but the job's traffic goes to
  # each node's raylet and object manager. Prove those answer now, so a broken tunnel fails the
  # job with the silent addresses named instead of as a Ray timeout minutes into the run.
  if ((RLARK_NUM_NODES > 1)); then
    run_child "$PY" "$HELPER" reach "$RAY_ADDRESS" --deadline "${RLARK_REACH_DEADLINE_S:-30}"
    rc=$?
    ((rc == 0)) || finish "$rc"
  fi

  if [[ -z ${RLARK_RUN_SCRIPT:-} ]]; then
    log "the Header has no run script"
    finish 64
  fi
  step_dirs=${RLARK_TENSORBOARD_DIR:-${RLARK_OUTPUTS:-}}
  if [[ -n ${RLARK_PROGRESS_DEADLINE_S:-} && -n $step_dirs ]]; then
    # The job has a progress deadline: new TensorBoard steps count as progress (the agent watches for
    # them beside the Header's output lines). In our process group, so `reap` ends it with the rest.
    IFS=: read -r -a step_outs <<<"$step_dirs"
    "$PY" "$HELPER" tensorboard-steps --interval "${RLARK_PROGRESS_POLL_S:-10}" "${step_outs[@]}" &
  fi
  marker '{"event":"run_started"}'
  RUN_TOKEN="run.$$.${RANDOM}${RANDOM}"
  RLARK_RUN_TOKEN=$RUN_TOKEN bash -e -o pipefail "$RLARK_RUN_SCRIPT" &
  CHILD=$!
  wait "$CHILD"
  rc=$?
  CHILD=
  marker "{\"event\":\"run_exited\",\"exit_code\":$rc}"
  finish "$rc"
fi

# A worker joins. First it waits, cheaply, for the head's GCS port: the Header may still be
# running a long prepare script, so this wait is bounded only by RLARK_HEAD_WAIT_S (default: none;
# the agent stops the workers of a job whose Header failed). The join deadline starts when the
# head answers; failed `ray start` attempts are cleaned up and retried until it passes.
if ! run_child "$PY" "$HELPER" probe "$RAY_ADDRESS" --deadline "${RLARK_HEAD_WAIT_S:-0}"; then
  reason="the Ray head at $RAY_ADDRESS did not answer within ${RLARK_HEAD_WAIT_S:-0}s"
  marker "{\"event\":\"ray_join_failed\",\"address\":$(json_str "$RAY_ADDRESS"),\"reason\":$(json_str "$reason")}"
  finish 124
fi
deadline=$((SECONDS + JOIN_DEADLINE))
reason="could not join the Ray head at $RAY_ADDRESS within ${JOIN_DEADLINE}s"
while :; do
  remaining=$((deadline - SECONDS))
  ((remaining > 0)) || break
  run_child timeout --foreground -k 5 "$remaining" "$RAY_BIN" start --address="$RAY_ADDRESS" \
    "${ray_args[@]}"
  rc=$?
  if ((rc == 0)); then
    marker "{\"event\":\"ray_joined\",\"address\":$(json_str "$RAY_ADDRESS")}"
    raylet=$("$PY" "$HELPER" pid-of "${ours[@]}" raylet)
    # Stay up until stopped; if our raylet dies the node is gone and so is this worker.
    while [[ -z $raylet ]] || kill -0 "$raylet" 2>/dev/null; do
      run_child sleep 2
    done
    marker '{"event":"ray_node_lost","reason":"the raylet exited"}'
    finish 1
  fi
  reason="ray start --address=$RAY_ADDRESS failed with $rc (last attempt)"
  log "ray start --address=$RAY_ADDRESS failed with $rc; retrying"
  reap "${keep[@]}"
  run_child sleep 1
done
marker "{\"event\":\"ray_join_failed\",\"address\":$(json_str "$RAY_ADDRESS"),\"reason\":$(json_str "$reason")}"
finish 124
