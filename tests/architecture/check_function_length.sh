#!/usr/bin/env bash
# No function in src/ runs over 100 lines, so each reads as one idea; the one exception is
# build_schema (src/config/config_schema.cpp), a table of the config's keys, one row a key.
# Function extents come from universal-ctags (CUDA sources read as C++). Prints each long function
# with its length, file and line, and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v ctags >/dev/null && ctags --version 2>/dev/null | grep -q 'Universal Ctags' ||
  { echo "needs universal-ctags (apt-get install universal-ctags; scripts/setup.sh installs it)"; exit 1; }
limit=100
allowed='^build_schema src/config/config_schema.cpp$'
count=0
bad=0
while read -r end start name file; do
  count=$((count + 1))
  len=$((end - start + 1))
  [ "$len" -le "$limit" ] && continue
  echo "$name $file" | grep -qE "$allowed" && continue
  echo "$file:$start: $name is $len lines, over $limit: split it into named steps"
  bad=1
done < <(ctags -R --languages=C++ --map-C++=+.cu --map-C++=+.cuh --kinds-C++=f --fields=+ne -x \
           --_xformat='%{end} %n %N %F' src)
[ "$count" -gt 100 ] || { echo "ctags found only $count functions under src/"; exit 1; }
[ "$bad" -eq 0 ] && echo "function length: $count functions in src/, none over $limit lines but build_schema"
exit "$bad"
