#!/usr/bin/python3
"""Writes a synthetic JSONL corpus ({"text": ...} per line) for bench/preprocess_bench.sh: documents
of sentences drawn from a Zipf-distributed vocabulary (common English words at the top, then
syllable-built words), with punctuation, numbers, paragraphs, and a few percent of Chinese text,
so tokenization cost resembles web text. Deterministic for a given --seed. Not committed output.
  make_synthetic_corpus.py OUT.jsonl --mb 220 [--seed 1] [--sample SAMPLE.txt --sample-mb 30]
"""
import argparse
import json
import random

COMMON = ("the of and to a in is that for it as was with be by on not he i this are or his from at which but have "
          "an they you were her she there been one all we their has would when who will more if no out so said what "
          "up its about into than them can only other new some could time these two may then do first any my now "
          "such like our over man me even most made after also did many before must through back years where much "
          "your way well down should because each just those people how too little state good very make world still "
          "own see men work long get here between both life being under never day same another know while last might "
          "us great old year off come since against go came right used take three").split()


def build_vocab(rng, n):
    cons = "b c d f g h j k l m n p r s t v w z br cr dr fl gr pl pr st tr ch sh th".split()
    vows = "a e i o u ai ea ee io ou y".split()
    ends = ["", "", "", "s", "ed", "ing", "er", "ly", "tion", "ment", "al", "ous"]
    words = set(COMMON)
    out = list(COMMON)
    while len(out) < n:
        w = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.choice([1, 1, 2, 2, 2, 3, 3, 4])))
        w += rng.choice(ends)
        if w not in words:
            words.add(w)
            out.append(w)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, default=220)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample", help="also write the first --sample-mb of text, one paragraph per line (for spm_train)")
    ap.add_argument("--sample-mb", type=float, default=30)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    vocab = build_vocab(rng, 30000)
    weights = [1.0 / (r + 1) ** 1.07 for r in range(len(vocab))]
    cum = []
    acc = 0.0
    for w in weights:
        acc += w
        cum.append(acc)
    cjk = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    target = int(args.mb * 1e6)
    sample_target = int(args.sample_mb * 1e6) if args.sample else 0
    written = 0
    sample_written = 0
    sample = open(args.sample, "w", encoding="utf-8") if args.sample else None
    with open(args.out, "w", encoding="utf-8") as f:
        while written < target:
            n_words = max(20, int(rng.lognormvariate(6.2, 0.8)))  # ~500 words median
            words = rng.choices(vocab, cum_weights=cum, k=n_words)
            paras, sent, para = [], [], []
            for i, w in enumerate(words):
                r = rng.random()
                if r < 0.02:
                    w = str(rng.randint(0, 100000))
                elif r < 0.025:
                    w = "".join(rng.choices(cjk, k=rng.randint(2, 12)))
                if not sent:
                    w = w.capitalize()
                sent.append(w)
                if rng.random() < 0.06:
                    sent[-1] += ","
                if len(sent) > 6 and rng.random() < 0.08:
                    para.append(" ".join(sent) + rng.choice([".", ".", ".", "?", "!", ";"]))
                    sent = []
                    if rng.random() < 0.15:
                        paras.append(" ".join(para))
                        para = []
            if sent:
                para.append(" ".join(sent) + ".")
            if para:
                paras.append(" ".join(para))
            text = "\n\n".join(paras)
            line = json.dumps({"text": text, "meta": {"id": written}}, ensure_ascii=False) + "\n"
            f.write(line)
            written += len(line.encode("utf-8"))
            if sample and sample_written < sample_target:
                for p in paras:
                    sample.write(p + "\n")
                    sample_written += len(p) + 1
    if sample:
        sample.close()


if __name__ == "__main__":
    main()
