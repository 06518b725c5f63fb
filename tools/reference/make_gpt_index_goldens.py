#!/usr/bin/python3
"""Writes tests/golden/gpt_index/*.json with megatron_gpt_index.py (run from the repository root).

Each file holds the spec and the reference indices; tests/data/gpt_index_golden_test.cpp rebuilds
every case with the C++ code and compares. Regenerate: /usr/bin/python3 tools/reference/make_gpt_index_goldens.py
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megatron_gpt_index as ref  # noqa: E402

OUT = "tests/golden/gpt_index"


def sizes(seed, n, lo, hi, zero_every=0):
    r = random.Random(seed)
    s = [r.randint(lo, hi) for _ in range(n)]
    if zero_every:
        for i in range(0, n, zero_every):
            s[i] = 0
    return s


CASES = {
    # docs/formats.md §2.15 test vector.
    "fv_2_15": {"mode": "gpt", "sizes": [5, 3, 7, 4, 6], "split": "1,0,0", "seq_length": 4,
                "num_samples": [10, None, None], "seed": 1234, "with_text": True},
    # Three epochs with a short final epoch: separate_final_epoch true.
    "epochs_separate": {"mode": "gpt", "sizes": sizes(1, 40, 1, 30), "split": "969,30,1",
                        "seq_length": 16, "num_samples": [80, 3, 1], "seed": 1234, "with_text": True},
    # Several epochs with a nearly full final epoch: separate_final_epoch false.
    "epochs_joined": {"mode": "gpt", "sizes": sizes(2, 40, 1, 30), "split": "969,30,1",
                      "seq_length": 16, "num_samples": [155, 2, 1], "seed": 7, "with_text": True},
    # Zero-length sequences all through (every 3rd) and a long one.
    "zero_length": {"mode": "gpt", "sizes": sizes(3, 30, 0, 12, zero_every=3) + [90], "split": "98,2,0",
                    "seq_length": 5, "num_samples": [60, 4, None], "seed": 99, "with_text": True},
    # One epoch (N = None), seed 0 and the largest seed.
    "one_epoch_seed0": {"mode": "gpt", "sizes": sizes(4, 50, 1, 20), "split": "1,0,0", "seq_length": 8,
                        "num_samples": [None, None, None], "seed": 0, "with_text": True},
    "seed_max": {"mode": "gpt", "sizes": sizes(5, 25, 2, 9), "split": "80,20,0", "seq_length": 3,
                 "num_samples": [70, 20, None], "seed": 4294967295, "with_text": False},
    # Split rounding: 98,2,0 on 75 sequences (bookend*75 near .5) and 969,30,1 on 1001/500/1500.
    "split_98_2_0_n75": {"mode": "gpt", "sizes": sizes(6, 75, 1, 6), "split": "98,2,0", "seq_length": 4,
                         "num_samples": [30, 2, None], "seed": 1234, "with_text": False},
    "split_98_2_0_n125": {"mode": "gpt", "sizes": sizes(7, 125, 1, 6), "split": "98, 2, 0",
                          "seq_length": 4, "num_samples": [30, 2, None], "seed": 1234, "with_text": False},
    "split_969_30_1_n1001": {"mode": "gpt", "sizes": sizes(8, 1001, 1, 4), "split": "969,30,1",
                             "seq_length": 32, "num_samples": [40, 2, 1], "seed": 1234, "with_text": False},
    "split_969_30_1_n500": {"mode": "gpt", "sizes": sizes(9, 500, 1, 4), "split": "969,30,1",
                            "seq_length": 16, "num_samples": [40, 2, 1], "seed": 1234, "with_text": False},
    # Validation without dropping the last partial sample.
    "keep_partial": {"mode": "gpt", "sizes": sizes(10, 30, 1, 9), "split": "70,30,0", "seq_length": 6,
                     "num_samples": [20, None, None], "seed": 5, "drop_last_partial": False,
                     "with_text": True},
    # Blends of two and three datasets.
    "blend2": {"mode": "blend", "datasets": [sizes(11, 40, 1, 25), sizes(12, 30, 1, 40)],
               "weights": [0.7, 0.3], "split": "969,30,1", "seq_length": 8, "num_samples": [120, 6, 2],
               "seed": 1234, "surplus": 0.005, "with_text": True},
    "blend3": {"mode": "blend", "datasets": [sizes(13, 30, 1, 25), sizes(14, 50, 0, 10, zero_every=7),
                                             sizes(15, 20, 5, 60)],
               "weights": [5, 3, 2], "split": "98,2,0", "seq_length": 7, "num_samples": [301, 10, None],
               "seed": 42, "surplus": 0.005, "with_text": True},
    "blend3_ties": {"mode": "blend", "datasets": [sizes(16, 20, 1, 20), sizes(17, 20, 1, 20),
                                                  sizes(18, 20, 1, 20)],
                    "weights": [1, 1, 1], "split": "1,0,0", "seq_length": 4, "num_samples": [100, None, None],
                    "seed": 3, "surplus": 0.005, "with_text": False},
    "rng": {"mode": "rng"},
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, spec in CASES.items():
        if spec["mode"] == "rng":
            out = ref.rng_checks()
        elif spec["mode"] == "gpt":
            out = {"splits": ref.gpt_all(spec["sizes"], spec["split"], spec["seq_length"], spec["num_samples"],
                                         spec["seed"], spec.get("drop_last_partial", True),
                                         spec.get("with_text", False))}
        else:
            out = {"splits": ref.blend_all(spec)}
        out["spec"] = spec
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            f.write(json.dumps(out, separators=(",", ":")) + "\n")
        print(name)


if __name__ == "__main__":
    main()
