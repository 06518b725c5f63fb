#!/usr/bin/env bash
# Weak scaling of data-parallel training on this machine: one process with one thread against
# `mpirun -np 2`, one thread per rank, at the same per-rank batch (so the DP job does twice the work
# per step). Efficiency = DP tokens/s / (2 x one process's tokens/s); 100% is perfect scaling.
# Runs alternate (one, dp2, one, dp2, ...) so both see the same machine; each figure is the median
# tokens/s of a run's logged steps after the first two. The DP runs also report the time in
# collectives per step (`comm_time_s`, waiting for the slower rank included) and its share.
# Inputs are synthetic (bench/synthetic_run_inputs.py); nothing is downloaded.
# Usage: bench/dp_scaling.sh [path/to/llamatrain]
#   env: MODEL=stories15m, SEQ=256, MICRO=4, ACC=2 (micro-batches per rank per step), STEPS=12,
#        ROUNDS=3, PRECISION=bf16-mixed, ZERO=false (ZeRO-1), OVERLAP=false (model.optim.overlap_grad_sync),
#        WORK=/tmp/llamatrain-train-bench
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
MODEL=${MODEL:-stories15m}
SEQ=${SEQ:-256}
MICRO=${MICRO:-4}
ACC=${ACC:-2}
STEPS=${STEPS:-12}
ROUNDS=${ROUNDS:-3}
PRECISION=${PRECISION:-bf16-mixed}
ZERO=${ZERO:-false}
OVERLAP=${OVERLAP:-false}
WORK=${WORK:-/tmp/llamatrain-train-bench}
PY=/usr/bin/python3
mkdir -p "$WORK"
# A random-weight HF folder of the model's shape and 20M random tokens (made once, then reused).
inputs=$($PY bench/synthetic_run_inputs.py "$WORK" "$MODEL")
read -r INIT DATA <<<"$inputs"

cat > "$WORK/dp.yaml" <<YAML
name: dp_scaling
trainer: {precision: $PRECISION, max_steps: $STEPS, log_every_n_steps: 1, val_check_interval: 1000000,
          limit_val_batches: 0, gradient_clip_val: 1.0}
exp_manager: {create_tensorboard_logger: false, create_checkpoint_callback: false, resume_if_exists: false}
model:
  micro_batch_size: $MICRO
  encoder_seq_length: $SEQ
  init_from: $INIT
  distributed_optimizer: $ZERO
  data: {data_prefix: [1.0, $DATA], splits_string: '1000,0,0', seq_length: $SEQ}
  optim: {name: adamw, lr: 3.0e-4, weight_decay: 0.1, betas: [0.9, 0.95], overlap_grad_sync: $OVERLAP,
          sched: {name: CosineAnnealing, warmup_steps: 2, min_lr: 3.0e-5}}
YAML

median() { $PY bench/metric_median.py "$1" "$2"; }  # KEY over a run's steps after the first two

run() {  # run RANKS LOG_DIR
  rm -rf "$2"
  local gbs=$((MICRO * ACC * $1))
  if [ "$1" = 1 ]; then
    OMP_NUM_THREADS=1 "$BIN" train "$WORK/dp.yaml" exp_manager.explicit_log_dir="$2" \
      model.global_batch_size=$gbs trainer.devices=1 >"$2.out" 2>&1
  else
    mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 --bind-to core -np "$1" \
      "$BIN" train "$WORK/dp.yaml" exp_manager.explicit_log_dir="$2" \
      model.global_batch_size=$gbs trainer.devices="$1" >"$2.out" 2>&1
  fi || { echo "run of $1 rank(s) failed:"; tail -20 "$2.out"; exit 1; }
}

echo "== $MODEL $PRECISION, seq $SEQ, $ACC x $MICRO samples per rank per step, $STEPS steps, ZeRO-1 $ZERO, overlap $OVERLAP, $(nproc) cores"
effs=()
for round in $(seq "$ROUNDS"); do
  run 1 "$WORK/dp_one"
  run 2 "$WORK/dp_two"
  one=$(median "$WORK/dp_one/metrics.jsonl" tokens_per_s)
  two=$(median "$WORK/dp_two/metrics.jsonl" tokens_per_s)
  comm=$(median "$WORK/dp_two/metrics.jsonl" comm_time_s)
  step=$(median "$WORK/dp_two/metrics.jsonl" step_time_s)
  eff=$($PY -c "print(f'{$two / (2 * $one) * 100:.1f}')")
  effs+=("$eff")
  $PY -c "print(f'round $round: 1 rank {$one:.0f} tok/s, 2 ranks {$two:.0f} tok/s: efficiency $eff%; '
            f'comm {1e3 * $comm:.1f} ms of {1e3 * $step:.0f} ms per step ({100 * $comm / $step:.1f}%)')"
done
echo "efficiency per round: ${effs[*]} (%)"
