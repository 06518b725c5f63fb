#!/usr/bin/env bash
# Sets everything up and runs the main job on its small built-in default: a short training run of a
# tiny Llama on built-in text, then a sample from the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/release/llamatrain train --demo "$@"
