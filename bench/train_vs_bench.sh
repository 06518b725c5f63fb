#!/usr/bin/env bash
# End-to-end training throughput against the bare step, side by side in one run: `llamatrain train`
# (data loading from an indexed dataset, logging every 10 steps, TensorBoard, a checkpoint every 50
# steps, all included) and `llamatrain bench` (random tokens, steps only) on the same model, batch,
# sequence length and precision; then checkpoint save/load rates next to dd on the same disk, and peak
# memory of each recompute mode against its analytic figure.
# Inputs are synthetic (a random-weight Hugging Face folder and random token documents), made by
# Debian's python3 with numpy; nothing is downloaded.
# Usage: bench/train_vs_bench.sh [path/to/llamatrain]
#   env: MODEL=stories15m (or stories42m, stories110m: their shapes, random weights), SEQ=256, BATCH=8, STEPS=100,
#        PRECISION=bf16-mixed, WORK=/tmp/llamatrain-train-bench, THREADS=$(nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
MODEL=${MODEL:-stories15m}
SEQ=${SEQ:-256}
BATCH=${BATCH:-8}
STEPS=${STEPS:-100}
PRECISION=${PRECISION:-bf16-mixed}
WORK=${WORK:-/tmp/llamatrain-train-bench}
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
PY=/usr/bin/python3
mkdir -p "$WORK"
# A random-weight HF folder of the model's shape and 20M random tokens (made once, then reused).
inputs=$($PY bench/synthetic_run_inputs.py "$WORK" "$MODEL")
read -r INIT DATA <<<"$inputs"

cat > "$WORK/bench.yaml" <<YAML
# The model comes from model.init_from (its config.json); this file sets the run only.
name: train_bench
trainer: {precision: $PRECISION, max_steps: $STEPS, log_every_n_steps: 10, val_check_interval: 1000000,
          limit_val_batches: 0, gradient_clip_val: 1.0}
exp_manager: {create_tensorboard_logger: true, resume_if_exists: false,
              checkpoint_callback_params: {every_n_train_steps: 50, save_top_k: 1}}
model:
  micro_batch_size: $BATCH
  global_batch_size: $BATCH
  encoder_seq_length: $SEQ
  init_from: $INIT
  activations_checkpoint_granularity: null
  data: {data_prefix: [1.0, $DATA], splits_string: '1000,0,0', seq_length: $SEQ}
  optim: {name: adamw, lr: 3.0e-4, weight_decay: 0.1, betas: [0.9, 0.95],
          sched: {name: CosineAnnealing, warmup_steps: 10, min_lr: 3.0e-5}}
YAML

run_train() {  # run_train LOG_DIR OVERRIDE... -> the trainer's output without its step lines
  rm -rf "$1"
  local dir=$1; shift
  "$BIN" train "$WORK/bench.yaml" exp_manager.explicit_log_dir="$dir" "$@" 2>&1 | grep -v '^step '
}

echo "== $MODEL, $PRECISION, batch $BATCH x seq $SEQ, $STEPS steps, $OMP_NUM_THREADS threads"
for round in 1 2; do
  bench=$("$BIN" bench --model "$MODEL" --seq "$SEQ" --batch "$BATCH" --precision "$PRECISION" --steps 20 --json \
          | grep '^{')
  train=$(run_train "$WORK/run" model.activations_checkpoint_granularity=null)
  b=$(echo "$bench" | $PY -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
  t=$(echo "$train" | sed -n 's/.*= \([0-9.]*k\?\) tokens\/s end to end.*/\1/p')
  $PY -c 'import sys
t = sys.argv[2]; t = float(t[:-1]) * 1000 if t.endswith("k") else float(t)
print(f"round {sys.argv[3]}: train {t:.0f} tokens/s end to end, bench {float(sys.argv[1]):.0f} tokens/s: ratio {t / float(sys.argv[1]):.3f}")' "$b" "$t" "$round"
done
echo "$train" | grep -E '^checkpoint' | tail -2

echo "== checkpoint rates next to dd (same folder, page cache dropped before reads)"
ckpt=$(ls -d "$WORK"/run/checkpoints/step_* | tail -1)
bytes=$(du -sb "$ckpt" | cut -f1)
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop caches: not root; reads may come from cache)"
t0=$(date +%s.%N)
"$BIN" eval "$ckpt" --data "$DATA" --seq-length 32 --batch 1 --max-windows 1 >/dev/null 2>&1 || true
t1=$(date +%s.%N)
echo "  load (eval of 1 window, weights only: $(du -cb "$ckpt"/model*.safetensors | tail -1 | cut -f1) bytes): $($PY -c "print(f'{$t1 - $t0:.2f}')") s"
mb=$((bytes / 1000000))
dd if=/dev/zero of="$WORK/dd.bin" bs=1M count="$mb" conv=fsync 2>&1 | tail -1 | sed 's/^/  dd write (fsync): /'
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
dd if="$WORK/dd.bin" of=/dev/null bs=1M 2>&1 | tail -1 | sed 's/^/  dd read: /'
rm -f "$WORK/dd.bin"

echo "== peak memory per recompute mode (train, 5 steps) against the analytic figure"
for g in null selective full; do
  out=$(run_train "$WORK/mem_$g" trainer.max_steps=5 model.optim.sched.warmup_steps=1 model.activations_checkpoint_granularity=$g \
        exp_manager.create_checkpoint_callback=false)
  analytic=$(echo "$out" | sed -n 's/^model: .*memory \([^ ]* [KMGT]*B\).*/\1/p')
  peak=$(tail -1 "$WORK/mem_$g/metrics.jsonl" | $PY -c 'import json,sys; print(json.load(sys.stdin)["peak_rss_bytes"] / 1e6)')
  printf '  %-10s analytic %-10s peak RSS %.0f MB\n' "$g" "$analytic" "$peak"
done
