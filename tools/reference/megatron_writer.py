#!/usr/bin/python3
"""Independent reference writer of Megatron indexed datasets (.bin/.idx), written from docs/formats.md
section 1 with numpy and python3-sentencepiece, to produce the golden files the C++ preprocess must
match byte for byte. It shares no code with llamatrain. Conventions (NeMo's
preprocess_data_for_megatron.py, as llamatrain documents in docs/data.md): no BOS unless --bos,
--append-eod appends eos_id to every non-empty document, documents with no tokens are skipped,
--need-pad-id adds one to the vocab size used for the dtype choice (uint16 if < 65500, else int32).
Malformed lines (invalid UTF-8, invalid JSON, not an object, missing key, non-string value, blank)
are skipped, as llamatrain does.

  megatron_writer.py preprocess --input corpus.jsonl --tokenizer-model tokenizer.model \\
                                --output-prefix out/corpus [--json-keys text] [--append-eod] [--bos]
  megatron_writer.py ids --ids ids.json --dtype int32 --output-prefix out/x   # ids.json: [[1,2],[3]]
"""
import argparse
import json
import struct
import sys

import numpy as np

DTYPE_CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint16": 8}


def write_dataset(prefix, documents, dtype_name):
    """documents: list of lists of token ids; one sequence per document."""
    dtype = np.dtype(dtype_name).newbyteorder("<")
    sizes = np.array([len(d) for d in documents], dtype="<i4")
    # pointers are byte offsets: a running sum of sizes * itemsize, starting at 0
    pointers = np.zeros(len(documents), dtype="<i8")
    if len(documents) > 1:
        pointers[1:] = np.cumsum(sizes[:-1].astype(np.int64) * dtype.itemsize)
    doc_idx = np.arange(len(documents) + 1, dtype="<i8")
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            arr = np.array(d, dtype=np.int64)
            info = np.iinfo(dtype)
            assert arr.size == 0 or (arr.min() >= info.min and arr.max() <= info.max), "token out of dtype range"
            f.write(arr.astype(dtype).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[dtype_name]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(sizes.tobytes())
        f.write(pointers.tobytes())
        f.write(doc_idx.tobytes())


def read_lines(path):
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def extract(raw, keys, input_format):
    """Returns (list of texts per key) or None for a skipped line."""
    if input_format == "text":
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            return [raw.decode("utf-8")]
        except UnicodeDecodeError:
            return None
    if raw.strip(b" \t\r") == b"":
        return None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(obj, dict):
        return None
    out = []
    for k in keys:
        if k not in obj or not isinstance(obj[k], str):
            return None
        out.append(obj[k])
    return out


def preprocess(args):
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer_model)
    vocab = sp.vocab_size() + (1 if args.need_pad_id and sp.pad_id() < 0 else 0)
    dtype_name = "uint16" if vocab < 65500 else "int32"
    keys = ["text"] if args.input_format == "text" else args.json_keys
    docs = {k: [] for k in keys}
    for path in args.input:
        for raw in read_lines(path):
            texts = extract(raw, keys, args.input_format)
            if texts is None:
                continue
            for k, text in zip(keys, texts):
                ids = sp.encode(text)
                if not ids:
                    continue
                if args.bos:
                    ids = [sp.bos_id()] + ids
                if args.append_eod:
                    ids = ids + [sp.eos_id()]
                docs[k].append(ids)
    for k in keys:
        write_dataset(f"{args.output_prefix}_{k}_document", docs[k], dtype_name)
        print(f"{args.output_prefix}_{k}_document: {len(docs[k])} documents, {dtype_name}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("preprocess")
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--input-format", default="jsonl", choices=["jsonl", "text"])
    p.add_argument("--json-keys", nargs="+", default=["text"])
    p.add_argument("--tokenizer-model", required=True)
    p.add_argument("--output-prefix", required=True)
    p.add_argument("--append-eod", action="store_true")
    p.add_argument("--need-pad-id", action="store_true")
    p.add_argument("--bos", action="store_true")
    q = sub.add_parser("ids")
    q.add_argument("--ids", required=True, help="JSON file with a list of token-id lists")
    q.add_argument("--dtype", default="uint16", choices=sorted(DTYPE_CODES))
    q.add_argument("--output-prefix", required=True)
    args = ap.parse_args()
    if args.cmd == "preprocess":
        preprocess(args)
    else:
        with open(args.ids) as f:
            write_dataset(args.output_prefix, json.load(f), args.dtype)


if __name__ == "__main__":
    main()
