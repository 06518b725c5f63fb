#!/usr/bin/env bash
# Checkpoint saves against the disk and against training, side by side in one run, ROUNDS times:
#   - a save in place (the end of a run) against `dd` with fsync writing as many bytes into the same
#     folder, as a rate ratio;
#   - the same run with its saves written behind the steps (async_save): the pause each save costs,
#     and the whole loop's tokens/s against the run that saves nothing and the run that saves in place.
# Inputs are synthetic (bench/synthetic_run_inputs.py: a random-weight Hugging Face folder and random
# token documents, made once by Debian's python3 with numpy); nothing is downloaded.
# Usage: bench/checkpoint_save.sh [path/to/llamatrain]
#   env: MODEL=stories42m, SEQ=256, BATCH=4, STEPS=40, EVERY=10, PRECISION=bf16-mixed, ROUNDS=3,
#        WORK=/tmp/llamatrain-save-bench, THREADS=$(nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
MODEL=${MODEL:-stories42m}
SEQ=${SEQ:-256}
BATCH=${BATCH:-4}
STEPS=${STEPS:-40}
EVERY=${EVERY:-10}
PRECISION=${PRECISION:-bf16-mixed}
ROUNDS=${ROUNDS:-3}
WORK=${WORK:-/tmp/llamatrain-save-bench}
export OMP_NUM_THREADS=${THREADS:-$(nproc)}
PY=/usr/bin/python3
mkdir -p "$WORK"
inputs=$($PY bench/synthetic_run_inputs.py "$WORK" "$MODEL")
read -r INIT DATA <<<"$inputs"

cat > "$WORK/save.yaml" <<YAML
# The model comes from model.init_from (its config.json); this file sets the run only.
name: save_bench
trainer: {precision: $PRECISION, max_steps: $STEPS, log_every_n_steps: 10, val_check_interval: 1000000,
          limit_val_batches: 0}
exp_manager: {create_tensorboard_logger: false, resume_if_exists: false,
              checkpoint_callback_params: {every_n_train_steps: $EVERY, save_top_k: 1}}
model:
  micro_batch_size: $BATCH
  global_batch_size: $BATCH
  encoder_seq_length: $SEQ
  init_from: $INIT
  data: {data_prefix: [1.0, $DATA], splits_string: '1000,0,0', seq_length: $SEQ}
  optim: {name: adamw, lr: 3.0e-4, sched: {name: CosineAnnealing, warmup_steps: 2, min_lr: 3.0e-5}}
YAML

run_train() {  # run_train LOG_DIR OVERRIDE... -> the trainer's console lines (no step lines; of the
               # event lines only checkpoint_saved's, whose seconds are not rounded)
  rm -rf "$1"
  local dir=$1; shift
  "$BIN" train "$WORK/save.yaml" exp_manager.explicit_log_dir="$dir" "$@" 2>&1 |
    awk '!/^step / && (!/^@event/ || /"event":"checkpoint_saved"/)'
}
tokens_per_s() { sed -n 's/.*= \([0-9.]*k\?\) tokens\/s end to end.*/\1/p' | sed 's/k$/e3/'; }

echo "== $MODEL, $PRECISION, batch $BATCH x seq $SEQ, $STEPS steps, a save every $EVERY, $OMP_NUM_THREADS threads"
for round in $(seq 1 "$ROUNDS"); do
  none=$(run_train "$WORK/none" exp_manager.create_checkpoint_callback=false)
  place=$(run_train "$WORK/place" exp_manager.checkpoint_callback_params.async_save=false)
  behind=$(run_train "$WORK/behind" exp_manager.checkpoint_callback_params.async_save=true)
  # The save at the end is written in place in both runs: its bytes and seconds (its event's), then
  # dd's (the bytes and seconds dd prints, not its rounded rate).
  read -r bytes seconds < <(echo "$place" | grep '^@event' | $PY -c 'import json,sys
end = [json.loads(l[7:]) for l in sys.stdin if l.startswith("@event ")]
end = [e for e in end if e.get("reason") == "end"][-1]
print(end["bytes"], end["seconds"])')
  dd_out=$(dd if=/dev/zero of="$WORK/place/dd.bin" bs=1M count=$((bytes / 1000000)) conv=fsync 2>&1 | tail -1)
  rm -f "$WORK/place/dd.bin"
  dd_rate=$(echo "$dd_out" | $PY -c 'import re,sys
m = re.match(r"(\d+) bytes .* copied, ([0-9.]+) s", sys.stdin.read())
print(int(m.group(1)) / float(m.group(2)))')
  pauses=$(echo "$behind" | sed -n 's/.*paused \([0-9.]*m\?s\) to copy.*/\1/p' | tr '\n' ' ')
  $PY -c 'import sys
bytes, seconds, dd, none, place, behind, pauses, r = sys.argv[1:]
rate = float(bytes) / float(seconds)
print(f"round {r}: save in place {rate / 1e6:.0f} MB/s, dd fsync {float(dd) / 1e6:.0f} MB/s: ratio {rate / float(dd):.2f}; "
      f"tokens/s behind / none {float(behind) / float(none):.3f}, in place / none {float(place) / float(none):.3f}; "
      f"pauses {pauses.strip()}")' \
    "$bytes" "$seconds" "$dd_rate" "$(echo "$none" | tokens_per_s)" "$(echo "$place" | tokens_per_s)" \
    "$(echo "$behind" | tokens_per_s)" "$pauses" "$round"
done
echo "$behind" | grep '^checkpoint' | tail -2
