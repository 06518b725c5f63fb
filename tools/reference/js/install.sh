#!/usr/bin/env bash
# Installs the JavaScript references of package.json (pinned versions) into a cache folder once and
# prints that folder; tests then run `node` with NODE_PATH=<folder>/node_modules.
#   dir=$(bash tools/reference/js/install.sh) || exit 77   # 77: the test skips, with the reason on stderr
# The cache is $LLAMATRAIN_JS_CACHE, else ~/.cache/llamatrain/js; it is reused while package.json is
# unchanged. Exit 77 (skip) with the reason when node/npm or the registry is not there.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${LLAMATRAIN_JS_CACHE:-${HOME:-/tmp}/.cache/llamatrain/js}
for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "skip: $tool is not installed (bash scripts/setup.sh installs nodejs and npm)" >&2; exit 77; }
done
# Node trusts its own CA list; let it also trust the system's (a machine behind a TLS-inspecting proxy
# lists that proxy's CA there).
if [ -z "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
fi
stamp=$(sha256sum "$here/package.json" | cut -c1-16)
dir="$cache/$stamp"
if [ ! -f "$dir/.installed" ]; then
  mkdir -p "$cache"
  lock="$cache/.lock"
  exec 9>"$lock"
  flock 9  # tests run in parallel: one installs, the others wait for it
  if [ ! -f "$dir/.installed" ]; then
    tmp=$(mktemp -d "$cache/.tmp.XXXXXX")
    cp "$here/package.json" "$tmp/"
    if ! (cd "$tmp" && timeout 300 npm install --no-audit --no-fund --no-package-lock --loglevel=error >"$tmp/npm.log" 2>&1); then
      echo "skip: npm could not install the JavaScript references (no registry?); last lines of npm's log:" >&2
      tail -5 "$tmp/npm.log" >&2 || true
      rm -rf "$tmp"
      exit 77
    fi
    rm -rf "$dir"
    mv "$tmp" "$dir"
    touch "$dir/.installed"
  fi
fi
echo "$dir"
