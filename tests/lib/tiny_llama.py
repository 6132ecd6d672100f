"""tiny_llama.py — the small random-weight Llama that the transformers and
serving tests save, pack and compare against (one definition for both)."""


def tiny_llama(seed, tied=False, layers=2, **config):
    """A LlamaForCausalLM in BF16 (vocab 512, hidden 64, 4 heads, 2 KV heads)
    with random weights from torch.manual_seed(seed); its norms are moved
    away from 1.0 so that they carry information too.  config: more
    LlamaConfig fields (token ids, say)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      tie_word_embeddings=tied, **config)
    torch.manual_seed(seed)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    return m.to(torch.bfloat16)
