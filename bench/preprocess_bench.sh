#!/usr/bin/env bash
# Preprocessing benchmark (not a test): generates a synthetic JSONL corpus (>= 200 MB, in /tmp, not
# committed), trains a BPE tokenizer on a sample of it (spm_train: vocab 32000, byte_fallback), then
# measures in one run: the raw SentencePiece encode rate of the same texts on one thread
# (spm_encode_rate, encode calls only), and `llamatrain preprocess` with 1 and 2 workers, with
# peak RSS from /usr/bin/time -v. Prints throughputs and ratios; targets: >= 0.85x (1 worker),
# >= 1.7x (2 workers, needs 2 free cores), peak RSS < 300 MB.
# Usage: bench/preprocess_bench.sh [BUILD_DIR (build/release)] ; env: MB=220 VOCAB=32000 WORK=/tmp/llamatrain_bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
MB=${MB:-220}
VOCAB=${VOCAB:-32000}
WORK=${WORK:-/tmp/llamatrain_bench}
PY=/usr/bin/python3
mkdir -p "$WORK"
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (apt-get install time)"; exit 1; }
cmake --build "$BUILD" --target llamatrain spm_encode_rate >/dev/null

CORPUS=$WORK/corpus_${MB}mb.jsonl
if [ ! -s "$CORPUS" ]; then
  echo "generating $CORPUS ..."
  $PY bench/make_synthetic_corpus.py "$CORPUS" --mb "$MB" --sample "$WORK/sample.txt" --sample-mb 20
fi
MODEL=$WORK/bench_${VOCAB}.model
if [ ! -s "$MODEL" ]; then
  echo "training $MODEL (spm_train bpe vocab $VOCAB byte_fallback) ..."
  spm_train --input="$WORK/sample.txt" --model_prefix="$WORK/bench_${VOCAB}" --vocab_size="$VOCAB" \
    --model_type=bpe --byte_fallback=true --character_coverage=0.9995 --input_sentence_size=300000 \
    --shuffle_input_sentence=true --hard_vocab_limit=false --split_digits=true \
    --num_threads=2 --minloglevel=2 >/dev/null 2>&1
fi
cat "$CORPUS" >/dev/null  # warm the page cache so every run reads from memory

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "corpus: $CORPUS ($(du -m "$CORPUS" | cut -f1) MB, $(wc -l <"$CORPUS") documents), tokenizer $MODEL"

rss_mb() { awk -F: '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$1"; }

/usr/bin/time -v "$BUILD/spm_encode_rate" --tokenizer-model "$MODEL" --input "$CORPUS" >"$WORK/encode.out" 2>"$WORK/encode.time"
ENC=$(sed -n 's/.* encode_mb_s=\([0-9.]*\).*/\1/p' "$WORK/encode.out")
ENC_CPU=$(sed -n 's/.*encode_cpu_mb_s=\([0-9.]*\).*/\1/p' "$WORK/encode.out")
echo "raw SentencePiece encode (1 thread, encode calls only): $ENC MB/s wall, $ENC_CPU MB/s per CPU second"
echo "  [$(cat "$WORK/encode.out")]"
cpu_s() { awk -F: '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$1"; }

for W in 1 2; do
  OUT=$WORK/out_w$W
  LOAD=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -v "$BUILD/llamatrain" preprocess --input "$CORPUS" --tokenizer-model "$MODEL" \
    --output-prefix "$OUT" --append-eod --workers "$W" --quiet 2>"$WORK/pre_w$W.time"
  read -r TB EL < <($PY -c "import json; j=json.load(open('$OUT.stats.json')); print(j['text_bytes'], j['elapsed_s'])")
  RATE=$($PY -c "print(f'{$TB/$EL/1e6:.2f}')")
  RATIO=$($PY -c "print(f'{$TB/$EL/1e6/$ENC:.2f}')")
  WALL=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/pre_w$W.time")
  CPU=$(cpu_s "$WORK/pre_w$W.time")
  CPU_RATIO=$($PY -c "print(f'{$TB/$CPU/1e6/$ENC_CPU:.2f}')")
  echo "preprocess --workers $W (load before: $LOAD): $RATE MB/s (elapsed ${EL}s, wall $WALL) = ${RATIO}x raw encode;" \
       "CPU ${CPU}s (all threads) = ${CPU_RATIO}x the encode rate per CPU second; peak RSS $(rss_mb "$WORK/pre_w$W.time") MB"
done
cmp -s "$WORK/out_w1_text_document.bin" "$WORK/out_w2_text_document.bin" && \
  cmp -s "$WORK/out_w1_text_document.idx" "$WORK/out_w2_text_document.idx" && echo "outputs of 1 and 2 workers: identical"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
