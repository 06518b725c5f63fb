#!/usr/bin/python3
"""Megatron's attention mask, position ids and loss mask of a GPT sample, from its documented rule.

Megatron-LM's GPT dataset (megatron/core/datasets/gpt_dataset.py, _get_ltor_masks_and_position_ids)
builds, for the L input tokens of a sample:
  - attention_mask: lower triangular (L, L); with reset_attention_mask, for every EOD input at i with
    i + 1 < L, rows i+1.. lose columns 0..i (no later token sees the document that EOD ended);
  - position_ids: 0..L-1; with reset_position_ids, positions restart at 0 after every EOD input;
  - loss_mask: 1, and 0 where the input is EOD when eod_mask_loss is set.
Written here from that rule as a dense matrix and loops, not from llamatrain's C++ (which keeps one
document start per token), so tests/data/ can compare the two on random samples.

usage: megatron_masks.py < CASES.json > RESULTS.json
CASES: [{"tokens": [...L ids...], "eod": id, "reset_position_ids": b, "reset_attention_mask": b,
         "eod_mask_loss": b}, ...]
RESULTS: [{"attention_mask": [[0/1 x L] x L] (1 = visible), "position_ids": [...], "loss_mask": [...]}, ...]
"""
import json
import sys

import numpy as np


def masks(tokens, eod, reset_position_ids, reset_attention_mask, eod_mask_loss):
    data = np.asarray(tokens, dtype=np.int64)
    L = data.size
    attention = np.tril(np.ones((L, L), dtype=np.int64))
    loss_mask = np.ones(L, dtype=np.float64)
    if eod_mask_loss:
        loss_mask[data == eod] = 0.0
    position_ids = np.arange(L, dtype=np.int64)
    if reset_position_ids or reset_attention_mask:
        eod_index = np.nonzero(data == eod)[0]  # positions of EOD inputs, before any reset
        prev_index = 0
        for i in eod_index:
            if reset_attention_mask and i + 1 < L:
                attention[i + 1:, :i + 1] = 0
            if reset_position_ids:
                position_ids[i + 1:] -= i + 1 - prev_index
                prev_index = i + 1
    return {"attention_mask": attention.tolist(), "position_ids": position_ids.tolist(),
            "loss_mask": loss_mask.tolist()}


def main():
    cases = json.load(sys.stdin)
    json.dump([masks(c["tokens"], c["eod"], c["reset_position_ids"], c["reset_attention_mask"], c["eod_mask_loss"])
               for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
