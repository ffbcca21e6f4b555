#! expect: huggingface_token@2
source /opt/venv/rlinf/bin/activate
huggingface-cli login --token {{hf}}
