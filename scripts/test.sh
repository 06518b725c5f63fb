#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the whole default test suite with ctest, then lists
# any test that skipped for want of a tool or Python module (scripts/skipped_tests.sh).
# Long fuzz/soak runs are excluded here; run them with: ctest --test-dir build/release -L soak
# Extra arguments go to ctest (e.g. -R preprocess). LLAMATRAIN_WERROR=ON makes warnings errors (CI).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
results=$PWD/build/release/test-results.xml
rm -f "$results"
status=0
ctest --test-dir build/release --output-on-failure -j "$(nproc)" -LE soak \
  --output-junit "$results" --test-output-size-passed 4194304 "$@" || status=$?
[ ! -f "$results" ] || bash scripts/skipped_tests.sh "$results" || true
exit "$status"
