#! expect: generic_secret@2
pip install wandb
export WANDB_API_KEY={{hex40}}
wandb login
