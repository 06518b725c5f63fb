#!/usr/bin/python3
"""Loss, bits per byte and bits per character of a Hugging Face Llama folder on a Megatron dataset,
computed as `llamatrain eval --json` defines them, independently of it (the eval test's oracle).

The token stream is the dataset's .bin read whole (documents in order, as eval reads them), cut
into windows of seq-length + 1 tokens with stride seq-length; the model runs in float64 (llama_ref)
and every target's cross-entropy is summed. Each target's bytes and characters come from
SentencePiece's Python module: a control or unknown piece 0, a byte piece <0xXX> 1 byte (and 1
character unless XX is a continuation byte 0x80..0xBF), any other piece its text with U+2581 as one
space. Before that, the definition is checked against decode: every document of the stream (ids
between </s>) whose decode is valid text counts exactly its decoded text's bytes and characters plus
one (the space add_dummy_prefix adds). Prints one JSON object.
With --labels FILE (the JSON lines of `llamatrain data samples --json`) it only counts the tokens,
bytes and characters of the labels that are not -100 (what validation's bits per byte divides by);
that needs numpy and sentencepiece only. With FOLDER and --samples FILE (the same JSON lines) it
scores those samples as validation does, each on its own (tokens in, labels not -100 scored), and
prints the figures of the whole and of each "source" the lines name (validation per source).
Examples:
  /usr/bin/python3 tools/reference/bits_per_byte.py out/hf --data data/val_text_document --seq-length 256
  /usr/bin/python3 tools/reference/bits_per_byte.py --labels samples.jsonl --tokenizer tokenizer.model
  /usr/bin/python3 tools/reference/bits_per_byte.py out/hf --samples samples.jsonl
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import sentencepiece as spm

# Megatron .idx dtype codes (docs/formats.md)
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read_stream(prefix):
    with open(prefix + ".idx", "rb") as f:
        head = f.read(9 + 8 + 1)
    assert head[:9] == b"MMIDIDX\x00\x00", "not a Megatron index: " + prefix + ".idx"
    (version,) = struct.unpack("<Q", head[9:17])
    assert version == 1, version
    return np.fromfile(prefix + ".bin", dtype=DTYPES[head[17]]).astype(np.int64)


def piece_lengths(sp):
    """(bytes, chars) per id, from the piece's text and type."""
    n = sp.get_piece_size()
    nbytes, nchars = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for i in range(n):
        if sp.is_control(i) or sp.is_unknown(i):
            continue
        piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            value = int(piece[3:5], 16)
            nbytes[i], nchars[i] = 1, 0 if 0x80 <= value < 0xC0 else 1
        else:
            text = piece.replace("\u2581", " ")
            nbytes[i], nchars[i] = len(text.encode("utf-8")), len(text)
    return nbytes, nchars


def check_documents(sp, stream, nbytes, nchars):
    """Documents checked against their decoded text; fails loudly on a mismatch."""
    checked, doc = 0, []
    for t in list(stream) + [sp.eos_id()]:
        if t != sp.eos_id():
            doc.append(int(t))
            continue
        text = sp.decode(doc)
        if doc and "\ufffd" not in text:
            got = (int(nbytes[doc].sum()), int(nchars[doc].sum()))
            want = (len(text.encode("utf-8")) + 1, len(text) + 1)
            assert got == want, f"document {doc}: pieces count {got}, its text {want}"
            checked += 1
        doc = []
    return checked


