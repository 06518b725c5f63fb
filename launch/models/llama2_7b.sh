#!/usr/bin/env bash
# Llama 2 7B continued pretraining as the seeds run it (llama_7b.sh): 4 nodes of 32 ranks,
# TP 8, PP 1, DP 16, global batch 256 of 4096 tokens, 2000 warm-up steps.
# The shape and hyperparameters are in configs/llama2_7b.yaml; this script sets what a run changes.
#   sbatch --nodes N launch/slurm/preflight.slurm launch/models/llama2_7b.sh   # checks, before the job
#   sbatch --nodes N --ntasks-per-node 32 launch/slurm/run.slurm launch/models/llama2_7b.sh
# Variables (`: ${X:=v}`: a value exported before wins): DATASET_PATH (a preprocessed prefix, no
# .bin/.idx), INIT_FROM (a Hugging Face folder to start from; its tokenizer.model is used),
# TOKENIZER_MODEL (a tokenizer.model, without INIT_FROM: pretraining from scratch), TRAIN_ITERS, GBS,
# UBS, TP, PP, WARMUP_STEPS, SEQ_LENGTH; launch/task.sh lists the job-wide ones.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONFIG=$repo/configs/llama2_7b.yaml
: "${DATASET_PATH:=$HOME/examples_datasets/book_text_document}"
: "${INIT_FROM:=}"
: "${TOKENIZER_MODEL:=}"
: "${TRAIN_ITERS:=10000}"
: "${GBS:=256}"
: "${UBS:=1}"
: "${TP:=8}"
: "${PP:=1}"
: "${WARMUP_STEPS:=2000}"
: "${SEQ_LENGTH:=4096}"
OVERRIDES=(
  "model.data.data_prefix=[1.0,$DATASET_PATH]"
  "trainer.max_steps=$TRAIN_ITERS"
  "trainer.val_check_interval=$TRAIN_ITERS"
  "model.global_batch_size=$GBS"
  "model.micro_batch_size=$UBS"
  "model.tensor_model_parallel_size=$TP"
  "model.pipeline_model_parallel_size=$PP"
  "model.optim.sched.warmup_steps=$WARMUP_STEPS"
  "model.encoder_seq_length=$SEQ_LENGTH"
)
[ -z "$INIT_FROM" ] || OVERRIDES+=("model.init_from=$INIT_FROM")
[ -z "$TOKENIZER_MODEL" ] || OVERRIDES+=("model.tokenizer.model=$TOKENIZER_MODEL")
source "$repo/launch/task.sh"
