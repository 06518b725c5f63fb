#!/usr/bin/env bash
# Continued pretraining in the seeds' terms: sourced by the model scripts (launch/models/*.sh) after
# they set CONFIG and their shape's defaults (GBS, TP, PP, SEQ_LENGTH), it fills in the defaults every
# model shares, turns the seeds' variables into the config's overrides and hands over to
# launch/task.sh. Variables (`: ${X:=v}`: a value exported before wins):
#   DATASET_PATH     a preprocessed prefix, without .bin/.idx
#   INIT_FROM        a Hugging Face folder to start from (its tokenizer.model is used)
#   TOKENIZER_MODEL  a tokenizer.model, without INIT_FROM: pretraining from scratch
#   TRAIN_ITERS, GBS, UBS, TP, PP, WARMUP_STEPS, SEQ_LENGTH
: "${CONFIG:?the model script sets CONFIG (a YAML file) before sourcing pretrain.sh}"
: "${DATASET_PATH:=$HOME/examples_datasets/book_text_document}"
: "${INIT_FROM:=}"
: "${TOKENIZER_MODEL:=}"
: "${TRAIN_ITERS:=10000}"
: "${UBS:=1}"
: "${WARMUP_STEPS:=2000}"
: "${GBS:?the model script sets GBS}" "${TP:?the model script sets TP}" "${PP:?the model script sets PP}"
: "${SEQ_LENGTH:?the model script sets SEQ_LENGTH}"
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
source "$(dirname "${BASH_SOURCE[0]}")/task.sh"
