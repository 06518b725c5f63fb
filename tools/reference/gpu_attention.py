#!/usr/bin/env python3
"""Times PyTorch's causal scaled_dot_product_attention forward and backward on one CUDA GPU: the peer
of build/release/cuda_attention_bench (bench/cuda_attention_bench.cpp) on the same shape.

bf16 q, k, v of shape (B, H, T, D) (k and v with --kv-heads heads, GQA through enable_gqa where
this PyTorch has it, else repeated), is_causal=True; PyTorch picks its kernel (FlashAttention-2 on
an H100/H200). TFLOP/s counts as the bench does: 4 * B * H * T^2 * D / 2 for the forward, 2.5 times
that for the backward. Median of --iters timed calls after two warmup calls, from CUDA events.
Example: python3 tools/reference/gpu_attention.py --seq 4096 --heads 32 --head-dim 128 --json
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit(f"gpu_attention: needs torch ({e})")
    if not torch.cuda.is_available():
        sys.exit("gpu_attention: no CUDA GPU")
    B, T, H, D = a.batch, a.seq, a.heads, a.head_dim
    Hkv = a.kv_heads or H
    dev = torch.device("cuda")
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)

    def attend():
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
        except TypeError:  # no enable_gqa in this PyTorch
            r = H // Hkv
            return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1),
                                                  is_causal=True)

    def timed(fn):
        for _ in range(2):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        return statistics.median(ms)

    fwd = timed(lambda: attend())
    out = attend()

    def backward():
        q.grad = k.grad = v.grad = None
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    bwd = timed(backward)
    flops = 4.0 * B * H * 0.5 * T * T * D
    r = {"bench": "sdpa_attention", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
         "batch": B, "seq": T, "heads": H, "kv_heads": Hkv, "head_dim": D,
         "sdpa_fwd_ms": round(fwd, 4), "sdpa_bwd_ms": round(bwd, 4),
         "sdpa_fwd_tflops": round(flops / (fwd * 1e9), 2), "sdpa_bwd_tflops": round(2.5 * flops / (bwd * 1e9), 2),
         "sdpa_tflops": round(3.5 * flops / ((fwd + bwd) * 1e9), 2)}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"sdpa B={B} T={T} H={H} Hkv={Hkv} D={D}: forward {fwd:.3f} ms {r['sdpa_fwd_tflops']} TFLOP/s, "
              f"backward {bwd:.3f} ms {r['sdpa_bwd_tflops']} TFLOP/s")


main()
