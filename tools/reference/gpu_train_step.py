#!/usr/bin/env python3
"""Times PyTorch training steps of a Llama on one CUDA GPU: the peer of `llamatrain bench --device cuda`.

What a user gets from PyTorch + Hugging Face transformers: LlamaForCausalLM with SDPA attention,
fp32 master weights under torch.autocast(bfloat16) (bf16-mixed) or plain fp32, mean cross-entropy,
backward, global grad-norm clip 1.0 and torch.optim.AdamW(fused=True, weight decay 0.1).
--recompute full turns on transformers' gradient checkpointing (each layer recomputed), --compile
wraps the model in torch.compile. Random weights and tokens. The median step time over --steps timed
steps after 2 warmup steps, from CUDA events; peak memory from torch.cuda.max_memory_allocated.
Example: python3 tools/reference/gpu_train_step.py --dim 2048 --layers 22 --heads 32 --kv-heads 4 \\
           --ffn 5632 --seq 2048 --batch 8 --json
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--ffn", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--precision", choices=["bf16-mixed", "fp32"], default="bf16-mixed")
    ap.add_argument("--recompute", choices=["none", "full"], default="none")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=5, help="timed steps (after 2 warmup steps)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()

    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        sys.exit(f"gpu_train_step: needs torch and transformers ({e})")
    if not torch.cuda.is_available():
        sys.exit("gpu_train_step: no CUDA device")
    dev = torch.device("cuda")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=a.dim, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.kv_heads or a.heads, intermediate_size=a.ffn, vocab_size=a.vocab,
                      max_position_embeddings=max(a.seq, 2048), rms_norm_eps=1e-5, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    # Built on the GPU where torch can (2.0 on): a 7B model's random initialization on the CPU takes
    # minutes.
    if hasattr(torch, "set_default_device"):
        torch.set_default_device(dev)
        model = LlamaForCausalLM(cfg)
        torch.set_default_device("cpu")
    else:
        model = LlamaForCausalLM(cfg).to(dev)
    if a.recompute == "full":
        model.gradient_checkpointing_enable()
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if a.compile else model
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16-mixed"):
            logits = step_model(input_ids=tokens).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, a.vocab), targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    median = statistics.median(times)
    tokens_per_s = a.batch * a.seq / median
    n = sum(p.numel() for p in model.parameters())
    # model FLOPs per token: 6 per parameter (matmuls) plus causal attention's 6 * L * T * dim
    flops = 6.0 * n + 6.0 * a.layers * a.seq * a.dim
    out = {"impl": "pytorch" + ("-compiled" if a.compile else "-eager"), "precision": a.precision,
           "recompute": a.recompute, "batch": a.batch, "seq": a.seq, "params": n, "step_s": median,
           "tokens_per_s": tokens_per_s, "tflops": flops * tokens_per_s / 1e12,
           "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "loss": float(loss)}
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:12} {v}")


if __name__ == "__main__":
    main()
