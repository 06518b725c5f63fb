#!/usr/bin/env bash
# Every #include "..." in src/ against the layer table of docs/architecture.md: a file may include its
# own layer and the layers below it that its layer uses, and from kernels/cpu only ops.h (the rest of
# that folder is internal to it, its tests and benches; model/backend.cpp alone wraps its matmul
# chooser and peak probe for the layers above). Prints each include against the grain with
# file and line, and exits 1 if there is one. The link-time twin is the layer_check_* executables.
set -euo pipefail
cd "$(dirname "$0")/../.."

declare -A uses=(
  [core]=""
  [kernels/ref]="core"
  [kernels/cpu]="core"
  [kernels/cuda]="core"
  [parallel]="core"
  [data]="core"
  [model]="core kernels/ref kernels/cpu kernels/cuda parallel"
  [io]="core data model"
  [obs]="core model"
  [eval]="core data model obs"
  [train]="core parallel data model io obs"
  [cli]="core parallel data model io obs eval train"
)
layer_of() {  # src-relative path -> layer
  case "$1" in
    kernels/*) echo "$1" | cut -d/ -f1-2 ;;
    *) echo "${1%%/*}" ;;
  esac
}

bad=0
files=0
while IFS= read -r file; do
  files=$((files + 1))
  rel=${file#src/}
  from=$(layer_of "$rel")
  if [ -z "${uses[$from]+x}" ]; then
    echo "$file: folder $from is not a layer of the table; add it to tests/architecture/check_layers.sh and docs/architecture.md"
    bad=1
    continue
  fi
  while IFS=: read -r line inc; do
    to=$(layer_of "$inc")
    [ "$to" = "$from" ] && continue
    if [[ " ${uses[$from]} " != *" $to "* ]]; then
      echo "$file:$line: includes \"$inc\", but $from may use only: ${uses[$from]:-nothing}"
      bad=1
    elif [ "$to" = kernels/cpu ] && [ "$inc" != kernels/cpu/ops.h ] &&
         ! { [ "$file" = src/model/backend.cpp ] && [[ "$inc" == kernels/cpu/matmul_*.h ]]; }; then
      echo "$file:$line: includes \"$inc\", internal to kernels/cpu (outside it, include kernels/cpu/ops.h)"
      bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/' || true)
done < <(find src -name '*.h' -o -name '*.cpp' -o -name '*.cu' | sort)
[ "$files" -gt 0 ] || { echo "no sources found under src/"; exit 1; }
[ "$bad" -eq 0 ] && echo "layers: $files files, every include along the grain"
exit "$bad"
