#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the whole default test suite with ctest.
# Long fuzz/soak runs are excluded here; run them with: ctest --test-dir build/release -L soak
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build/release --output-on-failure -j "$(nproc)" -LE soak "$@"
