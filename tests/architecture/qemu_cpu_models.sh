#!/usr/bin/env bash
# The portable binary on CPUs this machine is not, through QEMU's user-mode CPU models (which execute
# the instructions a model has and fault on any other, AVX-512 included, since QEMU emulates none):
#   Haswell (AVX2, FMA, no AVX-512): the run-time choice picks the avx2 kernels by itself, and a
#     training step runs through, oneDNN's AVX2 code included, as does doctor;
#     forcing the avx512 kernels there is a plain error;
#   Nehalem (no AVX2): the binary stops at once with a plain error naming what it lacks, not SIGILL.
# Exits 77 (skipped) when qemu-x86_64 is missing (apt-get install qemu-user).
# Usage: qemu_cpu_models.sh path/to/llamatrain
set -euo pipefail
bin=$1
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 is missing (apt-get install qemu-user)"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=2 LLAMATRAIN_CPU_KERNELS=auto
unset ONEDNN_MAX_CPU_ISA

tiny=(bench --model tiny --seq 32 --batch 2 --steps 1)
out=$(qemu-x86_64 -cpu Haswell "$bin" "${tiny[@]}" --precision bf16-mixed --json 2>&1) ||
  fail "bench on a Haswell CPU model exited $?: $out"
json=$(grep '^{' <<<"$out" | tail -n 1)
[ -n "$json" ] || fail "bench on a Haswell CPU model printed no JSON: $out"
grep -q '"cpu_kernels":"avx2"' <<<"$json" || fail "a Haswell CPU did not get the avx2 kernels: $json"
grep -Eq '"tokens_per_s":[0-9]+(\.[0-9]+)?[,}]' <<<"$json" || fail "no tokens/s from the Haswell run: $json"
echo "Haswell: bench chose the avx2 kernels and ran a step"

out=$(qemu-x86_64 -cpu Haswell "$bin" doctor 2>&1) || true
grep -q "kernels avx2" <<<"$out" || fail "doctor on a Haswell CPU model does not report the avx2 kernels: $out"
echo "Haswell: doctor reports the avx2 kernels"

set +e
out=$(LLAMATRAIN_CPU_KERNELS=avx512 qemu-x86_64 -cpu Haswell "$bin" "${tiny[@]}" 2>&1)
rc=$?
((rc == 1)) || fail "LLAMATRAIN_CPU_KERNELS=avx512 on a Haswell CPU model exited $rc, not 1 (an error): $out"
grep -q "lacks AVX-512" <<<"$out" || fail "forcing avx512 on a CPU without it gives no plain error: $out"
echo "Haswell: LLAMATRAIN_CPU_KERNELS=avx512 refused with: $(grep '^error' <<<"$out")"

out=$(qemu-x86_64 -cpu Nehalem "$bin" --help 2>&1)
rc=$?
set -e
((rc != 0 && rc < 128)) || fail "on a Nehalem CPU model the binary exited $rc (a signal, or success): $out"
grep -q "x86-64-v3" <<<"$out" || fail "the error on a CPU without AVX2 does not name what it lacks: $out"
echo "Nehalem: refused with: $(head -n 1 <<<"$out")"
