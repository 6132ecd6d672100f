"""make_model.py OUT — a small Llama-style model saved the way the Hub ships
models: bf16 safetensors shards, model.safetensors.index.json, config.json.
Weights are random (N(0, 0.02) init), which pack like trained ones (DESIGN §5)."""
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main(out, shard="4MB"):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=256,
                      torch_dtype="bfloat16", tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, max_shard_size=shard, safe_serialization=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
