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
    # The architecture variants. qwen_bias: Qwen2's q/k/v biases, tied embeddings over a vocabulary
    # larger than the ids the batch uses, eps 1e-6, theta 1e6, no BOS use, a list of eos ids.
    "qwen_bias": (ref.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                  num_key_value_heads=2, num_hidden_layers=2, vocab_size=80,
                                  rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=64,
                                  tie_word_embeddings=True, model_type="qwen2", bos_token_id=70,
                                  eos_token_id=[71, 72]), 2, 12, 1005, 1.0),
    # llama3_scaled: Llama 3.1's rope_scaling with original_max_position_embeddings 32 < T = 40, so
    # the high (kept), medium (blended) and low (rescaled) frequency bands all occur (rope_bands);
    # head_dim 24 with 4 heads, so H*D = 96 != hidden_size 48; GQA.
    "llama3_scaled": (ref.LlamaConfig(hidden_size=48, intermediate_size=96, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=96,
                                      rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=64,
                                      explicit_head_dim=24,
                                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 32},
                                      eos_token_id=[2, 3]), 1, 40, 1006, 1.0),
    # window: Mistral's sliding window of 5 keys over sequences of 17.
    "window": (ref.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                               num_key_value_heads=2, num_hidden_layers=2, vocab_size=64,
                               rms_norm_eps=1e-5, max_position_embeddings=64, model_type="mistral",
                               sliding_window=5), 2, 17, 1007, 1.0),
    # Packed documents: each sequence holds several (lengths in EXTRAS), positions restart at each,
    # and an explicit block-diagonal causal mask keeps them apart. GQA; then MHA with a window
    # shorter than some documents and longer than others.
    "packed": (ref.LlamaConfig(hidden_size=48, intermediate_size=96, num_attention_heads=4,
                               num_key_value_heads=2, num_hidden_layers=2, vocab_size=90,
                               rms_norm_eps=1e-5, max_position_embeddings=64), 2, 26, 1008, 1.0),
    "packed_window": (ref.LlamaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                      num_key_value_heads=4, num_hidden_layers=2, vocab_size=64,
                                      rms_norm_eps=1e-5, max_position_embeddings=64, model_type="mistral",
                                      sliding_window=4), 2, 21, 1009, 1.0),
}

# Per case, beyond CASES: the ids the batch draws from (default: the whole vocabulary), and a
# greedy generation to store (prompt length from the first row of the batch, new tokens).
EXTRAS = {
    "qwen_bias": {"used_vocab": 70, "greedy": (5, 8)},
    "llama3_scaled": {"greedy": (30, 8)},
    "window": {"greedy": (4, 12)},
    "packed": {"documents": [[5, 1, 12, 8], [9, 17]]},
    "packed_window": {"documents": [[3, 10, 8], [1, 1, 19]]},
}


def documents(lengths_per_row, T):
    """positions and doc_start (B, T) of rows holding documents of the given lengths (summing to T)."""
    positions, starts = [], []
    for lengths in lengths_per_row:
        assert sum(lengths) == T, (lengths, T)
        positions.append([p for n in lengths for p in range(n)])
        starts.append([s for k, n in enumerate(lengths) for s in [sum(lengths[:k])] * n])
    return np.array(positions, dtype=np.int32), np.array(starts, dtype=np.int32)


def check_documents_apart(params_np, cfg, tokens, targets, lengths_per_row):
    """The packed loss sum and gradients equal the sums over each document run alone (the mask's point)."""
    T = tokens.shape[1]
    pos, starts = documents(lengths_per_row, T)
    tok, tgt = torch.from_numpy(tokens).long(), torch.from_numpy(targets).long()
    n_valid = int((tgt != ref.IGNORE_INDEX).sum())
    _, loss, grads = ref.loss_and_grads(ref.to_torch(params_np), cfg, tok, tgt, torch.from_numpy(pos),
                                        torch.from_numpy(starts))
    total, sums = 0.0, {n: torch.zeros_like(g) for n, g in grads.items()}
    for b, lengths in enumerate(lengths_per_row):
        at = 0
        for n in lengths:
            t1, g1 = tok[b:b + 1, at:at + n], tgt[b:b + 1, at:at + n]
            k = int((g1 != ref.IGNORE_INDEX).sum())
            at += n
            if k == 0:
                continue
            _, l1, gr1 = ref.loss_and_grads(ref.to_torch(params_np), cfg, t1, g1)
            total += l1.item() * k
            for name in sums:
                sums[name] += gr1[name] * k
    assert abs(total - loss.item() * n_valid) <= 1e-9 * abs(total), (total, loss.item() * n_valid)
    for name, g in grads.items():
        err = (g * n_valid - sums[name]).abs().max().item()
        assert err <= 1e-9 * max(1.0, sums[name].abs().max().item()), (name, err)


