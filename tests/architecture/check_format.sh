#!/usr/bin/env bash
# The C++ and CUDA sources git tracks under src/, tests/ and bench/ are as .clang-format writes them.
# Prints the files that are not and the command that fixes them, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null ||
  { echo "needs clang-format (apt-get install clang-format; scripts/setup.sh installs it)"; exit 1; }
mapfile -t files < <(git ls-files 'src/*.h' 'src/*.cpp' 'src/*.cu' 'src/*.cuh' 'src/*.inc' \
                                  'tests/*.h' 'tests/*.cpp' 'bench/*.h' 'bench/*.cpp' 'bench/*.cu')
[ "${#files[@]}" -gt 0 ] || { echo "no sources found (run from a git checkout)"; exit 1; }
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  printf '%s: not as .clang-format writes it\n' "${bad[@]}"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
echo "format: ${#files[@]} files as .clang-format writes them"
