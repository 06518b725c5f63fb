#!/usr/bin/env bash
# The check of one NVIDIA GPU machine, in one run of at most 8 minutes: builds llamatrain with CUDA
# (sm_90a) from the libraries of .devdeps (scripts/device_bundle.sh: the machine reaches no package
# registry), runs the CUDA kernel tests, the model on the CUDA backend against the reference backend
# and the PyTorch goldens, `train` on the GPU end to end (tests/train/cuda_train_test.cpp: the CPU's
# curve, SIGKILL and resume, checkpoints across devices, the export, two data-parallel ranks, doctor),
# a 1B-parameter model trained, saved, resumed and exported, attention forward + backward (the
# tensor-core kernels, the plain ones and PyTorch's SDPA: bench/cuda_attention_bench.cpp,
# tools/reference/gpu_attention.py), and `bench --device cuda` beside the PyTorch peer
# (tools/reference/gpu_train_step.py), and prints one table last.
#
# Every part runs under its own `timeout` and within the run's deadline (parts that would start after
# it are skipped, and say so); each logs to its own file under $OUT, all of them gathered in
# $OUT/logs.tar.gz; a failing part never stops the others.
#
# Usage: bash scripts/device_check.sh [--dry-run]
#   --dry-run   without a GPU: builds as the real run does, runs the CUDA kernel tests (their GPU
#               cases skip), then shows that every later part would start (its command, and a probe
#               of it: the tests listed, the configs planned, the binaries' and the peer's --help, two
#               ranks of mpirun), without running it
#   env: OUT (default device_check_out), JOBS, STEPS (bench steps, default 3), DEADLINE_S (default 460;
#        7200 for a dry run),
#        SKIP_TRAIN=1 (no cuda_train_test, no 1B runs: a check of the kernels and their speed alone),
#        SKIP_BENCH=1, SKIP_PEER=1
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
OUT=${OUT:-$PWD/device_check_out}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-3}
# (a dry run builds on whatever machine it is given, often far smaller: no deadline to speak of)
DEADLINE_S=${DEADLINE_S:-$([ $DRY = 1 ] && echo 7200 || echo 460)}
BUILD_LIMIT=$([ $DRY = 1 ] && echo 6000 || echo 300)
BUILD=build-gpu
mkdir -p "$OUT"
T0=$(date +%s)
ROWS=()
row() { ROWS+=("$(printf '%-40s %s' "$1" "$2")"); echo "== $1: $2 ($(( $(date +%s) - T0 )) s)"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - T0) )); }

# part NAME LIMIT_S LOG CMD...: CMD under `timeout` (its limit, or the time left), its output in
# $OUT/LOG, and a row: ok (with gtest's case counts), FAILED, timed out, or skipped.
part() {
  local name=$1 limit=$2 log=$3 rc=0 t
  shift 3
  t=$(left)
  if [ "$t" -lt 15 ]; then row "$name" "skipped: the run's ${DEADLINE_S} s are spent"; return 1; fi
  [ "$limit" -le "$t" ] || limit=$t
  local t1
  t1=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - t1 )) cases
  cases=$(grep -hoE '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+' "$OUT/$log" | awk '{s[$2]+=$4} END {
    for (k in s) printf "%s%d %s", (n++ ? ", " : ""), s[k], tolower(k) }')
  cases=${cases:+; $cases}
  case $rc in
    0) row "$name" "ok, ${took} s$cases ($log)" ;;
    124 | 137) row "$name" "TIMED OUT after ${limit} s$cases ($log)" ;;
    *) row "$name" "FAILED (exit $rc), ${took} s$cases ($log)" ;;
  esac
  return $rc
}
# probe NAME LOG CMD...: --dry-run's stand-in for a part: CMD is a quick check that it would start.
probe() {
  local name=$1 log=$2
  shift 2
  if "$@" >"$OUT/$log" 2>&1; then row "$name" "would start ($log)"; else row "$name" "WOULD NOT START ($log)"; fi
}

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >"$OUT/gpu.txt" 2>&1
  row "gpu" "$(tail -n 1 "$OUT/gpu.txt")"
else
  row "gpu" "no nvidia-smi on this machine$([ $DRY = 1 ] && echo ' (dry run)')"
fi
if [ -f .devdeps/env.sh ]; then
  t1=$(date +%s)
  # shellcheck disable=SC1091
  if source .devdeps/env.sh >"$OUT/devdeps.log" 2>&1; then
    row "libraries (.devdeps)" "unpacked into $LLAMATRAIN_DEPS in $(( $(date +%s) - t1 )) s"
  else
    row "libraries (.devdeps)" "FAILED ($OUT/devdeps.log)"
  fi
