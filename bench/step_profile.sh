#!/usr/bin/env bash
# Per-kernel time of a training step: copies the committed tree to $WORK, wraps every kernel call of
# src/model/passes.cpp and llama.cpp in a timer (bench/step_profile_instrument.py), builds that llamatrain and runs
# `bench` with it. At exit the timers print seconds per kernel line summed over all calls (warmup
# included: divide by steps + 1). Never touches the working tree or its build.
# Usage: bench/step_profile.sh [bench args...]   (default: stories110m, seq 256, batch 8, bf16-mixed, 4 steps)
#   env: WORK=/tmp/llamatrain_step_profile THREADS=2, CMAKE_ARGS (extra configure flags). The kernels of
#        an AVX2 CPU on any x86 machine: LLAMATRAIN_CPU_KERNELS=avx2 ONEDNN_MAX_CPU_ISA=AVX2 in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/llamatrain_step_profile}
THREADS=${THREADS:-2}
ARGS=("$@")
[[ ${#ARGS[@]} -gt 0 ]] || ARGS=(--model stories110m --seq 256 --batch 8 --precision bf16-mixed --steps 4)
rm -rf "$WORK" && mkdir -p "$WORK"
git archive HEAD | tar -x -C "$WORK"
/usr/bin/python3 bench/step_profile_instrument.py "$WORK/src/model/passes.cpp" "$WORK/src/model/llama.cpp"
(cd "$WORK" && cmake --preset release ${CMAKE_ARGS:-} >/dev/null && cmake --build build/release --target llamatrain >/dev/null)
OMP_NUM_THREADS=$THREADS "$WORK/build/release/llamatrain" bench "${ARGS[@]}"
