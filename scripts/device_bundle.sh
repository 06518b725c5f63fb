#!/usr/bin/env bash
# The build's libraries for a machine that reaches no package registry (the GPU test machine: Ubuntu
# 24.04 with g++, CMake, ninja and the CUDA toolkit, nothing else of ours), as one folder that travels
# with the working tree (`run`'s carry: at most 64 MiB).
#
#   bash scripts/device_bundle.sh make [DIR]   # on a Debian 12 machine with apt: writes DIR (default
#                                              # .devdeps, ignored by git): deps.tar.xz, env.sh, MANIFEST
#   source DIR/env.sh                          # on the target: unpacks once into $LLAMATRAIN_DEPS
#                                              # (default /tmp/llamatrain-deps) and sets the paths
#   bash scripts/fresh_machine_test.sh --bundle DIR   # the proof: a bare Debian root with only a
#                                              # compiler, CMake and ninja configures, builds and tests
#                                              # the CUDA build from the bundle alone
#
# What it holds: scripts/packages.sh's LIBRARY_PACKAGES and sentencepiece (the tests' spm_train),
# with every package they pull in on a machine that has nothing, less what every Debian or Ubuntu
# system has (priority required or important, and the base system's libraries: zlib, zstd, PAM,
# SELinux, ...), the toolchain (gcc, binutils, libc and libstdc++: the target's own must win), Perl,
# Python, TLS and X11 libraries; unpacked, without docs or static
# libraries (but GoogleTest's, which its CMake files name), and compressed. The libraries come first
# on LD_LIBRARY_PATH in a shell that sources env.sh: run other programs (PyTorch) with
# LLAMATRAIN_DEPS_SAVED_LD_LIBRARY_PATH restored (scripts/device_check.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "device_bundle: $1" >&2
  [ $# -lt 2 ] || echo "hint: $2" >&2
  exit 2
}