else
  row "libraries (.devdeps)" "none: the machine's own (scripts/device_bundle.sh make makes them)"
fi
# Programs other than ours (Python, the PyTorch peer) run with the machine's own libraries.
THEIRS=(env LD_LIBRARY_PATH="${LLAMATRAIN_DEPS_SAVED_LD_LIBRARY_PATH:-}")

# (every test labelled cuda among them: ctest -L cuda below runs them all)
TARGETS=(llamatrain cuda_vs_cpu_test cuda_rng_host_test cublaslt_library_test backend_test llama_golden_test
         cuda_train_test cuda_attention_bench cuda_ops_bench)
# NCCL: the toolkit's, or the Python environment's (nvidia-nccl: site-packages/nvidia/nccl).
if [ -z "${NCCL_ROOT:-}" ]; then
  NCCL_ROOT=$("${THEIRS[@]}" python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || true)
fi
row "nccl" "${NCCL_ROOT:-from the CUDA toolkit, if it has it}"
# shellcheck disable=SC2086
part "configure (CUDA on, sm_90a)" 120 configure.log \
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMATRAIN_CUDA=ON -DLLAMATRAIN_CUDA_EMULATOR=OFF \
  -DLLAMATRAIN_WERROR=OFF ${NCCL_ROOT:+-DNCCL_ROOT=$NCCL_ROOT} ${LLAMATRAIN_DEPS_CMAKE_ARGS:-} &&
  part "build ($JOBS jobs)" "$BUILD_LIMIT" build.log ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}"
BIN=$PWD/$BUILD/llamatrain
if [ ! -x "$BIN" ]; then
  row "everything else" "skipped: no binary"
