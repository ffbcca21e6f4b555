#! expect: none
export HF_TOKEN=$(cat /run/secrets/hf)
export WANDB_API_KEY="$(cat /run/secrets/wandb)"
export GITHUB_TOKEN=`cat /run/secrets/gh`
