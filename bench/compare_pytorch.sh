#!/usr/bin/env bash
# Side-by-side training throughput: llamatrain (bf16-mixed) vs PyTorch 1.13 fp32 and bf16-autocast
# (tools/reference/train_step.py), 2 threads each, on stories110m and stories42m shapes, seq 256 batch 8.
# Prints tokens/s, peak RSS and the ratios llamatrain / PyTorch. A failing llamatrain run shows n/a.
# Usage: bench/compare_pytorch.sh [path/to/llamatrain]
#   env: STEPS=5 timed steps, THREADS=2, SEQ=256, BATCH=8,
#        MODELS_OVERRIDE="name dim layers heads ffn vocab;..." to replace the two default models (smoke tests).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/llamatrain}
STEPS=${STEPS:-5}
THREADS=${THREADS:-2}
PY=/usr/bin/python3
SEQ=${SEQ:-256}
BATCH=${BATCH:-8}
export OMP_NUM_THREADS=$THREADS

# name dim layers heads ffn vocab (llama2.c's stories models tie the embedding and the classifier)
MODELS=("stories110m 768 12 12 2048 32000" "stories42m 512 8 8 1376 32000")
if [[ -n "${MODELS_OVERRIDE:-}" ]]; then IFS=';' read -r -a MODELS <<<"$MODELS_OVERRIDE"; fi

field() {  # field JSON KEY -> value or n/a
  $PY -c 'import json,sys
try: print(json.loads(sys.argv[1])[sys.argv[2]])
except Exception: print("n/a")' "$1" "$2"
}
ratio() {  # ratio A B -> A/B with 2 decimals or n/a
  $PY -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}x")
except Exception: print("n/a")' "$1" "$2"
}

printf "%-12s %-22s %14s %12s\n" model impl tokens/s peak_rss_mb
for m in "${MODELS[@]}"; do
  read -r name dim layers heads ffn vocab <<<"$m"
  lt=$("$BIN" bench --model "$name" --seq $SEQ --batch $BATCH --precision bf16-mixed --steps "$STEPS" --json 2>/dev/null \
       | grep "^{" | tail -n 1)
  [[ -n "$lt" ]] || echo "warning: '$BIN bench --model $name' gave no JSON" >&2
  common=(--dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$heads" --ffn "$ffn" --vocab "$vocab"
          --seq $SEQ --batch $BATCH --steps "$STEPS" --threads "$THREADS" --tie-embeddings --json)
  pf=$($PY tools/reference/train_step.py "${common[@]}" --precision fp32)
  pb=$($PY tools/reference/train_step.py "${common[@]}" --precision bf16-autocast)
  lt_tps=$(field "$lt" tokens_per_s); pf_tps=$(field "$pf" tokens_per_s); pb_tps=$(field "$pb" tokens_per_s)
  printf "%-12s %-22s %14s %12s\n" "$name" "llamatrain bf16-mixed" "$lt_tps" "$(field "$lt" peak_rss_mb)"
  printf "%-12s %-22s %14.1f %12.0f\n" "$name" "pytorch fp32" "$pf_tps" "$(field "$pf" peak_rss_mb)"
  printf "%-12s %-22s %14.1f %12.0f\n" "$name" "pytorch bf16-autocast" "$pb_tps" "$(field "$pb" peak_rss_mb)"
  echo "$name: llamatrain/pytorch-fp32 $(ratio "$lt_tps" "$pf_tps"), llamatrain/pytorch-bf16 $(ratio "$lt_tps" "$pb_tps")"
done
