#!/usr/bin/python3
"""Independent re-implementation of Megatron-LM's GPT dataset indices (docs/formats.md §2.1-2.9, 2.13).

Written from the spec, not from llamatrain's C++: numpy's own RandomState does the shuffles, Python's
round() the split bookends, and the sample index is computed twice (the helpers.cpp walk and the
closed form "sample k starts at flat position k*L") and cross-checked. Used by tests/data/ to
check src/data/gpt_dataset.cpp and blend.cpp, and to write tests/golden/gpt_index/*.json.

usage: megatron_gpt_index.py SPEC.json [OUT.json]     (prints to stdout without OUT; a list of
       specs gives a list of results)
SPEC: {"mode": "gpt", "sizes": [...], "split": "969,30,1", "seq_length": L,
       "num_samples": [N_train, N_valid, N_test] (null = one epoch), "seed": S,
       "drop_last_partial": true, "with_text": false}
   or {"mode": "blend", "datasets": [[sizes...], ...], "weights": [...] or null, "split": ..,
       "seq_length": L, "num_samples": [...], "seed": S, "surplus": 0.005, "with_text": false}
   or {"mode": "rng"}: numpy check values.
Token t of sequence s in a data set of index g has the value g*100000 + s*1000 + t (for texts).
"""
import json
import math
import re
import sys

import numpy as np


def split_bookends(split):
    nums = [float(x) for x in re.findall(r"[.0-9]+", split)]
    nums = nums + [0.0] * (3 - len(nums))
    w = np.array(nums, dtype=np.float64)
    w = (w / np.sum(w)).tolist()
    ends = [0.0]
    for x in w:
        ends.append(ends[-1] + x)
    return [None if ends[k] == ends[k + 1] else (ends[k], ends[k + 1]) for k in range(3)]


def split_range(bookend, n):
    return int(round(bookend[0] * float(n))), int(round(bookend[1] * float(n)))


def sample_index_walk(sizes, doc, L, extra, ns):
    """The helpers.cpp construction, step by step as docs/formats.md §2.8 lists it."""
    rows = [(0, 0)]
    d, off = 0, 0
    while len(rows) <= ns:
        rem = L + extra
        while rem != 0:
            ln = sizes[doc[d]] - off
            rem -= ln
            if rem <= 0:
                off += rem + ln - extra
                rem = 0
            else:
                if d == len(doc) - 1:
                    off = sizes[doc[d]] - extra
                    break
                d += 1
                off = 0
        rows.append((d, off))
    return rows


def sample_index_closed(sizes, doc, L, ns):
    """Row k = (doc position, offset) of flat position k*L (extra == 1, drop_last)."""
    starts = np.cumsum([0] + [sizes[x] for x in doc])
    rows = [(0, 0)]  # row 0 is (0, 0) even when doc_index[0] is an empty sequence
    for k in range(1, ns + 1):
        pos = k * L
        d = int(np.searchsorted(starts, pos, side="right")) - 1
        while sizes[doc[d]] == 0 or pos - starts[d] >= sizes[doc[d]]:
            d += 1
        rows.append((d, int(pos - starts[d])))
    return rows


def gpt_split(sizes, rng_range, L, N, seed, extra=1, drop_last=True, with_text=False, gid=0):
    b, e = rng_range
    ids = list(range(b, e))
    T = sum(sizes[i] for i in ids)
    assert T > extra, "split has no tokens"
    E = 1
    if N is not None:
        while E * T < N * L + extra:
            E += 1
    separate = False
    n_sans = 0
    if E > 1:
        n_sans = ((E - 1) * T - extra) // L
        n_final = N - n_sans
        n_per = (T - extra) // L
        separate = n_final < int(0.80 * n_per)
    rs = np.random.RandomState(seed)
    if not separate:
        doc = np.array(ids * E, dtype=np.int32)
        rs.shuffle(doc)
    else:
        first = np.array(ids * (E - 1), dtype=np.int32)
        rs.shuffle(first)
        last = np.array(ids, dtype=np.int32)
        rs.shuffle(last)
        doc = np.concatenate([first, last])
    doc = doc.tolist()
    if drop_last:
        ns = (E * T - extra) // L
    else:
        ns = int(math.ceil(np.float32(E * T - extra) / np.float32(L)))
    rows = sample_index_walk(sizes, doc, L, extra, ns)
    if drop_last and extra == 1:
        assert rows == sample_index_closed(sizes, doc, L, ns), "walk and closed form disagree"
    if not separate:
        shuf = np.arange(ns, dtype=np.int64)
        rs.shuffle(shuf)
    else:
        a = np.arange(n_sans, dtype=np.int64)
        rs.shuffle(a)
        c = np.arange(n_sans, ns, dtype=np.int64)
        rs.shuffle(c)
        shuf = np.concatenate([a, c])
    out = {"exists": True, "begin": b, "end": e, "tokens_per_epoch": T, "num_epochs": E,
           "separate_final_epoch": separate, "num_samples": ns, "doc_index": doc,
           "sample_index": [v for r in rows for v in r], "shuffle_index": shuf.tolist()}
    if with_text:
        flat = [gid * 100000 + s * 1000 + t for s in doc for t in range(sizes[s])]
        texts = []
        for i in range(ns):
            j = int(shuf[i])
            t = flat[j * L: j * L + L + extra]
            texts.append(t)
        out["texts"] = texts
    return out


