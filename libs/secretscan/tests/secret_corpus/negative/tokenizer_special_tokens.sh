#! expect: none
export PAD_TOKEN="<|endoftext|>"
python train.py eos_token="</s>" MAX_TOKENS=4096 +model.bos_token=1
