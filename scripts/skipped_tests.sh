#!/usr/bin/env bash
# Lists the tests that did not run, with their reasons, from ctest's JUnit file (ctest --output-junit,
# with the output of passing tests kept whole: --test-output-size-passed): ctest tests reported as
# skipped (SKIP_RETURN_CODE) or disabled, and gtest cases inside a passing test binary that called
# GTEST_SKIP, which ctest itself counts as passed. Cases whose reason says "on this CPU" (a kernel
# this CPU lacks, such as oneDNN's bf16 matmul without AVX-512) are listed apart: no package brings
# them; so are the CUDA tests' cases on a machine without a GPU (reason "needs an NVIDIA GPU: ...").
# Exit status 0 when nothing else was skipped, 3 when something was.
# Usage: bash scripts/skipped_tests.sh build/release/test-results.xml
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: bash scripts/skipped_tests.sh JUNIT_FILE" >&2; exit 2; }
[ -f "$1" ] || { echo "skipped_tests: no ctest results at $1 (did ctest run with --output-junit?)" >&2; exit 2; }

awk '
  function unescape(s) {
    gsub(/&lt;/, "<", s); gsub(/&gt;/, ">", s); gsub(/&quot;/, "\"", s); gsub(/&apos;/, "\047", s)
    gsub(/&amp;/, "\\&", s)
    return s
  }
  function attr(line, key) {
    if (!match(line, key "=\"[^\"]*\"")) return ""
    return substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 3)
  }
  function emit(what, why) {
    sub(/^ +/, "", why)
    if (why ~ /on this CPU|needs an NVIDIA GPU/) { cpu_out = cpu_out sprintf("  %s: %s\n", what, why); n_cpu++; return }
    out = out sprintf("  %s: %s\n", what, (why == "" ? "(no reason given)" : why))
    n++
  }
  /<testcase / {
    test = attr($0, "name"); status = attr($0, "status")
    ctest_skip = (status == "notrun" || status == "disabled"); ctest_why = ""; case_why = ""; in_why = 0
    next
  }
  /<\/testcase>/ {
    if (ctest_skip) emit(test, ctest_why == "" ? "ctest status " status : ctest_why)
    test = ""; next
  }
  test == "" { next }
  {
    line = unescape($0)
    sub(/^[ \t]*<system-out>/, "", line); sub(/<\/system-out>[ \t]*$/, "", line)
    if (ctest_skip) { if (line != "" && line !~ /^[ \t]*<skipped/) ctest_why = ctest_why " " line; next }
    if (line ~ /^\[ RUN      \] /) { case_why = ""; in_why = 0; next }
    if (line ~ /: Skipped$/) { in_why = 1; next }
    if (line ~ /^\[  SKIPPED \] .* \([0-9]+ ms\)$/) {
      name = line; sub(/^\[  SKIPPED \] /, "", name); sub(/ \([0-9]+ ms\)$/, "", name)
      emit(test " " name, case_why); in_why = 0; next
    }
    if (in_why) { if (line == "") in_why = 0; else case_why = case_why " " line }
  }
  END {
    if (n_cpu > 0) printf "test: %d case(s) not for this machine (its CPU, or no GPU):\n%s", n_cpu, cpu_out
    if (n == 0) { print "test: no test skipped"; exit 0 }
    printf "test: %d test(s) skipped, each for want of something scripts/setup.sh installs:\n%s", n, out
    exit 3
  }
' "$1"