make_bundle() {
  local dir=${1:-.devdeps}
  command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "make needs a Debian machine (apt-get, dpkg-deb)" "run it on Debian 12, where setup.sh runs"
  # shellcheck source=scripts/packages.sh
  source scripts/packages.sh
  local want=("${LIBRARY_PACKAGES[@]}" sentencepiece)
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  # Everything an install on a machine without a single package would bring (apt's own choice of
  # alternatives), from an empty package status.
  : >"$work/status"
  apt-get -o Dir::State::status="$work/status" install -s -q --no-install-recommends "${want[@]}" >"$work/sim.txt" 2>&1 ||
    { cat "$work/sim.txt" >&2; die "apt cannot resolve the packages" "apt-get update, then run again"; }
  local skip='^(gcc|g\+\+|cpp|gfortran|libgfortran.*-dev|libgcc|libstdc\+\+|libasan|libtsan|liblsan|libubsan|libhwasan|libitm|'
  skip+='libquadmath|libgomp|libatomic|libcc1|binutils|libbinutils|libctf|libgprofng|libjansson|libisl|libmpc|libmpfr|'
  skip+='libgmp|libc6|libc-dev-bin|linux-libc-dev|libcrypt|rpcsvc-proto|libnsl|python3|libpython|perl|libperl|'
  skip+='autoconf|automake|autotools-dev|m4|libtool|make|dpkg-dev|libdpkg-perl|patch|xz-utils|bzip2|install-info|'
  skip+='libssl|openssl|ca-certificates|libkrb5|libk5crypto|libcom-err|libkeyutils|libgssapi|openssh|libfido2|libcbor|'
  skip+='libedit|libbsd|libmd0|libx11-data|libxml2|icu-devtools|libsqlite|libreadline|readline-common|libexpat|'
  skip+='media-types|netbase|tzdata|libdb5|libgdbm|libffi|sensible-utils|libjs-|'
  # the base system's own libraries, which every Debian and Ubuntu root has (Ubuntu's newer builds of
  # them must not be shadowed), and hwloc's optional plugins (the X11 and NVIDIA control libraries)
  skip+='zlib1g$|liblzma5|libbz2|libzstd1|libacl1|libaudit|libcap-ng|libpam0g|libselinux|libsemanage|libsepol|libtinfo|'
  skip+='libudev1|libuuid1|libpcre2-8-0|libtirpc-common|libtirpc3|libx11|libxau|libxcb|libxdmcp|libxext|libxnvctrl|'
  skip+='libhwloc-plugins)'
  local pkgs=() p prio
  while read -r p; do
    prio=$(apt-cache show --no-all-versions "$p" 2>/dev/null | awk '/^Priority:/ { print $2; exit }')
    [[ "$prio" =~ ^(required|important)$ ]] && continue
    [[ "$p" =~ $skip ]] && continue
    pkgs+=("$p")
  done < <(awk '/^Inst / { print $2 }' "$work/sim.txt" | sort -u)
  echo "device_bundle: ${#pkgs[@]} packages: ${pkgs[*]}"
  (cd "$work" && apt-get download -q "${pkgs[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  mkdir -p "$work/tree"
  local deb
  : >"$work/MANIFEST"
  for deb in "$work"/*.deb; do
    dpkg-deb -x "$deb" "$work/tree"
    dpkg-deb -f "$deb" Package Version Installed-Size | tr '\n' ' ' >>"$work/MANIFEST"
    echo >>"$work/MANIFEST"
  done
  rm -rf "$work"/tree/usr/share/{doc,man,info,lintian,locale,bug} "$work"/tree/etc/{init.d,cron.*}
  # /lib into /usr/lib, as a merged-/usr system has them (one folder for the loader and CMake).
  if [ -d "$work/tree/lib" ]; then
    mkdir -p "$work/tree/usr/lib"
    cp -a "$work/tree/lib/." "$work/tree/usr/lib/"
    rm -rf "$work/tree/lib"
  fi
  # What Debian's update-alternatives would make at install: Open MPI as the MPI (its wrappers, mpirun,
  # libmpi.so, the mpi include folder and .pc files), as relative links.
  local t=$work/tree
  for p in mpicc:mpicc mpicxx:mpic++ mpiCC:mpic++ mpic++:mpic++ mpirun:mpirun mpiexec:mpiexec; do
    [ -e "$t/usr/bin/${p#*:}.openmpi" ] && ln -sfn "${p#*:}.openmpi" "$t/usr/bin/${p%%:*}"
  done
  ln -sfn openmpi/lib/libmpi.so "$t/usr/lib/x86_64-linux-gnu/libmpi.so"
  ln -sfn ompi.pc "$t/usr/lib/x86_64-linux-gnu/pkgconfig/mpi.pc"
  ln -sfn ompi-c.pc "$t/usr/lib/x86_64-linux-gnu/pkgconfig/mpi-c.pc"
  mkdir -p "$t/usr/include/x86_64-linux-gnu"
  ln -sfn ../../lib/x86_64-linux-gnu/openmpi/include "$t/usr/include/x86_64-linux-gnu/mpi"
  find "$work/tree" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete
  # A -dev package's link to a library the bundle leaves to the system (zlib, zstd, PCRE2's 8-bit
  # library): to the system's soname, which any Debian or Ubuntu has whatever its version.
  local l target
  while read -r l; do
    target=$(readlink "$l")
    [[ "$target" = /* ]] || [ ! -e "$(dirname "$l")/$target" ] || continue
    [[ "$(basename "$target")" =~ ^(lib.*\.so\.[0-9]+) ]] || continue
    ln -sfn "/usr/lib/x86_64-linux-gnu/${BASH_REMATCH[1]}" "$l"
  done < <(find "$work/tree" -type l -name 'lib*.so')
  mkdir -p "$dir"
  rm -f "$dir"/*.deb  # (an earlier recipe's files)
  tar -C "$work/tree" -cf - . | xz -T0 -6 >"$dir/deps.tar.xz.partial"
  mv "$dir/deps.tar.xz.partial" "$dir/deps.tar.xz"
  { echo "# made $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME") by scripts/device_bundle.sh"
    sort "$work/MANIFEST"; } >"$dir/MANIFEST"
  cp scripts/device_bundle_env.sh "$dir/env.sh"
  echo "device_bundle: $dir/deps.tar.xz $(du -h "$dir/deps.tar.xz" | cut -f1), ${#pkgs[@]} packages (MANIFEST)"
  [ "$(stat -c %s "$dir/deps.tar.xz")" -lt $((60 << 20)) ] ||
    echo "device_bundle: warning: over 60 MiB: the device tool carries 64 MiB at most" >&2
}

case "${1:-}" in
  make) shift; make_bundle "$@" ;;
  -h | --help | "") sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown command '$1'" "bash scripts/device_bundle.sh make [DIR]" ;;
esac
