#!/usr/bin/env bash
# What tensor and pipeline parallelism cost on this machine: the same training step (same global
# batch, same model) on one process using every core, against TP2 (+SP) and PP2 with one thread per
# rank on the same cores. Reported per layout: median step time, its ratio to one process, and the
# time blocked in communication per step (`comm_time_s`: TP collectives, pipeline hand-offs and the
# pipeline's fill/drain waits). Model parallelism is for models that do not fit one rank; on one
# small machine it can only add communication, and this measures how much.
# Runs alternate (one, tp2, pp2, one, ...) so all see the same machine. Inputs are synthetic
# (bench/synthetic_run_inputs.py); nothing is downloaded.
# Usage: bench/model_parallel_overhead.sh [path/to/llamatrain]
#   env: MODEL=stories15m, SEQ=256, MICRO=4, ACC=8 (micro-batches per step), STEPS=10, ROUNDS=3,
#        PRECISION=bf16-mixed, PP_FIRST= (layers of the first of the two stages; empty: half),
#        WORK=/tmp/llamatrain-train-bench
# A small model's lm head (V = 32000) can outweigh its layers: the last stage then does most of the
# work whatever the split (stories15m: 18 MFLOP per token in the head against 2 per layer), and PP2's
# first stage mostly waits. PP_FIRST moves layers to the first stage (Megatron-core's uneven split).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
MODEL=${MODEL:-stories15m}
SEQ=${SEQ:-256}
MICRO=${MICRO:-4}
ACC=${ACC:-8}
STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-3}
PRECISION=${PRECISION:-bf16-mixed}
WORK=${WORK:-/tmp/llamatrain-train-bench}
PP_FIRST=${PP_FIRST:-}
PY=/usr/bin/python3
CORES=$(nproc)
mkdir -p "$WORK"
inputs=$($PY bench/synthetic_run_inputs.py "$WORK" "$MODEL")
read -r INIT DATA <<<"$inputs"

cat > "$WORK/mp.yaml" <<YAML
name: mp_overhead
trainer: {precision: $PRECISION, max_steps: $STEPS, log_every_n_steps: 1, val_check_interval: 1000000,
          limit_val_batches: 0, gradient_clip_val: 1.0}
exp_manager: {create_tensorboard_logger: false, create_checkpoint_callback: false, resume_if_exists: false}
model:
  micro_batch_size: $MICRO
  global_batch_size: $((MICRO * ACC))
  encoder_seq_length: $SEQ
  init_from: $INIT
  data: {data_prefix: [1.0, $DATA], splits_string: '1000,0,0', seq_length: $SEQ}
  optim: {name: adamw, lr: 3.0e-4, weight_decay: 0.1, betas: [0.9, 0.95],
          sched: {name: CosineAnnealing, warmup_steps: 2, min_lr: 3.0e-5}}
YAML

median() { $PY bench/metric_median.py "$1" "$2"; }  # KEY over a run's steps after the first two

run() {  # run NAME RANKS overrides...
  local name=$1 ranks=$2
  shift 2
  rm -rf "$WORK/mp_$name"
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=$CORES "$BIN" train "$WORK/mp.yaml" exp_manager.explicit_log_dir="$WORK/mp_$name" "$@" \
      >"$WORK/mp_$name.out" 2>&1
  else
    mpirun --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=$((CORES / ranks > 0 ? CORES / ranks : 1)) \
      --bind-to none -np "$ranks" "$BIN" train "$WORK/mp.yaml" exp_manager.explicit_log_dir="$WORK/mp_$name" \
      trainer.devices="$ranks" "$@" >"$WORK/mp_$name.out" 2>&1
  fi || { echo "run $name failed:"; tail -20 "$WORK/mp_$name.out"; exit 1; }
}

echo "== $MODEL $PRECISION, seq $SEQ, $ACC micro-batches of $MICRO per step, $STEPS steps, $CORES cores${PP_FIRST:+, PP2 first stage $PP_FIRST layers}"
for round in $(seq "$ROUNDS"); do
  run one 1
  run tp2 2 model.tensor_model_parallel_size=2 model.sequence_parallel=true
  run pp2 2 model.pipeline_model_parallel_size=2 ${PP_FIRST:+model.num_layers_in_first_pipeline_stage=$PP_FIRST}
  base=$(median "$WORK/mp_one/metrics.jsonl" step_time_s)
  line="round $round: one process $($PY -c "print(f'{1e3 * $base:.0f}')") ms/step"
  for l in tp2 pp2; do
    step=$(median "$WORK/mp_$l/metrics.jsonl" step_time_s)
    comm=$(median "$WORK/mp_$l/metrics.jsonl" comm_time_s)
    line+=$($PY -c "print(f'; {\"$l\".upper()} {1e3 * $step:.0f} ms ({$step / $base:.2f}x), comm {1e3 * $comm:.0f} ms ({100 * $comm / $step:.0f}%)')")
  done
  echo "$line"
done
