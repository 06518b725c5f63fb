#!/usr/bin/env bash
# The portable build's binary runs on every x86-64-v3 CPU: AVX-512 instructions (EVEX-encoded: zmm
# or opmask registers, xmm/ymm 16-31, or an EVEX prefix) may appear only in the avx512 variant of the
# CPU kernels (functions in llamatrain::cpu::avx512, their OpenMP bodies and lambdas included), which
# runs only where the CPU has AVX-512. An inline function or template compiled in that variant and
# picked by the linker for the rest of the program would break that on an AVX2 CPU; this finds one.
# It also checks that the avx512 variant exists and holds AVX-512 code.
# Usage: check_cpu_variants.sh path/to/llamatrain
set -euo pipefail
bin=$1
command -v objdump >/dev/null || { echo "objdump (binutils) is missing"; exit 1; }
objdump -d --insn-width=16 -C --no-addresses "$bin" 2>/dev/null | awk '
  /^<.*>:$/ { fn = $0; next }
  /^\t/ {
    n = split($0, f, "\t"); if (n < 3) next
    split(f[2], b, " "); i = 1
    while (b[i] ~ /^(67|2e|3e|26|36|64|65)$/) i++
    evex = b[i] == "62" || f[3] ~ /zmm|%k[0-7]|mm(1[6-9]|2[0-9]|3[01])([^0-9]|$)/
    if (!evex) next
    if (fn ~ /llamatrain::cpu::avx512::/) { inside++; next }
    if (!(fn in bad)) { bad[fn] = f[3]; nbad++ }
  }
  END {
    for (fn in bad) printf "AVX-512 outside the avx512 variant: %s (e.g. %s)\n", fn, bad[fn]
    if (inside == 0) { print "no AVX-512 instruction in llamatrain::cpu::avx512: the variant is missing or not compiled for AVX-512"; exit 1 }
    printf "%d AVX-512 instructions inside llamatrain::cpu::avx512, %d functions with some outside it\n", inside, nbad
    exit nbad > 0
  }'
