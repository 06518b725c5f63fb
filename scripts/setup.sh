#!/usr/bin/env bash
# Installs every Debian package llamatrain needs (idempotent: only what is missing, after one
# `apt-get update`), then configures and builds the release preset (or $PRESET).
# Usage: bash scripts/setup.sh            # packages + release build
#        PRESET=debug bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev                                  # matmuls (AMX / AVX512-BF16 / AVX2)
  libsentencepiece-dev sentencepiece           # Llama 2 tokenizer; spm_train for test fixtures
  libsimdjson-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy python3-sentencepiece   # PyTorch reference (tests and bench only)
  python3-protobuf      # decodes our TensorBoard event files in tests (tests only)
  libopenblas0-openmp   # a real BLAS for that reference (the default libblas3 is ~15x slower)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PRESET=${PRESET:-release}
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET" -j "$(nproc)"
echo "setup: built build/$PRESET/llamatrain"
