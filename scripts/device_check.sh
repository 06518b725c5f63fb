#!/usr/bin/env bash
# The check of one NVIDIA GPU machine, in one run: builds llamatrain with CUDA (sm_90a), runs the
# CUDA kernel tests, the whole model on the CUDA backend against the reference backend and against
# the PyTorch golden files, then `bench --device cuda` side by side with the PyTorch peer
# (tools/reference/gpu_train_step.py) on three shapes, and prints one table last. Every part logs to
# its own file under $OUT (default device_check_out/); a part that fails is marked in the table and
# the others still run. Budget: about 8 minutes on one H200 (build 1-2, tests 1-2, benches 4).
#
# The machine needs no package registry: where the project root holds .devdeps (Debian packages of
# the build's libraries, ../shared/device/README.md), they are unpacked first.
# Usage: bash scripts/device_check.sh            (env: OUT, JOBS, STEPS=5, SKIP_BENCH=1, SKIP_PEER=1)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device_check_out}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-5}
BUILD=build-gpu
mkdir -p "$OUT"
T0=$(date +%s)
ROWS=()
row() { ROWS+=("$(printf '%-44s %s' "$1" "$2")"); echo "== $1: $2 ($(( $(date +%s) - T0 )) s)"; }
# part NAME LOG CMD...: runs CMD with its output in $OUT/LOG, and a row with its status
part() {
  local name=$1 log=$2 rc=0
  shift 2
  "$@" >"$OUT/$log" 2>&1 || rc=$?
  # gtest's count of cases (a case that skips, with no GPU, passes as far as ctest is concerned)
  local cases
  cases=$(grep -hoE '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+' "$OUT/$log" | awk '{s[$2]+=$4} END {
    for (k in s) printf "%s%d %s", (n++ ? ", " : ""), s[k], tolower(k) }')
  cases=${cases:+; cases: $cases}
  if [ $rc = 0 ]; then row "$name" "ok$cases  ($log)"; return 0; fi
  row "$name" "FAILED, exit $rc$cases  ($OUT/$log)"
  return 1
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >"$OUT/gpu.txt" 2>&1
row "gpu" "$(tail -n 1 "$OUT/gpu.txt")"
if [ -f .devdeps/unpack_debs.sh ]; then
  # shellcheck disable=SC1091
  source .devdeps/unpack_debs.sh .devdeps >"$OUT/devdeps.log" 2>&1 || row "devdeps" "FAILED ($OUT/devdeps.log)"
fi

TARGETS=(llamatrain cuda_vs_cpu_test cuda_rng_host_test backend_test llama_golden_test)
part "configure (CUDA on, sm_90a)" configure.log \
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMATRAIN_CUDA=ON -DLLAMATRAIN_WERROR=OFF &&
  part "build ($JOBS jobs)" build.log ninja -C "$BUILD" -j "$JOBS" "${TARGETS[@]}"
BIN=$BUILD/llamatrain
if [ ! -x "$BIN" ]; then
  row "everything else" "skipped: no binary"
  printf '%s\n' "${ROWS[@]}"
  exit 1
fi

# Correctness first: the kernels against the CPU's and ref's, then the whole model on the GPU.
part "cuda kernel tests (ctest -L cuda)" cuda_tests.log ctest --test-dir "$BUILD" -L cuda --output-on-failure
part "model on cuda vs the reference backend" backend_cuda.log "$BUILD/backend_test" --gtest_filter='*Cuda*'
part "model on cuda vs PyTorch goldens" golden_cuda.log "$BUILD/llama_golden_test" --gtest_filter='*cuda*'
for log in backend_cuda.log golden_cuda.log; do
  grep -E "SKIPPED|worst|rel err" "$OUT/$log" | head -n 40 >>"$OUT/summary.txt"
done

# Speed: llamatrain against PyTorch eager on the same shapes (MFU against 989 TFLOP/s, H100/H200
# dense bf16), one after the other on the quiet GPU.
bench_row() {  # bench_row LABEL ARGS-FOR-BENCH -- ARGS-FOR-THE-PEER
  local label=$1
  shift
  local lt=() peer=() sep=0 a
  for a in "$@"; do
    if [ "$a" = -- ]; then sep=1; continue; fi
    if [ $sep = 0 ]; then lt+=("$a"); else peer+=("$a"); fi
  done
  local log=bench_$(echo "$label" | tr -c 'a-zA-Z0-9' _).log
  local j p
  j=$("$BIN" bench --device cuda --precision bf16-mixed --steps "$STEPS" --json "${lt[@]}" 2>"$OUT/$log" | tail -n 1)
  echo "$j" >>"$OUT/$log"
  p=""
  if [ "${SKIP_PEER:-0}" != 1 ]; then
    p=$(python3 tools/reference/gpu_train_step.py --steps "$STEPS" --json "${peer[@]}" 2>>"$OUT/$log" | tail -n 1)
    echo "$p" >>"$OUT/$log"
  fi
  local err
  err=$(grep -m 1 '^error: ' "$OUT/$log" || true)
  row "bench $label" "$(python3 - "$j" "$p" "${err:-see $OUT/$log}" <<'PY'
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
                 f"{mem:.1f} GiB (analytic {lt['analytic_mb'] * 1e6 / 2**30:.1f})")
else:
    parts.append("llamatrain FAILED: " + sys.argv[3])
if pt:
    parts.append(f"pytorch {pt['tokens_per_s']:.0f} tok/s ({100 * pt['tflops'] * 1e12 / peak:.1f}%), "
                 f"peak {pt['peak_gib']:.1f} GiB")
if lt and pt:
    parts.append(f"ratio {lt['tokens_per_s'] / pt['tokens_per_s']:.2f}x")
print("; ".join(parts))
PY
)"
}

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  # the 7B layer shape: Llama-2-7B with 8 of its 32 layers
  mkdir -p "$OUT/llama2_7b_8l"
  python3 - "$OUT/llama2_7b_8l/config.json" <<'PY'
import json, sys
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
           "intermediate_size": 11008, "num_hidden_layers": 8, "num_attention_heads": 32,
           "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "bos_token_id": 1, "eos_token_id": 2}, open(sys.argv[1], "w"))
PY
  bench_row "tinyllama-1.1b seq 2048 x 8" --model tinyllama-1.1b --seq 2048 --batch 8 -- \
    --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --seq 2048 --batch 8
  bench_row "llama2-7b 8 layers seq 4096 x 2" --model "$OUT/llama2_7b_8l/config.json" --seq 4096 --batch 2 -- \
    --dim 4096 --layers 8 --heads 32 --ffn 11008 --seq 4096 --batch 2
  bench_row "llama2-7b recompute seq 4096 x 1" --model llama2-7b --seq 4096 --batch 1 --recompute full -- \
    --dim 4096 --layers 32 --heads 32 --ffn 11008 --seq 4096 --batch 1 --recompute full
fi

echo
echo "device check, $(( $(date +%s) - T0 )) s, logs in $OUT:"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/table.txt"
