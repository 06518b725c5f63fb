#!/usr/bin/python3
"""Times one PyTorch training step of the reference Llama (the peer in bench/compare_pytorch.sh).

A step = forward on random tokens, mean cross-entropy, backward, global grad-norm clip (1.0) and a
torch.optim.AdamW step (weight decay 0.1 on 2-D weights). fp32, or bf16 via torch.autocast on CPU
(fp32 master weights; matmuls in bf16). Reports the median over --steps timed steps after 2 warmup
steps, and the process's peak RSS (getrusage ru_maxrss).
Example: /usr/bin/python3 tools/reference/train_step.py --dim 288 --layers 6 --heads 6 --kv-heads 6 \
           --ffn 768 --vocab 32000 --seq 256 --batch 8 --precision fp32 --steps 3 --threads 2 --json
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

WARMUP = 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "bf16-autocast"], default="fp32")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after 2 warmup steps)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tie-embeddings", action="store_true",
                    help="share embed_tokens with the lm head (llama2.c's stories models do)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    if a.steps < 1:
        sys.exit(f"--steps must be >= 1, got {a.steps}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    cfg = ref.LlamaConfig(hidden_size=a.dim, intermediate_size=a.ffn, num_attention_heads=a.heads,
                          num_key_value_heads=a.kv_heads or a.heads, num_hidden_layers=a.layers,
                          vocab_size=a.vocab, max_position_embeddings=max(a.seq, 2048),
                          tie_word_embeddings=a.tie_embeddings)
    params = ref.to_torch(ref.init_params(cfg, a.seed), torch.float32)
    plist = list(params.values())
    opt = torch.optim.AdamW([{"params": [p for p in plist if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in plist if p.dim() < 2], "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    autocast = a.precision == "bf16-autocast"

    times, losses = [], []
    for i in range(WARMUP + a.steps):
        seq = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        tokens, targets = seq[:, :-1], seq[:, 1:]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = ref.forward(params, cfg, tokens)
        loss = ref.cross_entropy(logits.float(), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= WARMUP:
            times.append(dt)

    step_s = statistics.median(times)
    n_params = sum(p.numel() for p in plist)
    out = {
        "impl": "pytorch",
        "torch_version": torch.__version__,
        "precision": a.precision,
        "threads": a.threads,
        "dim": a.dim, "layers": a.layers, "heads": a.heads, "kv_heads": cfg.num_key_value_heads,
        "ffn": a.ffn, "vocab": a.vocab, "seq": a.seq, "batch": a.batch, "tied": a.tie_embeddings,
        "params": n_params,
        "steps_timed": a.steps,
        "step_s_median": step_s,
        "step_s_all": times,
        "tokens_per_s": a.batch * a.seq / step_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    if a.json:
        print(json.dumps(out))
    else:
        print(f"pytorch {a.precision} {n_params / 1e6:.1f}M params B={a.batch} T={a.seq} threads={a.threads}: "
              f"{out['tokens_per_s']:.1f} tokens/s (median step {step_s:.3f} s), peak RSS "
              f"{out['peak_rss_mb']:.0f} MB, loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
