#!/usr/bin/env bash
# The README's main command: sets up what the program needs (scripts/setup.sh), then runs the whole
# Chinese-enhancement workflow on real text from Debian packages, in a few minutes on 2 cores:
#   1. text        English fortunes (fortunes) and Chinese poems and sayings (fortunes-zh), terminal
#                  escape codes stripped, one JSON document per fortune, every 20th held out
#   2. tokenizer   a SentencePiece BPE tokenizer trained on the English text only (Llama 2's settings;
#                  like Llama 2's, it writes most Chinese characters as UTF-8 byte pieces)
#   3. pretrain    a small Llama from scratch on English (configs/demo.yaml)
#   4. vocabulary  a Chinese tokenizer trained on the Chinese text, merged into the English one (every
#                  English piece keeps its id), tokens per character before and after
#   5. data        all text preprocessed again with the merged tokenizer
#   6. continue    from the English model's Hugging Face export with the merged tokenizer: the
#                  embedding and output layer grow, each new row the mean of the rows of the pieces the
#                  English tokenizer splits its text into; then a 70/30 Chinese/English blend
#   7. evaluate    bits per character of both models on held-out English and Chinese (per-token
#                  perplexity cannot compare two tokenizers)
#   8. generate    samples from the final Hugging Face export
# Usage: bash scripts/demo.sh [--full] [KEY=VALUE ...]
#   --full     the fuller run: larger vocabularies (8000 English pieces, a 20000-piece Chinese
#              addition) and 300 training steps per stage instead of 40 (about 8 minutes with AVX-512)
#   KEY=VALUE  config overrides for both `llamatrain train` calls (e.g. trainer.max_steps=100)
# Everything goes under runs/demo (runs/demo_full with --full; DEMO_DIR to change): text, tokenizers
# and data are reused by a rerun, the two training runs start over.
set -euo pipefail
cd "$(dirname "$0")/.."
FULL=0
if [ "${1:-}" = --full ]; then FULL=1; shift; fi
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0
fi
SETUP_TARGET=llamatrain bash scripts/setup.sh   # the program only; scripts/test.sh builds the rest

if [ "$FULL" = 1 ]; then
  DEMO=${DEMO_DIR:-runs/demo_full} EN_PIECES=8000 ZH_PIECES=20000 STEPS=300 EVERY=100 LOG=25 WARMUP=30 WARMUP_ZH=20
else
  DEMO=${DEMO_DIR:-runs/demo} EN_PIECES=4000 ZH_PIECES=6000 STEPS=40 EVERY=20 LOG=5 WARMUP=8 WARMUP_ZH=4
fi
TRAIN_ARGS=(trainer.max_steps=$STEPS trainer.val_check_interval=$EVERY trainer.log_every_n_steps=$LOG
            exp_manager.checkpoint_callback_params.every_n_train_steps=$EVERY)
BIN=./build/release/llamatrain
FORTUNES=/usr/share/games/fortunes
mkdir -p "$DEMO/data"
t_start=$SECONDS
stage() { printf '\n== [%s] %s (%ds)\n' "$1" "$2" $((SECONDS - t_start)); }

# A fortune file: entries separated by lines holding only '%'. Escape sequences (colours) and
# backspace overstrikes are removed; each entry becomes {"text": ...}.
to_jsonl() {
  for f in "$@"; do
    sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/.\x08//g' -e 's/\r$//' "$f" |
      jq -Rsc 'split("\n%\n")[] | sub("^\\s+"; "") | sub("\\s+$"; "") | select(length > 0) | {text: .}'
  done
}

# preprocess JSONL into Megatron .bin/.idx with a tokenizer (kept when it exists).
preprocess() {  # NAME TOKENIZER OUTPUT_PREFIX
  mkdir -p "$(dirname "$3")"
  [ -s "${3}_text_document.idx" ] ||
    "$BIN" preprocess --quiet --input "$DEMO/data/$1.jsonl" --tokenizer-model "$2" --output-prefix "$3" --append-eod
}

stage 1/8 "text from Debian's fortunes and fortunes-zh"
if [ ! -s "$DEMO/data/zh_val.jsonl" ]; then
  zh_files=("$FORTUNES/chinese" "$FORTUNES/tang300" "$FORTUNES/song100")
  mapfile -t en_files < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' ! -name chinese ! -name tang300 \
                            ! -name song100 | sort)
  to_jsonl "${en_files[@]}" > "$DEMO/data/en.jsonl"
  to_jsonl "${zh_files[@]}" > "$DEMO/data/zh.jsonl"
  for lang in en zh; do
    awk 'NR % 20 != 0' "$DEMO/data/$lang.jsonl" > "$DEMO/data/${lang}_train.jsonl"
    awk 'NR % 20 == 0' "$DEMO/data/$lang.jsonl" > "$DEMO/data/${lang}_val.jsonl"
  done
fi
for f in en_train en_val zh_train zh_val; do
  printf '  %-9s %6d documents, %s\n' "$f" "$(wc -l < "$DEMO/data/$f.jsonl")" "$(du -h "$DEMO/data/$f.jsonl" | cut -f1)"
done

