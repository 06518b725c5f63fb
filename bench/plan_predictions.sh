#!/usr/bin/env bash
# `llamatrain plan`'s predictions for Llama 2 7B / 13B / 70B on the named accelerators, next to the
# published training results its efficiencies are calibrated on (docs/performance.md, "Predicted step
# times"). Needs no weights: each model is a folder holding only its Hugging Face config.json, and the
# data is the test corpus (plan reads only its token ids).
# Usage: bash bench/plan_predictions.sh [build/release/llamatrain]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/release/llamatrain}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BIN" preprocess --input tests/data/fixtures/corpus.jsonl --tokenizer-model tests/data/fixtures/tokenizer.model \
  --output-prefix "$work/corpus" --append-eod >/dev/null 2>&1
hf_config() {  # name hidden ffn layers heads kv_heads
  mkdir -p "$work/$1"
  printf '{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":%d,"intermediate_size":%d,"num_hidden_layers":%d,"num_attention_heads":%d,"num_key_value_heads":%d,"vocab_size":32000,"max_position_embeddings":4096,"rms_norm_eps":1e-5,"rope_theta":10000.0,"tie_word_embeddings":false,"bos_token_id":1,"eos_token_id":2,"torch_dtype":"bfloat16"}\n' \
    "$2" "$3" "$4" "$5" "$6" >"$work/$1/config.json"
}
hf_config 7b 4096 11008 32 32 32
hf_config 13b 5120 13824 40 40 40
hf_config 70b 8192 28672 80 64 8
plan() {  # label size config hardware nodes [overrides...]
  local label=$1 size=$2 config=$3 hw=$4 nodes=$5 peak
  shift 5
  case $hw in H100 | H200) peak=989e12 ;; A100) peak=312e12 ;; trn1.32xlarge) peak=95e12 ;; esac
  { "$BIN" plan "configs/llama2_$config.yaml" "model.init_from=$work/$size" "model.data.data_prefix=[1.0,$work/corpus_text_document]" \
    exp_manager.explicit_log_dir="$work/run" --hardware "$hw" --nodes "$nodes" --json "$@" || true; } |
    /usr/bin/python3 -c "
import json, sys
p = json.load(sys.stdin)
q = p['prediction']; l = p['layout']; gpus = p['nodes'] * p['ranks_per_node']
mem = max(m['total'] for m in p['memory_per_rank']) / 2**30
m = [c for c in p['checks'] if c['what'] == 'memory'][0]
print(f\"| $label | $hw x {p['nodes']} | tp {l['tp']} pp {l['pp']} dp {l['dp']} | {q['seq_per_s']:.2f} | {q['tokens_per_s'] / gpus:,.0f} | {100 * q['flops_per_step'] / q['step_s'] / gpus / $peak:.0f}% | {mem:.1f} GiB {m['status']} |\")"
}
echo "| model | machine | layout | seq/s | tokens/s per rank | MFU (bf16 peak) | memory per rank |"
echo "|---|---|---|---|---|---|---|"
plan "7B seq 4096" 7b 7b trn1.32xlarge 1
plan "7B seq 4096" 7b 7b trn1.32xlarge 2
plan "7B seq 4096" 7b 7b trn1.32xlarge 4
plan "13B seq 4096" 13b 13b trn1.32xlarge 4
plan "70B seq 4096" 70b 70b trn1.32xlarge 8
# Llama 2's own pretraining (A100-80GB, 4M-token batches): the layouts are not published; ZeRO-1 with
# full recompute is the smallest that fits llamatrain's fp32 master weights.
gpu=(trainer.precision=bf16-mixed model.distributed_optimizer=true model.global_batch_size=1024 model.micro_batch_size=1
  model.activations_checkpoint_granularity=selective)
plan "7B seq 4096" 7b 7b A100 8 "${gpu[@]}" model.tensor_model_parallel_size=2
plan "13B seq 4096" 13b 13b A100 8 "${gpu[@]}" model.tensor_model_parallel_size=4 model.pipeline_model_parallel_size=1
plan "70B seq 4096" 70b 70b A100 16 "${gpu[@]}" model.tensor_model_parallel_size=8 model.pipeline_model_parallel_size=4
# NeMo's published H100 jobs (FP8 there; bf16 here): 7B on 8 GPUs, 13B on 16, 70B on 64; TP 2 where
# llamatrain's fp32 master weights and gradients need it.
h100=(trainer.precision=bf16-mixed model.distributed_optimizer=true model.global_batch_size=128 model.micro_batch_size=1
  model.activations_checkpoint_granularity=selective)
plan "7B seq 4096" 7b 7b H100 1 "${h100[@]}" model.tensor_model_parallel_size=2
plan "13B seq 4096" 13b 13b H100 2 "${h100[@]}" model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=4
plan "70B seq 4096" 70b 70b H100 8 "${h100[@]}" model.tensor_model_parallel_size=4 model.pipeline_model_parallel_size=4
