#!/usr/bin/python3
"""Writes the whole-model golden files tests/golden/<case>/{config.json, model.safetensors, golden.safetensors}.

Everything after the float32 init is computed in float64 (logits, loss, every gradient, 10 AdamW
steps) and stored as F32, so a float32 C++ implementation can be held to ~1e-5 relative.
Deterministic: the init and the batch come from numpy PCG64 seeded per case. Layout: README.md.
Usage: /usr/bin/python3 tools/reference/gen_golden.py [--out tests/golden] [--case NAME ...]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

# name: (config, B, T, seed, grad_clip). grad_clip is 1.0 except in "odd", where 1.5 makes the first
# 3 of its 10 steps clip and the other 7 not, so both branches of the clip are covered.
CASES = {
    "mha_untied": (ref.LlamaConfig(hidden_size=64, intermediate_size=172, num_attention_heads=4,
                                   num_key_value_heads=4, num_hidden_layers=2, vocab_size=128,
                                   max_position_embeddings=64), 2, 16, 1001, 1.0),
    "gqa": (ref.LlamaConfig(hidden_size=64, intermediate_size=160, num_attention_heads=8,
                            num_key_value_heads=2, num_hidden_layers=2, vocab_size=96,
                            max_position_embeddings=64), 2, 12, 1002, 1.0),
    "tied": (ref.LlamaConfig(hidden_size=48, intermediate_size=128, num_attention_heads=4,
                             num_key_value_heads=4, num_hidden_layers=2, vocab_size=80,
                             max_position_embeddings=64, tie_word_embeddings=True), 1, 10, 1003, 1.0),
    "odd": (ref.LlamaConfig(hidden_size=40, intermediate_size=107, num_attention_heads=5,
                            num_key_value_heads=5, num_hidden_layers=3, vocab_size=211,
                            rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=64),
            2, 17, 1004, 1.5),
}


def make_batch(cfg, B, T, rng):
    """tokens (B, T) and next-token targets (B, T) with some positions set to -100.

    Every row gets at least one ignored target; the last position of row B-1 is always ignored.
    """
    seq = rng.integers(0, cfg.vocab_size, size=(B, T + 1))
    tokens = seq[:, :T].astype(np.int32)
    targets = seq[:, 1:].astype(np.int32)
    for b in range(B):
        k = 1 + (b % 2)  # one or two random ignored positions per row
        targets[b, rng.choice(T - 1, size=k, replace=False)] = ref.IGNORE_INDEX
    targets[B - 1, T - 1] = ref.IGNORE_INDEX
    return tokens, targets


def compute_golden(cfg, B, T, seed, hp):
    """Returns (initial params {name: f32 array}, golden tensors {name: array})."""
    init = ref.init_params(cfg, seed)
    tokens, targets = make_batch(cfg, B, T, np.random.default_rng(seed + 7919))
    tok = torch.from_numpy(tokens).long()
    tgt = torch.from_numpy(targets).long()

    params = ref.to_torch(init, torch.float64)
    logits, loss, grads = ref.loss_and_grads(params, cfg, tok, tgt)

    params = ref.to_torch(init, torch.float64)
    losses, norms = ref.adamw_train(params, cfg, tok, tgt, hp)

    g = {"tokens": tokens, "targets": targets,
         "logits": logits.numpy().astype(np.float32),
         "loss": np.array(loss.item(), dtype=np.float32),
         "adamw.losses": losses.astype(np.float32),
         "adamw.grad_norms": norms.astype(np.float32)}
    for name in init:
        g["grad." + name] = grads[name].numpy().astype(np.float32)
        g["final." + name] = params[name].detach().numpy().astype(np.float32)
    return init, g


def write_case(out_dir, name):
    cfg, B, T, seed, clip = CASES[name]
    hp = ref.AdamWHyper(grad_clip=clip)
    init, g = compute_golden(cfg, B, T, seed, hp)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg.to_hf_json(), f, indent=2)
        f.write("\n")
    ref.save_file(os.path.join(d, "model.safetensors"), init, {"format": "pt"})
    meta = hp.as_metadata()
    meta.update({"case": name, "seed": str(seed), "batch": str(B), "seq": str(T)})
    ref.save_file(os.path.join(d, "golden.safetensors"), g, meta)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    norms = g["adamw.grad_norms"]
    print(f"{name}: loss {g['loss']:.6f}  losses[-1] {g['adamw.losses'][-1]:.6f}  "
          f"grad norms {norms.min():.3f}..{norms.max():.3f} (clipped {int((norms > hp.grad_clip).sum())}/"
          f"{len(norms)})  {size} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "golden"))
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.case or list(CASES):
        write_case(os.path.normpath(args.out), name)


if __name__ == "__main__":
    main()