def make_batch(cfg, B, T, rng, used_vocab=None):
    """tokens (B, T) and next-token targets (B, T) with some positions set to -100, ids below
    used_vocab (default: the vocabulary).

    Every row gets at least one ignored target; the last position of row B-1 is always ignored.
    """
    seq = rng.integers(0, used_vocab or cfg.vocab_size, size=(B, T + 1))
    tokens = seq[:, :T].astype(np.int32)
    targets = seq[:, 1:].astype(np.int32)
    for b in range(B):
        k = 1 + (b % 2)  # one or two random ignored positions per row
        targets[b, rng.choice(T - 1, size=k, replace=False)] = ref.IGNORE_INDEX
    targets[B - 1, T - 1] = ref.IGNORE_INDEX
    return tokens, targets


def compute_golden(cfg, B, T, seed, hp, extras=None):
    """Returns (initial params {name: f32 array}, golden tensors {name: array})."""
    extras = extras or {}
    init = ref.init_params(cfg, seed)
    tokens, targets = make_batch(cfg, B, T, np.random.default_rng(seed + 7919), extras.get("used_vocab"))
    tok = torch.from_numpy(tokens).long()
    tgt = torch.from_numpy(targets).long()
    docs = {}
    if "documents" in extras:
        pos, starts = documents(extras["documents"], T)
        check_documents_apart(init, cfg, tokens, targets, extras["documents"])
        docs = {"positions": torch.from_numpy(pos), "doc_start": torch.from_numpy(starts)}

    params = ref.to_torch(init, torch.float64)
    logits, loss, grads = ref.loss_and_grads(params, cfg, tok, tgt, **docs)

    params = ref.to_torch(init, torch.float64)
    losses, norms = ref.adamw_train(params, cfg, tok, tgt, hp, **docs)

    g = {"tokens": tokens, "targets": targets,
         "logits": logits.numpy().astype(np.float32),
         "loss": np.array(loss.item(), dtype=np.float32),
         "adamw.losses": losses.astype(np.float32),
         "adamw.grad_norms": norms.astype(np.float32)}
    for name, value in docs.items():  # stored as the C++ reads them: int32 (B, T)
        g[name] = value.numpy().astype(np.int32)
    for name in init:
        g["grad." + name] = grads[name].numpy().astype(np.float32)
        g["final." + name] = params[name].detach().numpy().astype(np.float32)
    if "greedy" in extras:  # from the initial weights, full recompute per token
        n_prompt, n_new = extras["greedy"]
        prompt = tokens[0, :n_prompt]
        new, margins = ref.greedy_generate(ref.to_torch(init, torch.float64, False), cfg, prompt.tolist(), n_new)
        g["greedy.prompt"] = prompt.astype(np.int32)
        g["greedy.tokens"] = np.array(new, dtype=np.int32)
        g["greedy.margins"] = np.array(margins, dtype=np.float32)
        # the logits each step's choice came from: positions n_prompt-1.. of the generated sequence
        seq = torch.tensor([prompt.tolist() + new[:-1]], dtype=torch.long)
        with torch.no_grad():
            steps = ref.forward(ref.to_torch(init, torch.float64, False), cfg, seq)[0, n_prompt - 1:]
        g["greedy.logits"] = steps.numpy().astype(np.float32)
    return init, g


def write_case(out_dir, name):
    cfg, B, T, seed, clip = CASES[name]
    hp = ref.AdamWHyper(grad_clip=clip)
    init, g = compute_golden(cfg, B, T, seed, hp, EXTRAS.get(name))
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
