#!/usr/bin/env bash
# Installs every Debian package llamatrain needs (only what is missing, after one `apt-get update`;
# silent when all are present), then configures and builds the release preset (or $PRESET).
# The list is complete on its own: packages are installed without their recommendations, and
# scripts/fresh_machine_test.sh proves it on a bare Debian 12 root.
# Usage: bash scripts/setup.sh                        # packages + release build
#        PRESET=debug bash scripts/setup.sh           # the sanitizer build (warnings are errors)
#        LLAMATRAIN_WERROR=ON bash scripts/setup.sh   # warnings are errors (CI); sticks to the build
#        SETUP_TARGET=llamatrain bash scripts/setup.sh  # the program only (and only its packages),
#                                                       # not the tests, benches and their packages
set -euo pipefail
cd "$(dirname "$0")/.."

# What the program needs to build and run, and the demo's text: all that `SETUP_TARGET=llamatrain`
# (the README's main command) installs.
PROGRAM_PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev                                  # matmuls (AMX / AVX512-BF16 / AVX2)
  libsentencepiece-dev                         # Llama 2 tokenizer, and the trainer of `llamatrain tokenizer train`
  libpcre2-dev                                 # tokenizer.json pre-tokenizer regexes (Unicode classes, lookahead, JIT)
  libicu-dev                                   # tokenizer.json NFC/NFKC normalizers (ICU Normalizer2: Qwen2.5 normalizes to NFC)
  libsimdjson-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  zlib1g-dev libzstd-dev
  libgtest-dev libgmock-dev                    # the configure step finds them (the tests' framework)
  libopenmpi-dev openmpi-bin                   # MPI: the parallel runtime's communicator, mpirun
  fortunes fortunes-zh jq   # the demo's English and Chinese text, and its JSONL conversion (scripts/demo.sh)
)
# What the tests and benches need besides (scripts/test.sh).
TEST_PACKAGES=(
  sentencepiece         # spm_train / spm_encode: the tests' independent tokenizer fixtures
  libbenchmark-dev      # the micro-benchmarks under bench/
  libpmix-dev           # srun --mpi=pmix starts OpenMPI ranks under SLURM (the PMIx library it loads)
  slurmctld slurmd slurm-client munge   # a real SLURM cluster on this machine for the slurm tests
  python3-torch python3-numpy python3-sentencepiece   # PyTorch reference
  python3-protobuf      # decodes our TensorBoard event files and SentencePiece models in tests
  libopenblas0-openmp   # a real BLAS for that reference (the default libblas3 is ~15x slower)
  chromium fonts-dejavu-core   # renders `llamatrain report`'s page headless in its browser test
  qemu-user             # runs the binary on CPU models without AVX-512 and without AVX2
  libboost-context-dev  # the CUDA emulation's threads (fibers): the CUDA backend's tests without a GPU
  nodejs                # runs the JavaScript references (Hugging Face tokenizers and Jinja, tiktoken)
  ca-certificates       # npm fetches those references from its registry over TLS
)
# npm installs those references from the registry (tools/reference/js); a nodejs from elsewhere may
# bring its own npm, which Debian's package would conflict with.
command -v npm >/dev/null || TEST_PACKAGES+=(npm)
PACKAGES=("${PROGRAM_PACKAGES[@]}")
[ "${SETUP_TARGET:-}" = llamatrain ] || PACKAGES+=("${TEST_PACKAGES[@]}")

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
  echo "setup: this script installs Debian packages with apt-get, which this machine does not have" >&2
  echo "hint: it is written for Debian 12 (and Ubuntu); elsewhere install the equivalents of:" >&2
  echo "      ${PACKAGES[*]}" >&2
  exit 1
fi

# Installs those of the given packages that are not installed (nothing, silently, when all are).
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  local SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "setup: missing packages ${missing[*]}" >&2
      echo "setup: installing them needs root, got user $(id -un) and no sudo on this machine" >&2
      echo "hint: run as root (su -c 'bash scripts/setup.sh'), or have root install them first" >&2
      exit 1
    fi
    SUDO=(sudo)
  fi
  echo "setup: installing ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

t0=$SECONDS
install_missing "${PACKAGES[@]}"
# Debian 13's sentencepiece.pc requires protobuf-lite, which its libsentencepiece-dev does not depend
# on: without libprotobuf-dev, pkg-config (and so the configure step) cannot find sentencepiece.
if ! pkg-config --exists sentencepiece 2>/dev/null &&
  [[ "$(pkg-config --print-errors --exists sentencepiece 2>&1)" == *"'protobuf"* ]]; then
  install_missing libprotobuf-dev
fi

PRESET=${PRESET:-release}
cmake --preset "$PRESET" ${LLAMATRAIN_WERROR:+"-DLLAMATRAIN_WERROR=$LLAMATRAIN_WERROR"} >/dev/null
# SETUP_TARGET=llamatrain builds the program only (the demo); the default builds tests and benches too.
cmake --build --preset "$PRESET" -j "$(nproc)" ${SETUP_TARGET:+--target "$SETUP_TARGET"}
echo "setup: built build/$PRESET/llamatrain (packages and build $((SECONDS - t0)) s)"
