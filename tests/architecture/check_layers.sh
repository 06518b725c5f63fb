#!/usr/bin/env bash
# Every #include "..." in src/ against the layer table: a file may include its own layer and the
# layers below it that its layer uses, and from kernels/cpu only ops.h (the rest of that folder is
# internal to it, its tests and benches; model/machine.cpp alone wraps its matmul chooser and peak
# probe for the layers above). Prints each include against the grain with file and line, and exits 1
# if there is one. The link-time twin is the layer_check_* executables.
#
# The table is written once, in CMakeLists.txt: each `llamatrain_layer(NAME FOLDER LAYERS ...)` call
# names a layer's folder under src/ and the layers it links. This script reads it from there, and
# fails where docs/architecture.md's "| layer | may use |" table says otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."

# NAME FOLDER USED-NAME... per llamatrain_layer call (a call may span lines; a layer defined twice,
# once per build choice, must say the same both times).
layer_calls() {
  tr '\n' ' ' < CMakeLists.txt | grep -o 'llamatrain_layer([^)]*)' | grep -v '^llamatrain_layer(name ' |
    sed 's/^llamatrain_layer(//; s/)$//' |
    awk '{ printf "%s %s", $1, $2; on = 0
           for (i = 3; i <= NF; i++) {
             if ($i == "LAYERS") { on = 1; continue }
             if ($i ~ /^(PUBLIC|PRIVATE|SOURCES|STUB|EXCLUDE)$/) on = 0
             else if (on) printf " %s", $i
           }
           printf "\n" }'
}

declare -A dir_of=() uses=()
while read -r name dir used; do
  dir_of[$name]=$dir
done < <(layer_calls)
while read -r name dir used; do
  list=""
  for u in $used; do
    [ -n "${dir_of[$u]+x}" ] || { echo "CMakeLists.txt: layer $name uses $u, which is no llamatrain_layer"; exit 1; }
    list="$list ${dir_of[$u]}"
  done
  list=${list# }
  if [ -n "${uses[$dir]+x}" ] && [ "${uses[$dir]}" != "$list" ]; then
    echo "CMakeLists.txt: layer $name is defined twice with different layers (${uses[$dir]} / $list)"
    exit 1
  fi
  uses[$dir]=$list
done < <(layer_calls)
[ "${#uses[@]}" -gt 0 ] || { echo "CMakeLists.txt: no llamatrain_layer calls found"; exit 1; }

# docs/architecture.md's table, one row per group of layers that use the same ones.
bad=0
declare -A documented=()
while IFS='|' read -r _ left right _; do
  right=$(echo "$right" | sed 's/—//; s/,/ /g' | xargs -n1 2>/dev/null | sort | xargs || true)
  for d in $(echo "$left" | tr ',' ' '); do
    documented[$d]=1
    want=$(echo "${uses[$d]:-}" | xargs -n1 2>/dev/null | sort | xargs || true)
    if [ -z "${uses[$d]+x}" ]; then
      echo "docs/architecture.md: layer $d is not a llamatrain_layer of CMakeLists.txt"; bad=1
    elif [ "$right" != "$want" ]; then
      echo "docs/architecture.md: layer $d may use \"$right\", but CMakeLists.txt links \"$want\""; bad=1
    fi
  done
done < <(sed -n '/^| layer | may use |$/,/^$/p' docs/architecture.md | tail -n +3 | grep '^|')
for d in "${!uses[@]}"; do
  [ -n "${documented[$d]+x}" ] ||
    { echo "docs/architecture.md: the layer table lacks $d (CMakeLists.txt links it)"; bad=1; }
done

layer_of() {  # src-relative path -> layer
  case "$1" in
    kernels/*) echo "$1" | cut -d/ -f1-2 ;;
    *) echo "${1%%/*}" ;;
  esac
}

files=0
while IFS= read -r file; do
  files=$((files + 1))
  rel=${file#src/}
  from=$(layer_of "$rel")
  if [ -z "${uses[$from]+x}" ]; then
    echo "$file: folder $from is not a layer; add a llamatrain_layer call to CMakeLists.txt and a row to docs/architecture.md"
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
         ! { [ "$file" = src/model/machine.cpp ] && [[ "$inc" == kernels/cpu/matmul_*.h ]]; }; then
      echo "$file:$line: includes \"$inc\", internal to kernels/cpu (outside it, include kernels/cpu/ops.h)"
      bad=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
           sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/' || true)
done < <(find src -name '*.h' -o -name '*.cpp' -o -name '*.cu' | sort)
[ "$files" -gt 0 ] || { echo "no sources found under src/"; exit 1; }
[ "$bad" -eq 0 ] && echo "layers: $files files, every include along the grain"
exit "$bad"
