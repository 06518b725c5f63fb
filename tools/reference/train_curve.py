#!/usr/bin/python3
"""The PyTorch reference of `llamatrain train`'s loop, for the loss-curve test.

Starts from a Hugging Face folder (config.json + model.safetensors), reads the micro-batches the
trainer reads (`llamatrain data samples ... --json`: one {"tokens": [...], "labels": [...]} per line,
labels -100 where the loss is masked) and the learning rate of every step (the trainer's
metrics.jsonl, so the schedule itself is tested elsewhere), and runs the same steps in float64:
each step averages the micro-batch mean losses, clips the global gradient norm, then applies
torch.optim.AdamW (weight decay on 2-D weights only). --freeze PATTERN... sets requires_grad False on
the parameters whose Hugging Face name matches a pattern (fnmatch; `*` matches dots too), which the
optimizer and the clipping then leave out (llamatrain's model.freeze); a pattern ending in a row
range "[a:b]" (either end may be left out) keeps those rows of each matching parameter instead: their
gradient is zeroed before the clipping and their values are put back after each step. When the
metrics hold "embedding_lr", embed_tokens and lm_head train in their own parameter group at that
rate (llamatrain's model.optim.embedding_lr). Prints one JSON object:
{"loss": [...], "grad_norm": [...]} with one entry per step.

Example: /usr/bin/python3 tools/reference/train_curve.py --hf init/ --samples samples.jsonl \
           --metrics run/metrics.jsonl --steps 200 --micro-batch 2 --global-batch 4 --clip 1.0 \
           --weight-decay 0.1 --betas 0.9 0.95 --eps 1e-8
"""
import argparse
import fnmatch
import json
import os
import re
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
    lrs, embedding_lrs = {}, {}
    for line in open(a.metrics):
        rec = json.loads(line)
        if "lr" in rec and "loss" in rec:
            lrs[rec["step"]] = rec["lr"]
            if "embedding_lr" in rec:
                embedding_lrs[rec["step"]] = rec["embedding_lr"]

    whole, rows = [], []  # patterns, and (pattern, first row, end row) of the row ranges
    for p in a.freeze:
        m = re.fullmatch(r"(.*)\[(\d*):(\d*)\]", p)
        if m:
            rows.append((m.group(1), int(m.group(2) or 0), int(m.group(3)) if m.group(3) else None))
        else:
            whole.append(p)
    frozen = {n for n in params if any(fnmatch.fnmatchcase(n, p) for p in whole)}
    for n in frozen:
        params[n].requires_grad_(False)
    kept_rows = [(n, slice(b, e)) for n in params for g, b, e in rows
                 if n not in frozen and fnmatch.fnmatchcase(n, g)]
    plist = [p for n, p in params.items() if n not in frozen]
    embedding = {"model.embed_tokens.weight", "lm_head.weight"} if embedding_lrs else set()
    groups = [{"params": [p for n, p in params.items() if n not in frozen and n not in embedding and p.dim() >= 2],
               "weight_decay": a.weight_decay},
              {"params": [p for n, p in params.items() if n not in frozen and n not in embedding and p.dim() < 2],
               "weight_decay": 0.0}]
    if embedding:
        groups.append({"params": [params[n] for n in embedding if n in params and n not in frozen],
                       "weight_decay": a.weight_decay, "embedding": True})
    opt = torch.optim.AdamW(groups, lr=0.0, betas=tuple(a.betas), eps=a.eps, foreach=False)
    micro = a.global_batch // a.micro_batch
    losses, norms = [], []
    for step in range(1, a.steps + 1):
        for g in opt.param_groups:
            g["lr"] = embedding_lrs[step] if g.get("embedding") else lrs[step]
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
        for n, r in kept_rows:
            params[n].grad[r] = 0
        norm = torch.nn.utils.clip_grad_norm_(plist, a.clip if a.clip > 0 else float("inf"))
        kept = [(n, r, params[n].detach()[r].clone()) for n, r in kept_rows]
        opt.step()
        with torch.no_grad():
            for n, r, v in kept:
                params[n][r] = v
        losses.append(total)
        norms.append(norm.item())
    print(json.dumps({"loss": losses, "grad_norm": norms}))


if __name__ == "__main__":
    main()
