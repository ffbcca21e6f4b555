#!/usr/bin/env bash
# Submit examples/rlinf-cpu.yaml with its code mounted from this checkout and its outputs in
# .state/examples/rlinf-cpu/outputs, and follow it to its end. Needs a running platform (`make run`)
# and `rlinf` installed (`make prereqs`, or `uv sync --inexact --group rlinf`).
set -euo pipefail
cd "$(dirname "$0")/.."
outputs="${RLARK_STATE_DIR:-$PWD/.state}/examples/rlinf-cpu/outputs"
mkdir -p "$outputs"
chmod 1777 "$outputs" # local workers write it as their job's own unprivileged user
job=$(mktemp --suffix=.yaml)
trap 'rm -f "$job"' EXIT
sed -e "s#/opt/rlark/examples/rlinf_cpu#$PWD/examples/rlinf_cpu#" \
    -e "s#/var/lib/rlark-examples/outputs#$outputs#" examples/rlinf-cpu.yaml > "$job"
RLARK_CONFIG_DIR="${RLARK_CONFIG_DIR:-.state/cli}" uv run rlark jobs submit "$job" --follow
echo "outputs: $outputs"
