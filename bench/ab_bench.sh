#!/usr/bin/env bash
# Two llamatrain binaries (or one binary under two environments) side by side: `bench --json` runs
# alternated in pairs, the order flipped every pair, and the median and spread of the pairwise
# tokens/s ratios B / A printed, with each side's MFU. On a noisy machine only such ratios mean
# anything: never compare single runs.
# Usage: bench/ab_bench.sh PAIRS "[ENV=V ...] BIN_A [ARGS_A...]" "[ENV=V ...] BIN_B [ARGS_B...]" [bench args...]
#   bench/ab_bench.sh 4 "/tmp/old/llamatrain" "build/release/llamatrain" --model stories15m --precision fp32
#   bench/ab_bench.sh 4 "build/release/llamatrain" "LLAMATRAIN_CPU_KERNELS=avx2 build/release/llamatrain" --model stories15m
#   bench/ab_bench.sh 4 "B/llamatrain --precision fp32" "B/llamatrain --precision bf16-mixed" --model stories42m
# env: THREADS=2
set -euo pipefail
pairs=$1 a=$2 b=$3
shift 3
export OMP_NUM_THREADS=${THREADS:-2}
run() {  # run "ENV=V ... BIN [ARGS...]" args... -> one JSON line
  local spec=($1) envs=()
  shift
  while [[ ${spec[0]} == *=* ]]; do envs+=("${spec[0]}"); spec=("${spec[@]:1}"); done
  env "${envs[@]}" "${spec[0]}" bench "${spec[@]:1}" "$@" --json 2>/dev/null | grep '^{' | tail -n 1
}
results=()
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then ja=$(run "$a" "$@"); jb=$(run "$b" "$@"); else jb=$(run "$b" "$@"); ja=$(run "$a" "$@"); fi
  results+=("$ja" "$jb")
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 <(cat <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
a, b = rows[0::2], rows[1::2]
ratios = [y["tokens_per_s"] / x["tokens_per_s"] for x, y in zip(a, b)]
fmt = lambda rs: " ".join(f"{r:.1f}" for r in rs)
for name, side in (("A", a), ("B", b)):
    mfu = statistics.median(r["mfu"] for r in side)
    print(f"{name} tokens/s {fmt([r['tokens_per_s'] for r in side])}  MFU median {mfu:.1%}  kernels {side[0].get('cpu_kernels', '?')}")
print(f"B/A pairwise {' '.join(f'{r:.3f}' for r in ratios)}: median {statistics.median(ratios):.3f} "
      f"(spread {min(ratios):.3f}-{max(ratios):.3f})")
PY
)
