#!/usr/bin/env bash
# `llamatrain plan`'s predicted step time and memory on this machine against what the same job then
# measures: the median step time (steps after the first two) and rank 0's peak RSS from metrics.jsonl.
# Small models on the test corpus, one process and two (DP 2, TP 2, PP 2) under mpirun. Run it on an
# otherwise idle machine: the plan's probes and the training share the cores with anything else.
# Usage: bash bench/plan_vs_measured.sh [build/release/llamatrain] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
STEPS=${2:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BIN" preprocess --quiet --input tests/data/fixtures/corpus.jsonl --tokenizer-model tests/data/fixtures/tokenizer.model \
  --output-prefix "$work/corpus" --append-eod
stories15m=(model.hidden_size=288 model.ffn_hidden_size=768 model.num_layers=6 model.num_attention_heads=6
  model.num_query_groups=6 model.encoder_seq_length=256 model.max_position_embeddings=256 model.micro_batch_size=8
  model.global_batch_size=16)
measure() {  # label ranks overrides...
  local label=$1 ranks=$2
  shift 2
  local args=(configs/tiny.yaml "model.data.data_prefix=[1.0,$work/corpus_text_document]"
    model.tokenizer.model=tests/data/fixtures/tokenizer.model trainer.devices="$ranks" trainer.max_steps="$STEPS"
    trainer.log_every_n_steps=1 trainer.limit_val_batches=0 model.optim.sched.warmup_steps=2
    exp_manager.checkpoint_callback_params.every_n_train_steps=100000 "$@")
  local threads=$(($(nproc) / ranks))
  rm -rf "$work/run"
  OMP_NUM_THREADS=$threads "$BIN" plan "${args[@]}" exp_manager.explicit_log_dir="$work/run" --json >"$work/plan.json" || true
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x OMP_NUM_THREADS="$threads")
  OMP_NUM_THREADS=$threads "${launch[@]}" "$BIN" train "${args[@]}" exp_manager.explicit_log_dir="$work/run" >"$work/train.log" 2>&1
  /usr/bin/python3 - "$work/plan.json" "$work/run/metrics.jsonl" "$label" <<'PY'
import json, statistics, sys
plan = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
steps = [r["step_time_s"] for r in rows if "step_time_s" in r][2:]
rss = max(r.get("peak_rss_bytes", 0) for r in rows)
pred_s = plan["prediction"]["step_s"]
pred_m = plan["memory_per_rank"][0]["total"]
meas_s = statistics.median(steps)
print(f"| {sys.argv[3]} | {pred_s:.3f} | {meas_s:.3f} | {pred_s / meas_s:.2f} | {pred_m / 1e6:.0f} | {rss / 1e6:.0f} | {pred_m / rss:.2f} |")
PY
}
echo "| job | predicted step s | measured step s (median) | ratio | planned MB | peak RSS MB | ratio |"
echo "|---|---|---|---|---|---|---|"
measure "tiny, 1 process" 1
measure "stories15m shape, 1 process" 1 "${stories15m[@]}"
measure "stories15m shape, DP 2" 2 "${stories15m[@]}"
measure "stories15m shape, TP 2" 2 "${stories15m[@]}" model.tensor_model_parallel_size=2
measure "stories15m shape, PP 2" 2 "${stories15m[@]}" model.pipeline_model_parallel_size=2
