#!/usr/bin/python3
# Independent reference for src/config/schedule.cpp: the learning-rate formulas as NeMo's
# nemo/core/optim/lr_scheduler.py (neuronx-nemo-megatron fork: WarmupPolicy, WarmupHoldPolicy,
# WarmupAnnealHoldPolicy + CosineAnnealing, WarmupAnnealing) and Megatron-core's
# OptimizerParamScheduler.get_lr (lr_decay_style "WSD") write them, in plain Python (stdlib only).
# Usage: schedule_reference.py CASES.json -> prints {"lrs": [[lr for each step] for each case]}.
# A case: {"name", "lr", "min_lr", "max_steps", "warmup_steps", "constant_steps", "hold_steps",
#          "wsd_decay_steps", "wsd_decay_style", "steps": [...]}; lengths are already resolved.
import json
import math
import sys


def warmup_policy(c, step):  # WarmupPolicy.get_lr with _get_lr = base lr
    if step <= c["warmup_steps"] and c["warmup_steps"] > 0:
        return c["lr"] * ((step + 1) / (c["warmup_steps"] + 1))
    if step > c["max_steps"]:
        return c["min_lr"]
    return c["lr"]


def warmup_hold_policy(c, step):  # WarmupHoldPolicy.get_lr
    warmup = c["warmup_steps"]
    hold = c["hold_steps"] + warmup if c["hold_steps"] is not None else 0
    if step <= warmup and warmup > 0:
        return c["lr"] * ((step + 1) / (warmup + 1))
    if step >= warmup and step < hold:
        return c["lr"]
    if step > c["max_steps"]:
        return c["min_lr"]
    return c["lr"]


def warmup_annealing(c, step):  # WarmupPolicy.get_lr with WarmupAnnealing._get_lr
    if step <= c["warmup_steps"] and c["warmup_steps"] > 0:
        return c["lr"] * ((step + 1) / (c["warmup_steps"] + 1))
    if step > c["max_steps"]:
        return c["min_lr"]
    delta_lr = c["lr"] - c["min_lr"]
    mult = (step - c["warmup_steps"]) / (c["max_steps"] - c["warmup_steps"])
    return c["min_lr"] + (1 - mult) * delta_lr


def _cosine_annealing(initial_lr, step, max_steps, min_lr):
    mult = 0.5 * (1 + math.cos(math.pi * step / max_steps))
    return (initial_lr - min_lr) * mult + min_lr


def _linear_warmup_with_cosine_annealing(max_lr, warmup_steps, step, decay_steps, min_lr):
    assert max_lr > min_lr
    if warmup_steps > 0 and step <= warmup_steps:
        return max_lr * float(step + 1) / float(warmup_steps + 1)
    if step > warmup_steps + decay_steps:
        return min_lr
    decay_ratio = float(step - warmup_steps) / float(decay_steps)
    assert 0.0 <= decay_ratio <= 1.0
    coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
    return min_lr + coeff * (max_lr - min_lr)


def cosine_annealing(c, step):  # WarmupAnnealHoldPolicy.get_lr with CosineAnnealing's overrides
    warmup, constant, max_steps = c["warmup_steps"], c["constant_steps"], c["max_steps"]
    decay = max_steps - (constant + warmup)
    lin = lambda: _linear_warmup_with_cosine_annealing(c["lr"], warmup, step, decay, c["min_lr"])
    if warmup > 0 and step <= warmup:
        return c["lr"] * ((step + 1) / (warmup + 1)) if constant == 0 else lin()
    if constant > 0 and (warmup + decay) < step <= max_steps:
        return lin()
    if step > max_steps:
        return c["min_lr"]
    if constant == 0:
        return _cosine_annealing(c["lr"], step - warmup, max_steps - warmup, c["min_lr"])
    return lin()


def wsd(c, step):  # OptimizerParamScheduler.get_lr, init_lr 0, lr_decay_steps = max_steps
    init_lr, max_lr, min_lr = 0.0, c["lr"], c["min_lr"]
    warmup, decay_steps = c["warmup_steps"], c["max_steps"]
    if warmup > 0 and step <= warmup:
        return init_lr + ((max_lr - init_lr) * float(step) / float(warmup))
    if step > decay_steps:
        return min_lr
    decay_ratio = float(step - warmup) / float(decay_steps - warmup)
    assert 0.0 <= decay_ratio <= 1.0
    delta_lr = max_lr - min_lr
    anneal_start = decay_steps - c["wsd_decay_steps"]
    if step <= anneal_start:
        coeff = 1.0
    else:
        r = float(step - anneal_start) / float(c["wsd_decay_steps"])
        style = c["wsd_decay_style"]
        if style == "linear":
            coeff = 1.0 - r
        elif style == "cosine":
            coeff = 0.5 * (math.cos(math.pi * r) + 1.0)
        elif style == "exponential":
            coeff = (2.0 * math.pow(0.5, r)) - 1.0
        elif style == "minus_sqrt":
            coeff = 1.0 - math.sqrt(r)
    return min_lr + coeff * delta_lr


KINDS = {"WarmupPolicy": warmup_policy, "WarmupHoldPolicy": warmup_hold_policy,
         "WarmupAnnealing": warmup_annealing, "CosineAnnealing": cosine_annealing, "WSD": wsd}

cases = json.load(open(sys.argv[1]))
print(json.dumps({"lrs": [[KINDS[c["name"]](c, s) for s in c["steps"]] for c in cases]}))
