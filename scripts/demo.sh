#!/usr/bin/env bash
# The README's main command: sets everything up (scripts/setup.sh), then runs the whole continued-
# pretraining workflow on real text from Debian packages, in about ten minutes on 2 cores with
# AVX-512 (about forty with AVX2 only):
#   1. text       English fortunes (fortunes) and Chinese poems and sayings (fortunes-zh), terminal
#                 escape codes stripped, one JSON document per fortune, every 20th held out
#   2. tokenizer  SentencePiece BPE with byte fallback (Llama 2's settings), trained on both languages
#   3. data       llamatrain preprocess into Megatron .bin/.idx
#   4. pretrain   a small Llama from scratch on English (configs/demo.yaml)
#   5. continue   from that model's Hugging Face export on a 70/30 Chinese/English blend (the
#                 Chinese-enhancement use case), as `model.init_from`, no conversion step
#   6. evaluate   perplexity of both models on held-out English and Chinese
#   7. generate   samples from the final Hugging Face export
# Everything goes under runs/demo (DEMO_DIR to change): data and tokenizer are reused by a rerun,
# the two training runs start over. Extra arguments are passed to both `llamatrain train` calls as
# config overrides (e.g. trainer.max_steps=100 for a quicker look).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_TARGET=llamatrain bash scripts/setup.sh   # the program only; scripts/test.sh builds the rest

DEMO=${DEMO_DIR:-runs/demo}
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

stage 1/7 "text from Debian's fortunes and fortunes-zh"
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

stage 2/7 "SentencePiece tokenizer (BPE, byte fallback, 8000 pieces)"
if [ ! -s "$DEMO/tokenizer.model" ]; then
  jq -r .text "$DEMO/data/en_train.jsonl" "$DEMO/data/zh_train.jsonl" > "$DEMO/data/tokenizer_text.txt"
  spm_train --input="$DEMO/data/tokenizer_text.txt" --model_prefix="$DEMO/tokenizer" --vocab_size=8000 \
    --model_type=bpe --byte_fallback=true --character_coverage=0.995 --split_digits=true \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --unk_id=0 --bos_id=1 --eos_id=2 \
    --pad_id=-1 --max_sentence_length=100000 --num_threads="$(nproc)" --minloglevel=2
fi
echo "  $DEMO/tokenizer.model"

stage 3/7 "preprocess into Megatron indexed datasets"
for f in en_train en_val zh_train zh_val; do
  [ -s "$DEMO/data/${f}_text_document.idx" ] ||
    "$BIN" preprocess --quiet --input "$DEMO/data/$f.jsonl" --tokenizer-model "$DEMO/tokenizer.model" \
      --output-prefix "$DEMO/data/$f" --append-eod
  "$BIN" data inspect "$DEMO/data/${f}_text_document" --docs 0 | sed -n 's/^ *sequences/  '"$f"': sequences/p'
done

rm -rf "$DEMO/base" "$DEMO/zh"
stage 4/7 "pretrain a small Llama on English"
"$BIN" train configs/demo.yaml model.tokenizer.model="$DEMO/tokenizer.model" \
  "model.data.data_prefix=[1.0,$DEMO/data/en_train_text_document]" exp_manager.explicit_log_dir="$DEMO/base" \
  model.output_dir="$DEMO/base/hf" "$@"

stage 5/7 "continued pretraining on Chinese + English, starting from the English model"
"$BIN" train configs/demo.yaml model.tokenizer.model="$DEMO/tokenizer.model" model.init_from="$DEMO/base/hf" \
  "model.data.data_prefix=[0.7,$DEMO/data/zh_train_text_document,0.3,$DEMO/data/en_train_text_document]" \
  exp_manager.explicit_log_dir="$DEMO/zh" model.output_dir="$DEMO/zh/hf" model.optim.lr=1e-3 \
  model.optim.sched.warmup_steps=20 "$@"

stage 6/7 "perplexity on held-out text"
ppl() {
  "$BIN" eval "$1" --data "$DEMO/data/en_val_text_document" --data "$DEMO/data/zh_val_text_document" \
    --seq-length 256 --batch 8 --json | jq -r '.perplexity' | xargs printf '%10.1f'
}
base=$(ppl "$DEMO/base/hf")
cont=$(ppl "$DEMO/zh/hf")
printf '  %-34s %10s %10s\n' "model" "English" "Chinese"
printf '  %-34s %s\n' "before: pretrained on English" "$base"
printf '  %-34s %s\n' "after: continued on Chinese+English" "$cont"

stage 7/7 "samples from the Hugging Face export $DEMO/zh/hf"
for prompt in "床前明月光，" "A fool and his money"; do
  "$BIN" generate "$DEMO/zh/hf" --prompt "$prompt" --max-new-tokens 48 --temperature 0.7 --top-p 0.9 --seed 3
done

# Both runs' curves on one page, to open in any browser (nothing is fetched).
"$BIN" report "$DEMO/base" "$DEMO/zh" --label "pretrained on English" --label "continued on Chinese+English" \
  --title "llamatrain demo" -o "$DEMO/report.html"

printf '\ndemo done in %dm%02ds. Outputs in %s:\n' $(((SECONDS - t_start) / 60)) $(((SECONDS - t_start) % 60)) "$DEMO"
echo "  checkpoints  $DEMO/{base,zh}/checkpoints/step_N   (resume by rerunning the same train command)"
echo "  exports      $DEMO/{base,zh}/hf                     (Hugging Face folders: config, safetensors, tokenizer)"
echo "  metrics      $DEMO/{base,zh}/metrics.jsonl"
echo "  report       $DEMO/report.html                      (both runs' curves on one page)"
echo "To watch the training curves (TensorBoard reads the event files as they are):"
echo "  tensorboard --logdir $DEMO"
