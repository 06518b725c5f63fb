#!/usr/bin/env bash
# Packed against padded fine-tuning, end to end through `llamatrain train`: QNLI-like examples (a
# question and a sentence, 40-80 tokens each with the answer) at a long sequence, one example per
# sample (padding) against examples packed several per sample (attention kept per example). Runs
# alternate (padded, packed, padded, ...) so both see the same machine; each figure is the median of
# a run's logged steps after the first two of the text tokens/s (padding left out) and MFU (on the
# text's matmul work and its documents' attention pairs). Prints the packed/padded ratio of text
# tokens/s. Inputs are synthetic; nothing is downloaded.
# Usage: bench/packing_bench.sh [path/to/llamatrain]
#   env: SEQ=2048, EXAMPLES=3000, MICRO=2, STEPS=8, ROUNDS=2, PRECISION=bf16-mixed,
#        WORK=/tmp/llamatrain-packing-bench
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/release/llamatrain}")
SEQ=${SEQ:-2048}
EXAMPLES=${EXAMPLES:-3000}
MICRO=${MICRO:-2}
STEPS=${STEPS:-8}
ROUNDS=${ROUNDS:-2}
PRECISION=${PRECISION:-bf16-mixed}
WORK=${WORK:-/tmp/llamatrain-packing-bench}
PY=/usr/bin/python3
mkdir -p "$WORK"
# QNLI-like rows from a fixed seed: words drawn from a small vocabulary the fixture tokenizer knows.
$PY - "$WORK/qnli.jsonl" "$EXAMPLES" <<'PYEOF'
import json, random, sys
random.seed(5)
words = ("the a of to and in is was he she it that for on with as his her by at from they this had not but "
         "are were have which be one all when there an or their can what who where how river city book "
         "king music water east history first people time year work").split()
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        q = " ".join(random.choice(words) for _ in range(random.randint(6, 14))) + "?"
        s = " ".join(random.choice(words) for _ in range(random.randint(20, 50))) + "."
        f.write(json.dumps({"question": q, "sentence": s,
                            "label": random.choice(["entailment", "not_entailment"])}) + "\n")
PYEOF
cat > "$WORK/sft.yaml" <<YAML
name: packing_bench
trainer: {precision: $PRECISION, max_steps: $STEPS, log_every_n_steps: 1, val_check_interval: 1000000,
          limit_val_batches: 0, gradient_clip_val: 1.0}
exp_manager: {create_tensorboard_logger: false, create_checkpoint_callback: false, resume_if_exists: false}
model:
  micro_batch_size: $MICRO
  global_batch_size: $MICRO
  encoder_seq_length: $SEQ
  max_position_embeddings: $SEQ
  num_layers: 6
  hidden_size: 288
  ffn_hidden_size: 768
  num_attention_heads: 6
  tokenizer: {model: $PWD/tests/data/fixtures/tokenizer.model}
  optim: {name: fused_adam, lr: 1e-4, sched: {name: CosineAnnealing, warmup_steps: 1, min_lr: 1e-5}}
  data:
    fine_tuning: true
    train_ds:
      file_names: [$WORK/qnli.jsonl]
      prompt_template: "Question: {question}\nSentence: {sentence}\nAnswer: {label}"
      label_key: label
      completion_map: {entailment: "yes", not_entailment: "no"}
      shuffle: true
YAML
declare -A tok mfu
for ((r = 0; r < ROUNDS; r++)); do
  for pack in false true; do
    out="$WORK/run_${pack}_$r"
    rm -rf "$out"
    "$BIN" train "$WORK/sft.yaml" model.data.train_ds.pack=$pack exp_manager.explicit_log_dir="$out" >"$out.log" 2>&1 ||
      { tail -20 "$out.log"; exit 1; }
    tok[$pack]+="$($PY bench/metric_median.py "$out/metrics.jsonl" tokens_per_s) "
    mfu[$pack]+="$($PY bench/metric_median.py "$out/metrics.jsonl" mfu) "
  done
done
grep -h "packed .* examples into" "$WORK/run_true_0.log" | sed 's/^ */packing: /' || true
$PY - "${tok[false]}" "${tok[true]}" "${mfu[false]}" "${mfu[true]}" "$SEQ" <<'PYEOF'
import statistics, sys
pad, packed, mpad, mpacked = ([float(x) for x in a.split()] for a in sys.argv[1:5])
print(f"seq {sys.argv[5]}: text tokens/s padded {' '.join(f'{x:.0f}' for x in pad)}, packed {' '.join(f'{x:.0f}' for x in packed)}")
print(f"MFU median: padded {statistics.median(mpad):.1%}, packed {statistics.median(mpacked):.1%}")
ratios = [b / a for a, b in zip(pad, packed)]
print(f"packed / padded text tokens/s per round {' '.join(f'{r:.1f}' for r in ratios)}: median {statistics.median(ratios):.1f}x")
PYEOF
