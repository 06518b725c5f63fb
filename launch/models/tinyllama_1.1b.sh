#!/usr/bin/env bash
# TinyLlama 1.1B continued pretraining: 1 node of 32 ranks, DP 32,
# global batch 1024 of 2048 tokens.
# The shape and hyperparameters are in configs/tinyllama_1.1b.yaml; this script sets what a run changes.
#   sbatch --nodes N launch/slurm/preflight.slurm launch/models/tinyllama_1.1b.sh   # checks, before the job
#   sbatch --nodes N --ntasks-per-node 32 launch/slurm/run.slurm launch/models/tinyllama_1.1b.sh
# Variables (`: ${X:=v}`: a value exported before wins): DATASET_PATH (a preprocessed prefix, no
# .bin/.idx), INIT_FROM (a Hugging Face folder to start from; its tokenizer.model is used),
# TOKENIZER_MODEL (a tokenizer.model, without INIT_FROM: pretraining from scratch), TRAIN_ITERS, GBS,
# UBS, TP, PP, WARMUP_STEPS, SEQ_LENGTH (launch/pretrain.sh turns them into overrides); launch/task.sh
# lists the job-wide ones.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CONFIG=$repo/configs/tinyllama_1.1b.yaml
: "${GBS:=1024}"
: "${TP:=1}"
: "${PP:=1}"
: "${SEQ_LENGTH:=2048}"
source "$repo/launch/pretrain.sh"
