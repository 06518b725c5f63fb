#!/usr/bin/python3
"""The PyTorch reference of `llamatrain train`'s loop, for the loss-curve test.

Starts from a Hugging Face folder (config.json + model.safetensors), reads the micro-batches the
trainer reads (`llamatrain data samples ... --json`: one {"tokens": [...], "labels": [...]} per line,
labels -100 where the loss is masked) and the learning rate of every step (the trainer's
metrics.jsonl, so the schedule itself is tested elsewhere), and runs the same steps in float64:
each step averages the micro-batch mean losses, clips the global gradient norm, then applies
torch.optim.AdamW (weight decay on 2-D weights only). --freeze PATTERN... sets requires_grad False on
the parameters whose Hugging Face name matches a pattern (fnmatch; `*` matches dots too), which the
optimizer and the clipping then leave out (llamatrain's model.freeze). Prints one JSON object:
{"loss": [...], "grad_norm": [...]} with one entry per step.

Example: /usr/bin/python3 tools/reference/train_curve.py --hf init/ --samples samples.jsonl \
           --metrics run/metrics.jsonl --steps 200 --micro-batch 2 --global-batch 4 --clip 1.0 \
           --weight-decay 0.1 --betas 0.9 0.95 --eps 1e-8
"""
import argparse
import fnmatch
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hf", required=True, help="folder with config.json and model.safetensors")
    ap.add_argument("--samples", required=True, help="JSONL of samples in consumption order")
    ap.add_argument("--metrics", required=True, help="the trainer's metrics.jsonl (lr per step)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--global-batch", type=int, required=True)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.95))
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--freeze", nargs="*", default=[], help="HF name patterns of parameters that do not train")
    a = ap.parse_args()
    torch.set_num_threads(1)

    with open(os.path.join(a.hf, "config.json")) as f:
        cfg = ref.LlamaConfig.from_hf_json(json.load(f))
    tensors, _ = ref.load_file(os.path.join(a.hf, "model.safetensors"))
    params = ref.to_torch({n: tensors[n] for n, _ in ref.param_shapes(cfg)}, torch.float64)
    samples = [json.loads(line) for line in open(a.samples)]
    lrs = {}
    for line in open(a.metrics):
        rec = json.loads(line)
        if "lr" in rec and "loss" in rec:
            lrs[rec["step"]] = rec["lr"]

    frozen = {n for n in params if any(fnmatch.fnmatchcase(n, p) for p in a.freeze)}
    for n in frozen:
        params[n].requires_grad_(False)
    plist = [p for n, p in params.items() if n not in frozen]
    opt = torch.optim.AdamW(
        [{"params": [p for p in plist if p.dim() >= 2], "weight_decay": a.weight_decay},
         {"params": [p for p in plist if p.dim() < 2], "weight_decay": 0.0}],
        lr=0.0, betas=tuple(a.betas), eps=a.eps, foreach=False)
    micro = a.global_batch // a.micro_batch
    losses, norms = [], []
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = lrs[step]
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(micro):
            first = (step - 1) * a.global_batch + m * a.micro_batch
            batch = samples[first:first + a.micro_batch]
            tokens = torch.tensor([s["tokens"] for s in batch], dtype=torch.long)
            labels = torch.tensor([s["labels"] for s in batch], dtype=torch.long)
            loss = ref.cross_entropy(ref.forward(params, cfg, tokens), labels) / micro
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(plist, a.clip if a.clip > 0 else float("inf"))
        opt.step()
        losses.append(total)
        norms.append(norm.item())
    print(json.dumps({"loss": losses, "grad_norm": norms}))


if __name__ == "__main__":
    main()
