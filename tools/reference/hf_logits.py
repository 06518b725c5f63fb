#!/usr/bin/python3
"""Float64 logits of a Hugging Face Llama folder on given token ids (the export test's oracle).

Reads config.json and the weights (model.safetensors, or model.safetensors.index.json and its shards;
F32 or BF16) with this folder's own safetensors reader, runs the reference forward in float64 and
prints {"logits": [[...V floats...] per token]} as JSON.
Example: /usr/bin/python3 tools/reference/hf_logits.py out/hf --tokens 1 45 7 300
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402


def load_weights(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    files = ([os.path.join(folder, f) for f in sorted(set(json.load(open(index))["weight_map"].values()))]
             if os.path.exists(index) else [os.path.join(folder, "model.safetensors")])
    tensors = {}
    for path in files:
        part, _ = ref.load_file(path)
        for name, arr in part.items():
            tensors[name] = ref.bf16_to_f32(arr) if arr.dtype == np.uint16 else arr
    return tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--tokens", type=int, nargs="+", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    with open(os.path.join(a.folder, "config.json")) as f:
        cfg = ref.LlamaConfig.from_hf_json(json.load(f))
    tensors = load_weights(a.folder)
    params = ref.to_torch({n: tensors[n] for n, _ in ref.param_shapes(cfg)}, torch.float64, requires_grad=False)
    with torch.no_grad():
        logits = ref.forward(params, cfg, torch.tensor([a.tokens], dtype=torch.long))[0]
    print(json.dumps({"logits": logits.tolist()}))


if __name__ == "__main__":
    main()
