#!/usr/bin/python3
"""Independent reference for growing a Llama checkpoint's vocabulary (the resize test's oracle).

extend: writes a tokenizer that extends BASE.model (every base piece at its id) with new pieces after
  them: the most frequent pairs of adjacent base pieces inside a word of CORPUS (JSONL "text") that the
  base lacks, a few fixed pieces (Chinese words the base only has as bytes, a word-inner "the", a
  repeated piece), two control and three unused pieces, until --size pieces.
rows: the new rows that model.new_token_init gives, from the base safetensors, in float64 rounded to
  float32 once, printed as JSON {"splits": [[ids] per new piece], "embed": [[C floats] per new row],
  "lm_head": [...]}. A piece's split is computed here by SentencePiece's BPE written out in Python
  (not the library): the piece's characters (U+2581 kept as a character) start as symbols; the
  adjacent pair whose concatenation is a normal or user-defined base piece with the highest score
  merges, the leftmost on a tie, until none does; a symbol that is no base piece becomes its UTF-8
  bytes' <0xXX> pieces (byte fallback) or <unk>. A byte piece maps to the base's piece of that byte.
  Control, unknown and unused pieces, and splits with <unk>, get the mean of all base rows; so does
  every row under --init mean. With --check-library the splits are also compared with the
  sentencepiece library's encoding under a copy of the base model with add_dummy_prefix and
  remove_extra_whitespaces off.
Example: /usr/bin/python3 tools/reference/vocab_resize.py rows --hf base/ --tokenizer ext.model
"""
import argparse
import collections
import json
import os
import sys

import numpy as np
from sentencepiece import sentencepiece_model_pb2 as pb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"


def load_proto(path):
    m = pb.ModelProto()
    with open(path, "rb") as f:
        m.ParseFromString(f.read())
    return m


class Bpe:
    """SentencePiece BPE encoding of one piece's characters, by the rule in the module docstring."""

    def __init__(self, proto):
        self.ids = {}
        self.score = {}
        self.unk = 0
        for i, p in enumerate(proto.pieces):
            if p.type in (NORMAL, USER_DEFINED):
                self.ids[p.piece] = i
                self.score[p.piece] = p.score
            elif p.type == BYTE:
                self.ids.setdefault(p.piece, i)
            elif p.type == UNKNOWN:
                self.unk = i
        self.byte_fallback = proto.trainer_spec.byte_fallback

    def split(self, text):
        syms = list(text)
        while True:
            best = None
            for k in range(len(syms) - 1):
                merged = syms[k] + syms[k + 1]
                if merged in self.score and (best is None or self.score[merged] > best[0]):
                    best = (self.score[merged], k)
            if best is None:
                break
            k = best[1]
            syms[k:k + 2] = [syms[k] + syms[k + 1]]
        out = []
        for s in syms:
            if s in self.score:
                out.append(self.ids[s])
            elif self.byte_fallback:
                out.extend(self.ids["<0x%02X>" % b] for b in s.encode("utf-8"))
            else:
                out.append(self.unk)
        return out


def split_piece(base, bpe, piece, base_rows):
    """The base ids a new piece's row averages, or [] for the mean of all rows."""
    if piece.type in (CONTROL, UNKNOWN, UNUSED):
        return []
    if piece.type == BYTE:
        i = bpe.ids.get(piece.piece)
        return [i] if i is not None and i < base_rows and base.pieces[i].type == BYTE else []
    ids = bpe.split(piece.piece)
    if not ids or any(i == bpe.unk or i >= base_rows for i in ids):
        return []
    return ids


def corpus_texts(path):
    texts = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                text = json.loads(line).get("text", "")
            except (ValueError, AttributeError):
                continue
            if isinstance(text, str):
                texts.append(text)
    return texts


