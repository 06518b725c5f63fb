"""Inputs for the training benchmarks, made without downloading anything: a random-weight Hugging Face
folder WORK/init-MODEL of a llama2.c model's shape and 20M random tokens below its vocabulary size, in
documents of 50-2000 tokens, as the Megatron dataset WORK/tokens-vVOCAB_text_document. Both are kept
and reused by later runs. Prints the folder and the dataset prefix, separated by a space.
Usage: /usr/bin/python3 bench/synthetic_run_inputs.py WORK stories15m|stories42m|stories110m
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "reference"))
import llama_ref as ref  # noqa: E402
from megatron_writer import write_dataset  # noqa: E402

# dim, layers, heads, ffn, vocab
SHAPES = {"stories15m": (288, 6, 6, 768, 32000), "stories42m": (512, 8, 8, 1376, 32000),
          "stories110m": (768, 12, 12, 2048, 32000)}
work, model = sys.argv[1], sys.argv[2]
if model not in SHAPES:
    sys.exit(f"synthetic_run_inputs: unknown model {model}, expected one of {', '.join(SHAPES)}")
dim, layers, heads, ffn, vocab = SHAPES[model]
cfg = ref.LlamaConfig(hidden_size=dim, intermediate_size=ffn, num_attention_heads=heads, num_key_value_heads=heads,
                      num_hidden_layers=layers, vocab_size=vocab, rms_norm_eps=1e-5, max_position_embeddings=2048)
hf = os.path.join(work, "init-" + model)
os.makedirs(hf, exist_ok=True)
if not os.path.exists(os.path.join(hf, "model.safetensors")):
    ref.save_file(os.path.join(hf, "model.safetensors"), ref.init_params(cfg, 1), {"format": "pt"})
    json.dump(cfg.to_hf_json(), open(os.path.join(hf, "config.json"), "w"), indent=2)
prefix = os.path.join(work, f"tokens-v{vocab}_text_document")
if not os.path.exists(prefix + ".idx"):
    rng = np.random.default_rng(2)
    docs, total = [], 0
    while total < 20_000_000:
        n = int(rng.integers(50, 2000))
        docs.append(rng.integers(3, vocab, n).tolist() + [2])
        total += n + 1
    write_dataset(prefix, docs, "uint16")
print(hf, prefix)