stage 2/8 "English tokenizer (SentencePiece BPE, byte fallback, $EN_PIECES pieces)"
[ -s "$DEMO/en.model" ] ||
  "$BIN" tokenizer train --input "$DEMO/data/en_train.jsonl" -o "$DEMO/en.model" --vocab-size "$EN_PIECES"
echo "  $DEMO/en.model"

stage 3/8 "pretrain a small Llama on English"
for f in en_train en_val zh_val; do preprocess "$f" "$DEMO/en.model" "$DEMO/data/en_tok/$f"; done
rm -rf "$DEMO/base" "$DEMO/zh"
"$BIN" train configs/demo.yaml model.tokenizer.model="$DEMO/en.model" \
  "model.data.data_prefix=[1.0,$DEMO/data/en_tok/en_train_text_document]" exp_manager.explicit_log_dir="$DEMO/base" \
  model.output_dir="$DEMO/base/hf" model.optim.sched.warmup_steps=$WARMUP "${TRAIN_ARGS[@]}" "$@"

stage 4/8 "Chinese vocabulary: a $ZH_PIECES-piece Chinese tokenizer merged into the English one"
[ -s "$DEMO/zh.model" ] ||
  "$BIN" tokenizer train --input "$DEMO/data/zh_train.jsonl" -o "$DEMO/zh.model" --vocab-size "$ZH_PIECES"
"$BIN" tokenizer merge "$DEMO/en.model" "$DEMO/zh.model" -o "$DEMO/en_zh.model"
for f in zh_val en_val; do
  echo "  on $f:"
  "$BIN" tokenizer stats "$DEMO/en.model" "$DEMO/en_zh.model" --input "$DEMO/data/$f.jsonl" | sed 's/^/    /'
done

stage 5/8 "preprocess again with the merged tokenizer"
for f in zh_train en_train zh_val en_val; do preprocess "$f" "$DEMO/en_zh.model" "$DEMO/data/en_zh_tok/$f"; done
echo "  $DEMO/data/en_zh_tok"

stage 6/8 "continued pretraining on Chinese + English, from the English model with the merged vocabulary"
# Validation on the held-out Chinese and English text, each reported alone (zh: and en: name them).
T=$DEMO/data/en_zh_tok
"$BIN" train configs/demo.yaml model.tokenizer.model="$DEMO/en_zh.model" model.init_from="$DEMO/base/hf" \
  model.new_token_init=subword_mean \
  "model.data.data_prefix={train:[0.7,zh:$T/zh_train_text_document,0.3,en:$T/en_train_text_document],validation:[0.5,zh:$T/zh_val_text_document,0.5,en:$T/en_val_text_document]}" \
  exp_manager.explicit_log_dir="$DEMO/zh" model.output_dir="$DEMO/zh/hf" model.optim.lr=1e-3 \
  model.optim.sched.warmup_steps=$WARMUP_ZH "${TRAIN_ARGS[@]}" "$@"

stage 7/8 "bits per character on held-out text (lower is better; comparable across tokenizers)"
bpc() {  # MODEL TOKENIZED_FOLDER: one JSON line per --data, in order
  "$BIN" eval "$1" --data "$2/en_val_text_document" --data "$2/zh_val_text_document" --seq-length 256 --batch 8 \
    --json | jq -r '.bits_per_char' | xargs printf '%10.3f'
}
printf '  %-44s %10s %10s\n' "model" "English" "Chinese"
printf '  %-44s %s\n' "before: pretrained on English" "$(bpc "$DEMO/base/hf" "$DEMO/data/en_tok")"
printf '  %-44s %s\n' "after: merged vocabulary, Chinese+English" "$(bpc "$DEMO/zh/hf" "$DEMO/data/en_zh_tok")"

stage 8/8 "samples from the Hugging Face export $DEMO/zh/hf"
for prompt in "床前明月光，" "A fool and his money"; do
  "$BIN" generate "$DEMO/zh/hf" --prompt "$prompt" --max-new-tokens 48 --temperature 0.7 --top-p 0.9 --seed 3
done

# Both runs' curves on one page, to open in any browser (nothing is fetched).
"$BIN" report "$DEMO/base" "$DEMO/zh" --label "pretrained on English" --label "continued on Chinese+English" \
  --title "llamatrain demo" -o "$DEMO/report.html"

printf '\ndemo done in %dm%02ds. Outputs in %s:\n' $(((SECONDS - t_start) / 60)) $(((SECONDS - t_start) % 60)) "$DEMO"
echo "  tokenizers   $DEMO/en.model, $DEMO/zh.model, $DEMO/en_zh.model (English, Chinese, merged)"
echo "  checkpoints  $DEMO/{base,zh}/checkpoints/step_N   (resume by rerunning the same train command)"
echo "  exports      $DEMO/{base,zh}/hf                     (Hugging Face folders: config, safetensors, tokenizer)"
echo "  metrics      $DEMO/{base,zh}/metrics.jsonl"
echo "  report       $DEMO/report.html                      (both runs' curves on one page)"
echo "To watch the training curves (TensorBoard reads the event files as they are):"
echo "  tensorboard --logdir $DEMO"
[ "$FULL" = 1 ] || echo "A fuller run (larger vocabularies, 300 steps per stage): bash scripts/demo.sh --full"
