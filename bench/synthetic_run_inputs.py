"""Inputs for the training benchmarks, made without downloading anything: a random-weight Hugging Face
folder WORK/init of the given shape and 20M random tokens in documents of 50-2000 tokens as a Megatron
dataset WORK/tokens_text_document. Both are kept and reused by later runs.
Usage: /usr/bin/python3 bench/synthetic_run_inputs.py WORK DIM LAYERS HEADS FFN VOCAB
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
import llama_ref as ref  # noqa: E402
from megatron_writer import write_dataset  # noqa: E402

work, dim, layers, heads, ffn, vocab = sys.argv[1], *map(int, sys.argv[2:])
cfg = ref.LlamaConfig(hidden_size=dim, intermediate_size=ffn, num_attention_heads=heads, num_key_value_heads=heads,
                      num_hidden_layers=layers, vocab_size=vocab, rms_norm_eps=1e-5, max_position_embeddings=2048)
hf = os.path.join(work, "init")
os.makedirs(hf, exist_ok=True)
if not os.path.exists(os.path.join(hf, "model.safetensors")):
    ref.save_file(os.path.join(hf, "model.safetensors"), ref.init_params(cfg, 1), {"format": "pt"})
    json.dump(cfg.to_hf_json(), open(os.path.join(hf, "config.json"), "w"), indent=2)
prefix = os.path.join(work, "tokens_text_document")
if not os.path.exists(prefix + ".idx"):
    rng = np.random.default_rng(2)
    docs, total = [], 0
    while total < 20_000_000:
        n = int(rng.integers(50, 2000))
        docs.append(rng.integers(3, vocab, n).tolist() + [2])
        total += n + 1
    write_dataset(prefix, docs, "uint16")