def gpt_all(sizes, split, L, Ns, seed, drop_last=True, with_text=False, gid=0):
    books = split_bookends(split)
    res = []
    for k in range(3):
        if books[k] is None:
            res.append({"exists": False})
            continue
        dl = True if k == 0 else drop_last
        rr = split_range(books[k], len(sizes))
        if sum(sizes[rr[0]:rr[1]]) <= 1:  # Megatron asserts here; the C++ must throw
            res.append({"exists": True, "begin": rr[0], "end": rr[1], "error": "no tokens"})
            continue
        res.append(gpt_split(sizes, rr, L, Ns[k], seed, 1, dl, with_text, gid))
    return res


def blending(weights, size):
    """Greedy: error_k = w_k * max(i, 1) - count_k; the first maximum (lowest k) wins."""
    counts = [0] * len(weights)
    di, dsi = [], []
    for i in range(size):
        x = max(float(i), 1.0)
        errs = [weights[k] * x - counts[k] for k in range(len(weights))]
        best = max(range(len(weights)), key=lambda k: (errs[k], -k))
        di.append(best)
        dsi.append(counts[best])
        counts[best] += 1
    return di, dsi


def normalize(w):
    a = np.array(w, dtype=np.float64)
    return (a / np.sum(a)).tolist()


def blend_all(spec):
    weights = normalize(spec["weights"])
    surplus = spec.get("surplus", 0.005)
    Ns = spec["num_samples"]
    books = split_bookends(spec["split"])
    res = []
    for k in range(3):
        if books[k] is None:
            res.append({"exists": False})
            continue
        N = Ns[k]
        target = [int(math.ceil(math.ceil(N * w))) for w in weights]
        buffer = [int(math.ceil(math.ceil(N * w) * (1 + surplus))) for w in weights]
        parts = []
        if any(sum(sz[slice(*split_range(books[k], len(sz)))]) <= 1 for sz in spec["datasets"]):
            res.append({"exists": True, "error": "no tokens"})
            continue
        for g, sizes in enumerate(spec["datasets"]):
            parts.append(gpt_split(sizes, split_range(books[k], len(sizes)), spec["seq_length"],
                                   buffer[g], spec["seed"], 1, True, spec.get("with_text", False), g))
        size = sum(target)
        w2 = normalize(weights)
        di, dsi = blending(w2, size)
        entry = {"exists": True, "size": size, "per_dataset_samples": buffer, "parts": parts,
                 "dataset_index": di, "dataset_sample_index": dsi}
        if spec.get("with_text", False):
            entry["texts"] = [parts[d]["texts"][s] for d, s in zip(di, dsi)]
            for p in parts:
                del p["texts"]
        res.append(entry)
    return res


def rng_checks():
    out = {"random_sample_seed42": np.random.RandomState(42).random_sample()}
    for seed in (0, 1234):
        a = np.arange(10)
        np.random.RandomState(seed).shuffle(a)
        out[f"shuffle10_seed{seed}"] = a.tolist()
    rs = np.random.RandomState(5489)
    out["mt_5489_10000th"] = int(rs.randint(0, 2**32, size=10000, dtype=np.uint64)[-1])
    # Masked rejection on 64-bit draws (bounds above 2^32), as random_interval does.
    out["interval_2pow40_seed1"] = np.random.RandomState(1).randint(0, 2**40 + 1, size=5, dtype=np.int64).tolist()
    out["interval_1000_seed1"] = np.random.RandomState(1).randint(0, 1001, size=5, dtype=np.int64).tolist()
    big = np.arange(100000, dtype=np.int64)
    np.random.RandomState(7).shuffle(big)
    out["shuffle100000_seed7_head"] = big[:20].tolist()
    return out


def run(spec):
    mode = spec.get("mode", "gpt")
    if mode == "rng":
        out = rng_checks()
    elif mode == "gpt":
        out = {"splits": gpt_all(spec["sizes"], spec["split"], spec["seq_length"], spec["num_samples"],
                                 spec["seed"], spec.get("drop_last_partial", True),
                                 spec.get("with_text", False))}
    elif mode == "blend":
        out = {"splits": blend_all(spec)}
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["spec"] = spec
    return out


def main():
    spec = json.load(open(sys.argv[1]))
    out = [run(s) for s in spec] if isinstance(spec, list) else run(spec)
    text = json.dumps(out, separators=(",", ":"))
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