def cmd_extend(a):
    import sentencepiece as spm

    base = load_proto(a.base)
    texts = corpus_texts(a.corpus)
    out = pb.ModelProto()
    out.CopyFrom(base)

    def add(piece, kind=NORMAL):
        e = out.pieces.add()
        e.piece, e.score, e.type = piece, 0.0, kind

    have = {p.piece for p in base.pieces}
    for p in [SPACE + "中文", "中国", "的", "the", "ee", SPACE + "eeee"]:
        if p not in have:
            add(p)
            have.add(p)
    specials = [("<extra_0>", CONTROL), ("<extra_1>", CONTROL)] + [("<unused_%d>" % i, UNUSED) for i in range(3)]
    # Rounds of the most frequent adjacent pairs inside words, encoded with the pieces so far (as BPE
    # training adds merges), until the size is reached.
    while len(out.pieces) + len(specials) < a.size:
        sp = spm.SentencePieceProcessor(model_proto=out.SerializeToString())
        pairs = collections.Counter()
        for text in texts:
            ids = sp.encode(text)
            for x, y in zip(ids, ids[1:]):
                px, py = out.pieces[x], out.pieces[y]
                if py.piece.startswith(SPACE) or px.type != NORMAL or py.type != NORMAL:
                    continue
                if px.piece + py.piece not in have:
                    pairs[px.piece + py.piece] += 1
        if not pairs:
            sys.exit("the corpus has too few pairs for %d pieces" % a.size)
        for p, _ in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[:16]:
            if len(out.pieces) + len(specials) < a.size:
                add(p)
                have.add(p)
        if len(out.pieces) - len(base.pieces) > 40 and specials:  # specials among the new pieces
            for p, t in specials:
                add(p, t)
            specials = []
    for p, t in specials:
        add(p, t)
    assert len(out.pieces) == a.size, len(out.pieces)
    with open(a.out, "wb") as f:
        f.write(out.SerializeToString())


def cmd_rows(a):
    import hf_logits

    base_path = a.base or os.path.join(a.hf, "tokenizer.model")
    base, ext = load_proto(base_path), load_proto(a.tokenizer)
    with open(os.path.join(a.hf, "config.json")) as f:
        base_rows = json.load(f)["vocab_size"]
    bpe = Bpe(base)
    splits = [split_piece(base, bpe, ext.pieces[i], base_rows) if a.init == "subword_mean" else []
              for i in range(base_rows, len(ext.pieces))]
    if a.check_library:
        import sentencepiece as spm

        lit = pb.ModelProto()
        lit.CopyFrom(base)
        lit.normalizer_spec.add_dummy_prefix = False
        lit.normalizer_spec.remove_extra_whitespaces = False
        sp = spm.SentencePieceProcessor(model_proto=lit.SerializeToString())
        for i, s in zip(range(base_rows, len(ext.pieces)), splits):
            p = ext.pieces[i]
            if s and p.type == NORMAL:
                lib = sp.encode(p.piece.replace(SPACE, " "))
                assert lib == s, "piece %d %r: library %r, reference %r" % (i, p.piece, lib, s)
    tensors = hf_logits.load_weights(a.hf)
    out = {"splits": splits}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        if name not in tensors:
            continue
        w = tensors[name].astype(np.float64)
        assert w.shape[0] == base_rows
        mean = w.mean(axis=0)
        rows = [(w[s].mean(axis=0) if s else mean).astype(np.float32) for s in splits]
        out["embed" if "embed" in name else "lm_head"] = [r.tolist() for r in rows]
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extend")
    e.add_argument("--base", required=True)
    e.add_argument("--corpus", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--size", type=int, required=True)
    r = sub.add_parser("rows")
    r.add_argument("--hf", required=True)
    r.add_argument("--base", default="", help="the base tokenizer (default: HF/tokenizer.model)")
    r.add_argument("--tokenizer", required=True)
    r.add_argument("--init", default="subword_mean", choices=["subword_mean", "mean"])
    r.add_argument("--check-library", action="store_true")
    a = ap.parse_args()
    {"extend": cmd_extend, "rows": cmd_rows}[a.cmd](a)


if __name__ == "__main__":
    main()
