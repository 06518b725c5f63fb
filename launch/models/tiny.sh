#!/usr/bin/env bash
# The tiny model (configs/tiny.yaml, 2 layers of width 64) on a small corpus: trains in seconds, for
# trying the SLURM scripts out and for the tests. From the repository root, after
#   llamatrain preprocess --input tests/data/fixtures/corpus.jsonl \
#       --tokenizer-model tests/data/fixtures/tokenizer.model --output-prefix /tmp/fixture --append-eod
# run
#   sbatch --nodes 2 launch/slurm/preflight.slurm launch/models/tiny.sh
#   sbatch --nodes 2 launch/slurm/run.slurm launch/models/tiny.sh
# Variables (`: ${X:=v}`: a value exported before wins): DATASET_PATH, TOKENIZER_MODEL, TRAIN_ITERS,
# GBS, UBS, TP, PP, PRECISION, SAVE_EVERY; launch/task.sh lists the job-wide ones.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONFIG=$repo/configs/tiny.yaml
: "${DATASET_PATH:=/tmp/fixture_text_document}"
: "${TOKENIZER_MODEL:=$repo/tests/data/fixtures/tokenizer.model}"
: "${TRAIN_ITERS:=50}"
: "${GBS:=8}"
: "${UBS:=2}"
: "${TP:=1}"
: "${PP:=1}"
: "${PRECISION:=32}"
: "${SAVE_EVERY:=25}"
OVERRIDES=(
  "model.data.data_prefix=[1.0,$DATASET_PATH]"
  "model.tokenizer.model=$TOKENIZER_MODEL"
  "trainer.max_steps=$TRAIN_ITERS"
  "trainer.log_every_n_steps=1"
  "trainer.val_check_interval=$TRAIN_ITERS"
  "trainer.limit_val_batches=1"
  "trainer.precision=$PRECISION"
  "model.micro_batch_size=$UBS"
  "model.global_batch_size=$GBS"
  "model.tensor_model_parallel_size=$TP"
  "model.pipeline_model_parallel_size=$PP"
  "model.optim.sched.warmup_steps=2"
  "exp_manager.checkpoint_callback_params.every_n_train_steps=$SAVE_EVERY"
  "convert_to_hf=true"
)
source "$repo/launch/task.sh"