else
  # The fixture corpus, and the 1B-class model: the tiny config's data at Llama-scale widths
  # (TinyLlama's shape: 22 layers of 2048, 32 heads, 4 kv heads; the fixture's 500-piece vocabulary).
  "$BIN" preprocess --quiet --input tests/data/fixtures/corpus.jsonl \
    --tokenizer-model tests/data/fixtures/tokenizer.model --output-prefix "$OUT/fx" --append-eod >"$OUT/preprocess.log" 2>&1
  ONE_B=(configs/tiny.yaml "model.data.data_prefix=[1.0,$OUT/fx_text_document]"
         model.tokenizer.model=tests/data/fixtures/tokenizer.model trainer.accelerator=gpu trainer.precision=bf16-mixed
         model.hidden_size=2048 model.ffn_hidden_size=5632 model.num_layers=22 model.num_attention_heads=32
         model.num_query_groups=4 model.encoder_seq_length=256 model.micro_batch_size=2 model.global_batch_size=4
         trainer.log_every_n_steps=1 trainer.limit_val_batches=0 model.optim.lr=3e-4 model.optim.sched.min_lr=3e-5 model.optim.sched.warmup_steps=1
         exp_manager.explicit_log_dir="$OUT/one_b" exp_manager.resume_if_exists=true
         exp_manager.checkpoint_callback_params.every_n_train_steps=2 convert_to_hf=true
         model.output_dir="$OUT/one_b_hf")
  CUDA_ENV=(env LLAMATRAIN_CUDA_BIN="$BIN" LLAMATRAIN_BIN="$BIN" OMP_NUM_THREADS=4)
  if [ $DRY = 1 ]; then
    # (run for real: without a GPU the device cases skip, the host ones run, and a test whose program
    # is not among TARGETS fails here rather than on the GPU)
    part "cuda kernel tests (ctest -L cuda)" 90 cuda_tests.log ctest --test-dir "$BUILD" -L cuda --output-on-failure
    probe "model on cuda vs the reference" backend_cuda.log "$BUILD/backend_test" --gtest_list_tests --gtest_filter='*Cuda*'
    probe "model on cuda vs PyTorch goldens" golden_cuda.log "$BUILD/llama_golden_test" --gtest_list_tests
    probe "train on cuda (tiny, end to end)" cuda_train.log "$BUILD/cuda_train_test" --gtest_list_tests
    probe "train 1B: plan on H200" one_b_plan.log "$BIN" plan "${ONE_B[@]}" trainer.max_steps=2 --hardware H200 --ranks-per-node 1
    probe "mpirun: 2 ranks of doctor" mpirun.log mpirun --oversubscribe --allow-run-as-root -np 2 "$BIN" doctor --all-ranks
    probe "attention bench" attention_bench.log "$BUILD/cuda_attention_bench" --help
    probe "ops bench" ops_bench.log "$BUILD/cuda_ops_bench" --help
    probe "PyTorch SDPA peer" attention_peer.log "${THEIRS[@]}" python3 tools/reference/gpu_attention.py --help
    probe "bench --device cuda" bench.log "$BIN" bench --help
    probe "PyTorch peer" peer.log "${THEIRS[@]}" python3 tools/reference/gpu_train_step.py --help
  else
    # Correctness first: the kernels against the CPU's and ref's, the model, then train end to end.
    part "cuda kernel tests (ctest -L cuda)" 90 cuda_tests.log ctest --test-dir "$BUILD" -L cuda --output-on-failure
    part "model on cuda vs the reference" 60 backend_cuda.log "$BUILD/backend_test" --gtest_filter='*Cuda*'
    part "model on cuda vs PyTorch goldens" 60 golden_cuda.log "$BUILD/llama_golden_test" --gtest_filter='*cuda*:*Cuda*'
    if [ "${SKIP_TRAIN:-0}" != 1 ]; then
      part "train on cuda (tiny, end to end)" 120 cuda_train.log "${CUDA_ENV[@]}" "$BUILD/cuda_train_test"
      part "train 1B: 2 steps, save" 90 one_b_1.log "$BIN" train "${ONE_B[@]}" trainer.max_steps=2 convert_to_hf=false &&
        part "train 1B: resume to 4, export" 120 one_b_2.log "$BIN" train "${ONE_B[@]}" trainer.max_steps=4
      grep -hE "^(step|checkpoint|resumed|exported|model:|llamatrain train:)" "$OUT"/one_b_*.log >"$OUT/one_b_summary.txt" 2>/dev/null
    fi
  fi

  # Speed: llamatrain against PyTorch eager on the same shapes (MFU against 989 TFLOP/s, H100/H200
  # dense bf16), one after the other on the quiet GPU.
  # One line of a bench row's figures from llamatrain's and the peer's JSON lines.
  bench_figures() {
    "${THEIRS[@]}" python3 - "$1" "$2" <<'PY'
import json, sys
def load(s):
    try:
        return json.loads(s)
    except Exception:
        return None
lt, pt = load(sys.argv[1]), load(sys.argv[2])
peak = 989e12
parts = []
if lt:
    mem = lt.get("device_mb", -1) * 1e6 / 2**30
    parts.append(f"llamatrain {lt['tokens_per_s']:.0f} tok/s ({100 * lt['gflops'] * 1e9 / peak:.1f}% MFU), "
                 f"{mem:.1f} GiB (analytic {lt['analytic_mb'] * 1e6 / 2**30:.1f}; before the model "
                 f"{lt.get('device_before_model_mb', -1) / 1e3:.2f} GB, runtime analytic {lt.get('runtime_analytic_mb', -1) / 1e3:.2f} GB)")
if pt:
    parts.append(f"pytorch {pt['tokens_per_s']:.0f} tok/s ({100 * pt['tflops'] * 1e12 / peak:.1f}%), "
                 f"peak {pt['peak_gib']:.1f} GiB")
if lt and pt:
    parts.append(f"ratio {lt['tokens_per_s'] / pt['tokens_per_s']:.2f}x")
print("; ".join(parts) if parts else "no figures")
PY
  }
  bench_row() {  # bench_row LABEL ARGS-FOR-BENCH -- ARGS-FOR-THE-PEER (or @LABEL: an earlier row's peer)
    local label=$1
    shift
    local lt=() peer=() sep=0 a
    for a in "$@"; do
      if [ "$a" = -- ]; then sep=1; continue; fi
      if [ $sep = 0 ]; then lt+=("$a"); else peer+=("$a"); fi
    done
    local log=bench_$(echo "$label" | tr -c 'a-zA-Z0-9' _).log
    part "bench $label" 90 "$log" "$BIN" bench --device cuda --precision bf16-mixed --steps "$STEPS" --json "${lt[@]}"
    local j p=""
    j=$(grep '^{"model"' "$OUT/$log" | tail -n 1)
    if [ "${#peer[@]}" = 1 ] && [ "${peer[0]:0:1}" = @ ]; then  # @LABEL: that row's peer, not run again
      p=$(grep -h '^{' "$OUT/peer_bench_$(echo "${peer[0]:1}" | tr -c 'a-zA-Z0-9' _).log" 2>/dev/null | tail -n 1)
    elif [ "${SKIP_PEER:-0}" != 1 ]; then
      part "peer $label" 90 "peer_$log" "${THEIRS[@]}" python3 tools/reference/gpu_train_step.py --steps "$STEPS" --json \
        "${peer[@]}"
      p=$(grep '^{' "$OUT/peer_$log" | tail -n 1)
    fi
    row "  $label" "$(bench_figures "$j" "$p")"
  }
  if [ $DRY = 0 ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
    mkdir -p "$OUT/llama2_7b_8l"
    "${THEIRS[@]}" python3 - "$OUT/llama2_7b_8l/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 11008, "num_hidden_layers": 8, "num_attention_heads": 32,
           "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}, open(sys.argv[1], "w"))
PY
    # Attention alone: the tensor-core kernels, the plain ones and PyTorch's SDPA, forward + backward.
    attention_row() {  # attention_row LABEL ARGS (for both programs)
      local label=$1 log=attention_$(echo "$1" | tr -c 'a-zA-Z0-9' _).log
      shift
      part "attention $label" 60 "$log" "$BUILD/cuda_attention_bench" --iters 5 --json "$@"
      part "sdpa $label" 60 "peer_$log" "${THEIRS[@]}" python3 tools/reference/gpu_attention.py --iters 5 --json "$@"
      local j p
      j=$(grep -h '^{' "$OUT/$log" 2>/dev/null | tail -n 1)
      p=$(grep -h '^{' "$OUT/peer_$log" 2>/dev/null | tail -n 1)
      row "  $label" "$("${THEIRS[@]}" python3 -c '
import json, sys
a = json.loads(sys.argv[1] or "{}"); b = json.loads(sys.argv[2] or "{}")
f = lambda d, k: "%.1f" % d[k] if k in d else "-"
print("fwd+bwd TFLOP/s: flash", f(a, "flash_tflops"), "plain", f(a, "plain_tflops"), "sdpa", f(b, "sdpa_tflops"),
      "| flash/sdpa %.2fx" % (a["flash_tflops"] / b["sdpa_tflops"]) if "flash_tflops" in a and "sdpa_tflops" in b else "")
' "$j" "$p" 2>/dev/null)"
    }
    attention_row "seq 4096 hd 128 (llama2-7b)" --seq 4096 --heads 32 --head-dim 128
    attention_row "seq 2048 x 8 hd 64 gqa 8 (tinyllama)" --batch 8 --seq 2048 --heads 32 --kv-heads 4 --head-dim 64
    # The other ops, each against the device's copy rate (GB/s) or in TFLOP/s (the lm head).
    ops_row() {  # ops_row LABEL ARGS
      local label=$1 log=ops_$(echo "$1" | tr -c 'a-zA-Z0-9' _).log
      shift
      part "ops $label" 60 "$log" "$BUILD/cuda_ops_bench" --iters 5 "$@"
      row "  ops $label" "$(grep -E 'copy|of the copy|TFLOP' "$OUT/$log" 2>/dev/null | sed 's/^ *//' | tr -s ' ' | paste -sd ';' -)"
    }
    ops_row "llama2-7b 4096 tokens"
    ops_row "tinyllama 16384 tokens" --tokens 16384 --hidden 2048 --ffn 5632 --heads 32 --kv-heads 4 --head-dim 64
    # (the whole 7B first: the figure users compare)
    bench_row "llama2-7b recompute seq 4096 x 1" --model llama2-7b --seq 4096 --batch 1 --recompute full -- \
      --dim 4096 --layers 32 --heads 32 --ffn 11008 --seq 4096 --batch 1 --recompute full
    # Selective recompute (no matmul runs twice) fits 7B at seq 4096 in the H200's memory by the plan
    # (147 of 151 GB); against the same PyTorch peer (transformers' checkpointing: whole layers).
    bench_row "llama2-7b selective seq 4096 x 1" --model llama2-7b --seq 4096 --batch 1 --recompute selective -- \
      @"llama2-7b recompute seq 4096 x 1"
    bench_row "tinyllama-1.1b seq 2048 x 8" --model tinyllama-1.1b --seq 2048 --batch 8 -- \
      --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --seq 2048 --batch 8
    bench_row "llama2-7b 8 layers seq 4096 x 2" --model "$OUT/llama2_7b_8l/config.json" --seq 4096 --batch 2 -- \
      --dim 4096 --layers 8 --heads 32 --ffn 11008 --seq 4096 --batch 2
  fi
fi

tar -C "$OUT" -czf "$OUT/logs.tar.gz" --exclude=logs.tar.gz --exclude='one_b*' --exclude='fx_*' --exclude='llama2_7b_8l' . 2>/dev/null
echo
echo "device check$([ $DRY = 1 ] && echo ' (dry run)'), $(( $(date +%s) - T0 )) s, logs in $OUT (logs.tar.gz):"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/table.txt"
! grep -qE "FAILED|TIMED OUT|WOULD NOT START" "$OUT/table.txt"
