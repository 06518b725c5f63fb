#!/usr/bin/env bash
# Llama 2 7B continued pretraining as the seeds run it (llama_7b.sh): 4 nodes of 32 ranks,
# TP 8, PP 1, DP 16, global batch 256 of 4096 tokens, 2000 warm-up steps.
# The shape and hyperparameters are in configs/llama2_7b.yaml; this script sets what a run changes.
#   sbatch --nodes N launch/slurm/preflight.slurm launch/models/llama2_7b.sh   # checks, before the job
#   sbatch --nodes N --ntasks-per-node 32 launch/slurm/run.slurm launch/models/llama2_7b.sh
# Variables (`: ${X:=v}`: a value exported before wins): DATASET_PATH (a preprocessed prefix, no
# .bin/.idx), INIT_FROM (a Hugging Face folder to start from; its tokenizer.model is used),
# TOKENIZER_MODEL (a tokenizer.model, without INIT_FROM: pretraining from scratch), TRAIN_ITERS, GBS,
# UBS, TP, PP, WARMUP_STEPS, SEQ_LENGTH (launch/pretrain.sh turns them into overrides); launch/task.sh
# lists the job-wide ones.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONFIG=$repo/configs/llama2_7b.yaml
: "${GBS:=256}"
: "${TP:=8}"
: "${PP:=1}"
: "${SEQ_LENGTH:=4096}"
source "$repo/launch/pretrain.sh"