def score_samples(path, params, cfg, lengths):
    """Figures of the whole and of each source over the samples of `llamatrain data samples --json`."""
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_ref as ref
    nbytes, nchars = lengths
    sums = {}  # name -> [nats, targets, bytes, chars]; "" is the whole

    def add(name, nats, labels):
        s = sums.setdefault(name, [0.0, 0, 0, 0])
        s[0] += nats
        s[1] += int(labels.size)
        s[2] += int(nbytes[labels].sum())
        s[3] += int(nchars[labels].sum())

    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            tokens, labels = np.array(row["tokens"]), np.array(row["labels"])
            with torch.no_grad():
                logits = ref.forward(params, cfg, torch.tensor(tokens[None, :], dtype=torch.long))[0]
                losses = F.cross_entropy(logits, torch.tensor(labels), ignore_index=-100, reduction="none")
            nats, scored = float(losses.sum()), labels[labels >= 0]
            add("", nats, scored)
            if row.get("source"):
                add(row["source"], nats, scored)

    def figures(s):
        out = {"loss": s[0] / s[1], "loss_sum": s[0], "tokens": s[1], "bytes": s[2], "chars": s[3]}
        if s[2]:
            out.update(bits_per_byte=s[0] / math.log(2) / s[2], bits_per_char=s[0] / math.log(2) / s[3])
        return out

    return {"whole": figures(sums[""]), "sources": {k: figures(v) for k, v in sums.items() if k}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", help="Hugging Face folder")
    ap.add_argument("--data", help="dataset prefix (.bin/.idx)")
    ap.add_argument("--seq-length", type=int)
    ap.add_argument("--max-windows", type=int, default=0)
    ap.add_argument("--tokenizer", help="default: FOLDER/tokenizer.model")
    ap.add_argument("--labels", help="JSON lines with 'labels': count them only")
    ap.add_argument("--samples", help="JSON lines with 'tokens', 'labels' and 'source': score them per source")
    a = ap.parse_args()
    sp = spm.SentencePieceProcessor(model_file=a.tokenizer or os.path.join(a.folder, "tokenizer.model"))
    if a.labels:
        with open(a.labels) as f:
            labels = np.array([t for line in f if line.strip() for t in json.loads(line)["labels"] if t >= 0])
        nbytes, nchars = piece_lengths(sp)
        print(json.dumps({"tokens": int(labels.size), "bytes": int(nbytes[labels].sum()),
                          "chars": int(nchars[labels].sum())}))
        return
    if not (a.folder and (a.samples or (a.data and a.seq_length))):
        ap.error("FOLDER with --data and --seq-length, or with --samples, is required (or --labels)")
    # The model needs PyTorch and the reference (--labels does not).
    import torch
    import torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import llama_ref as ref
    from hf_logits import load_weights
    torch.set_num_threads(1)
    with open(os.path.join(a.folder, "config.json")) as f:
        cfg = ref.LlamaConfig.from_hf_json(json.load(f))
    tensors = load_weights(a.folder)
    params = ref.to_torch({n: tensors[n] for n, _ in ref.param_shapes(cfg)}, torch.float64, requires_grad=False)

    if a.samples:
        print(json.dumps(score_samples(a.samples, params, cfg, piece_lengths(sp))))
        return
    stream = read_stream(a.data)
    nbytes, nchars = piece_lengths(sp)
    docs = check_documents(sp, stream, nbytes, nchars)
    T = a.seq_length
    windows = (len(stream) - 1) // T
    if a.max_windows > 0:
        windows = min(windows, a.max_windows)
    idx = np.arange(windows)[:, None] * T + np.arange(T)[None, :]
    tokens, targets = stream[idx], stream[idx + 1]
    with torch.no_grad():
        logits = ref.forward(params, cfg, torch.tensor(tokens, dtype=torch.long))
        losses = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), torch.tensor(targets.reshape(-1)),
                                 reduction="none")
    loss_sum = float(losses.sum())
    b, c = int(nbytes[targets].sum()), int(nchars[targets].sum())
    print(json.dumps({
        "windows": windows, "targets": int(targets.size), "loss": loss_sum / targets.size, "loss_sum": loss_sum,
        "bytes": b, "chars": c, "bits_per_byte": loss_sum / math.log(2) / b, "bits_per_char": loss_sum / math.log(2) / c,
        "documents_checked": docs, "byte_piece_targets": int(sum(sp.is_byte(int(t)) for t in targets.reshape(-1))),
    }))


if __name__ == "__main__":
    main()
