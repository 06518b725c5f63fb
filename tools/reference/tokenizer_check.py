#!/usr/bin/python3
# Independent checks of `llamatrain tokenizer train|merge|stats` with SentencePiece's own Python module:
#   spec MODEL            the model's trainer/normalizer settings and pieces (via sentencepiece_model_pb2)
#   encode MODEL DOCS     ids of each document (JSONL, key "text") and whether decode(encode(x)) == x
#   stats MODEL... DOCS   per-script token statistics, computed from the piece strings alone (no offsets
#                         from the library): each token's bytes are found by walking the normalized text
# Prints JSON on stdout. Used by tests/data/tokenizer_tools_test.cpp.
import json
import sys

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb


def docs_of(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def spec(model):
    m = pb.ModelProto()
    with open(model, "rb") as f:
        m.ParseFromString(f.read())
    t, n = m.trainer_spec, m.normalizer_spec
    return {
        "model_type": t.model_type, "vocab_size": t.vocab_size, "byte_fallback": t.byte_fallback,
        "split_digits": t.split_digits, "character_coverage": t.character_coverage,
        "allow_whitespace_only_pieces": t.allow_whitespace_only_pieces,
        "unk_id": t.unk_id, "bos_id": t.bos_id, "eos_id": t.eos_id, "pad_id": t.pad_id,
        "normalization_rule_name": n.name, "remove_extra_whitespaces": n.remove_extra_whitespaces,
        "add_dummy_prefix": n.add_dummy_prefix,
        "pieces": [[p.piece, p.score, p.type] for p in m.pieces],
    }


def encode(model, docs_path):
    sp = spm.SentencePieceProcessor(model_file=model)
    docs = docs_of(docs_path)
    ids = [sp.encode(d) for d in docs]
    return {"ids": ids, "roundtrip": sum(sp.decode(i) == d for i, d in zip(ids, docs)), "documents": len(docs)}


def script(ch):
    c = ord(ch)
    if (0x3400 <= c <= 0x4DBF or 0x4E00 <= c <= 0x9FFF or 0xF900 <= c <= 0xFAFF or 0x20000 <= c <= 0x3FFFF
            or 0x2E80 <= c <= 0x2FDF or 0x3000 <= c <= 0x303F or 0xFE30 <= c <= 0xFE4F or 0xFF00 <= c <= 0xFFEF):
        return "han"
    if c <= 0x024F or 0x1E00 <= c <= 0x1EFF:
        return "latin"
    return "other"


def token_chars(sp, ids, text):
    """For each token, the indices of the characters of `text` its bytes cover (identity normalization,
    dummy prefix, spaces as U+2581): walks the normalized bytes piece by piece."""
    norm = "\u2581" + text.replace(" ", "\u2581")
    owner = [-1] * 3  # the dummy prefix's bytes belong to no character
    for i, ch in enumerate(text):
        owner += [i] * len(("\u2581" if ch == " " else ch).encode("utf-8"))
    pos, out = 0, []
    for t in ids:
        if sp.is_byte(t):
            n = 1
        else:
            n = len(sp.id_to_piece(t).encode("utf-8"))
        covered = sorted({owner[b] for b in range(pos, pos + n)} - {-1})
        out.append(covered)
        pos += n
    assert pos == len(norm.encode("utf-8")), (pos, text)
    return out


def stats(models, docs_path):
    docs = docs_of(docs_path)
    sps = [spm.SentencePieceProcessor(model_file=m) for m in models]
    first = [sps[0].encode(d) for d in docs]
    result = []
    for m, sp in zip(models, sps):
        s = {"model": m, "tokens": 0, "characters": 0, "bytes": 0, "byte_fallback_tokens": 0, "unknown_tokens": 0,
             "documents_differing": 0, "latin_documents_differing": 0, "latin_documents": 0,
             "scripts": {k: {"tokens": 0.0, "characters": 0, "bytes": 0} for k in ("han", "latin", "other")}}
        for d, ref in zip(docs, first):
            ids = sp.encode(d)
            scripts = [script(ch) for ch in d]
            latin = all(x == "latin" for x in scripts)
            s["latin_documents"] += latin
            s["tokens"] += len(ids)
            s["characters"] += len(d)
            s["bytes"] += len(d.encode("utf-8"))
            for ch, sc in zip(d, scripts):
                s["scripts"][sc]["characters"] += 1
                s["scripts"][sc]["bytes"] += len(ch.encode("utf-8"))
            covered = token_chars(sp, ids, d)
            for k, (t, cs) in enumerate(zip(ids, covered)):
                s["byte_fallback_tokens"] += sp.is_byte(t)
                s["unknown_tokens"] += sp.is_unknown(t)
                if not cs:  # no character: the next token's first one (byte pieces: their character)
                    nxt = next((c for c in covered[k + 1:] if c), [len(d) - 1])
                    cs = [nxt[0]]
                for c in cs:
                    s["scripts"][scripts[c]]["tokens"] += 1.0 / len(cs)
            if m != models[0] and ids != ref:
                s["documents_differing"] += 1
                s["latin_documents_differing"] += latin
        result.append(s)
    return {"models": result}


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "spec":
        out = spec(args[0])
    elif cmd == "encode":
        out = encode(args[0], args[1])
    else:
        out = stats(args[:-1], args[-1])
    json.dump(out, sys.stdout)
