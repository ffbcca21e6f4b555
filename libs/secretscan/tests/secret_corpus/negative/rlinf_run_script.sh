#! expect: none
set -euo pipefail
source /opt/venv/rlinf/bin/activate
cd /workspace/RLinf
python examples/embodiment/train_embodied_agent.py \
  --config-path /data/config --config-name maniskill_ppo_openvla \
  cluster.num_nodes=2 runner.save_interval=50 runner.logger.log_path=/data/outputs
