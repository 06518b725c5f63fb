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

# The package lists: scripts/packages.sh (also read by scripts/device_bundle.sh).
# shellcheck source=scripts/packages.sh
source scripts/packages.sh
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
