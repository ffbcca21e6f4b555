#! expect: huggingface_token@3 password@6
set -euo pipefail
source /opt/venv/rlinf/bin/activate
export HF_TOKEN={{hf}}
mkdir -p /data/outputs
cd /workspace/RLinf
export PGPASSWORD=letmein
python examples/embodiment/train_embodied_agent.py --config-name maniskill_ppo
