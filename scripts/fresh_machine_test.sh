#!/usr/bin/env bash
# Proves the README's setup on a fresh machine: builds a bare Debian 12 (bookworm, minbase) root
# (or another release, --suite) with debootstrap, puts a clean `git clone` of this checkout's HEAD in it (uncommitted changes are
# NOT tested), and runs the README's two commands there as root in a chroot: `bash scripts/demo.sh`,
# then `bash scripts/test.sh`. It fails if either fails or if any test was skipped (on the machine
# setup.sh prepares, every test must run). It prints each step's duration and ends with ctest's
# summary line. The root itself, /proc, /sys (with the host's cgroups), /dev, /dev/pts and /dev/shm are mounted in a private mount namespace
# and unmounted on every exit path, Ctrl-C included. Needs root, ~4 GB free (it uses ~2.5 GB) and
# a Debian mirror. Details and the last result: docs/development.md.
#
# Usage: sudo bash scripts/fresh_machine_test.sh [options]
#   --workdir DIR        root, cached base tarball and logs (default /var/tmp/llamatrain-fresh-machine)
#   --keep               keep the root after the run (default: removed; the base tarball always stays)
#   --reuse              start from the root a --keep run left (packages already installed): faster,
#                        for iterating on a fix, but not a fresh-machine result (the summary says so)
#   --new-base           debootstrap again instead of unpacking the cached base tarball
#   --mirror URL         mirror for debootstrap and standard sources (default http://deb.debian.org/debian)
#   --apt-sources host|debian
#                        the root's apt sources: the host's (default when the host runs the same
#                        release) or the standard SUITE, SUITE-updates and SUITE-security from --mirror
#   --suite NAME         the Debian release of the root (default bookworm; e.g. trixie)
#   --cxx g++-N          build with that GCC (installs Debian's g++-N and gcc-N in the root first and
#                        sets CXX and CC), e.g. --cxx g++-13 on trixie, a newer compiler's warnings;
#                        when it is not the release's default GCC, links against the default's libstdc++
#   --werror             warnings are errors in both commands (LLAMATRAIN_WERROR=ON, as in CI)
#   --bundle DIR         instead of the two commands, the GPU machine's case: the root gets only a
#                        compiler, CMake, ninja, pkg-config and python3, the library bundle DIR
#                        (scripts/device_bundle.sh make DIR) as .devdeps, the host's CUDA toolkit
#                        (/usr/local/cuda, read-only), and runs `bash scripts/device_check.sh --dry-run`:
#                        the CUDA build configured and built from the bundle alone, every later part
#                        shown to start
set -euo pipefail

usage() { sed -n '/^# Usage:/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() {
  echo "fresh_machine_test: $1" >&2
  [ $# -lt 2 ] || echo "hint: $2" >&2
  exit 2
}

WORK=/var/tmp/llamatrain-fresh-machine
KEEP=0
REUSE=0
NEW_BASE=0
MIRROR=http://deb.debian.org/debian
APT_SOURCES=""
SUITE=bookworm
CXX_PKG=""
WERROR=0
BUNDLE=""
ARGS=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --workdir) [ $# -ge 2 ] || die "--workdir needs a folder"; WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --reuse) REUSE=1; shift ;;
    --new-base) NEW_BASE=1; shift ;;
    --mirror) [ $# -ge 2 ] || die "--mirror needs a URL"; MIRROR=$2; shift 2 ;;
    --apt-sources)
      case "${2:-}" in
        host | debian) APT_SOURCES=$2; shift 2 ;;
        *) die "--apt-sources takes host or debian, got '${2:-}'" ;;
      esac ;;
    --suite)
      [[ "${2:-}" =~ ^[a-z]+$ ]] || die "--suite takes a Debian release name such as trixie, got '${2:-}'"
      SUITE=$2; shift 2 ;;
    --cxx)
      [[ "${2:-}" =~ ^g\+\+-[0-9]+$ ]] || die "--cxx takes a Debian GCC package such as g++-13, got '${2:-}'"
      CXX_PKG=$2; shift 2 ;;
    --werror) WERROR=1; shift ;;
    --bundle)
      [ -f "${2:-}/deps.tar.xz" ] && [ -f "${2:-}/env.sh" ] || die "--bundle needs a folder with deps.tar.xz and env.sh, got '${2:-}'" \
        "bash scripts/device_bundle.sh make DIR"
      BUNDLE=$(cd "$2" && pwd); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1'" "see: bash scripts/fresh_machine_test.sh --help" ;;
  esac
done

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, mount, chroot), got user $(id -un)" \
  "sudo bash scripts/fresh_machine_test.sh ${ARGS[*]}"
[ "$REUSE" -eq 0 ] || [ "$NEW_BASE" -eq 0 ] || die "--reuse and --new-base contradict each other"
case "$WORK" in
  /*) ;;
  *) WORK=$PWD/$WORK ;;
esac
[[ "$WORK" =~ ^[A-Za-z0-9/._-]+$ ]] || die "the work folder must be a plain path, got '$WORK'" \
  "choose one made of letters, digits and / . _ -"
[ "$WORK" != / ] || die "the work folder cannot be /"
ROOT=$WORK/root
BASE=$WORK/$SUITE-minbase.tar
LOGS=$WORK/logs
SRC=$(cd "$(dirname "$0")/.." && pwd)

# Everything below runs in a private mount namespace: the chroot's mounts are invisible to the host
# and vanish with this process even if it is killed. The trap unmounts them explicitly as well.
if [ -z "${LLAMATRAIN_FRESH_NAMESPACE:-}" ]; then
  command -v unshare >/dev/null || die "needs unshare (Debian package util-linux)"
  LLAMATRAIN_FRESH_NAMESPACE=1 exec unshare --mount --propagation private -- "$BASH" "$0" "${ARGS[@]}"
fi

log() { echo "fresh_machine_test: $*"; }

# Mount points under $ROOT, deepest first (also those an interrupted earlier run left behind).
mounts_under_root() {
  awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
unmount_all() {
  local m
  for m in $(mounts_under_root); do umount "$m" 2>/dev/null || umount -l "$m" || true; done
}
# Processes left running inside the root (a build interrupted by Ctrl-C), ended by id.
stop_root_processes() {
  local sig p pids
  for sig in TERM KILL; do
    pids=()
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill "-$sig" "${pids[@]}" 2>/dev/null || true
    sleep 2
  done
}
remove_root() {
  [ -e "$ROOT" ] || return 0
  unmount_all
  [ -z "$(mounts_under_root)" ] || die "refusing to delete $ROOT: still mounted there: $(mounts_under_root)" \
    "unmount them (umount -l PATH), then run again"
  rm -rf --one-file-system "$ROOT"
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  stop_root_processes
  unmount_all
  if [ "$KEEP" -eq 1 ]; then
    [ ! -e "$ROOT" ] || log "kept the root: $ROOT (rerun with --reuse to start from it)"
  else
    remove_root
  fi
  exit "$rc"
}
# The work folder is ours alone: marked on first use (a non-empty unmarked folder is refused, since
# its root/ gets deleted) and locked for the run (two runs would stop each other's processes).
# Both before the trap, which deletes the root.
if [ ! -f "$WORK/.llamatrain-fresh-machine" ]; then
  [ ! -e "$WORK" ] || [ -z "$(ls -A "$WORK")" ] ||
    die "refusing to use $WORK: not empty and not a fresh_machine_test work folder" "pass --workdir NEW_FOLDER"
  mkdir -p "$WORK"
  touch "$WORK/.llamatrain-fresh-machine"
fi
exec 9>"$WORK/.lock"
flock -n 9 || die "another fresh_machine_test run is using $WORK" "wait for it, or pass another --workdir"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$LOGS"
rm -f "$BASE.partial"
stop_root_processes  # what a killed earlier run left running in the root
unmount_all
command -v git >/dev/null || die "needs git on the host to clone the checkout"
if ! command -v debootstrap >/dev/null; then
  command -v apt-get >/dev/null || die "needs debootstrap, and this host has no apt-get to install it" \
    "install debootstrap with your package manager"
  log "installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
fi
free_kb=$(df -Pk "$WORK" | awk 'NR == 2 { print $4 }')
[ "$free_kb" -ge $((4 * 1024 * 1024)) ] || die "needs ~4 GB free in $WORK, got $((free_kb / 1024)) MB" \
  "free some space or pass --workdir on another disk"

# ---- the root: bare debootstrap (cached as a tarball), or the one a --keep run left -------------
t0=$SECONDS
if [ "$REUSE" -eq 1 ]; then
  [ -f "$ROOT/.llamatrain-fresh-root" ] || die "no kept root in $ROOT to reuse" "run once with --keep first"
  kept_suite=$(cat "$ROOT/.llamatrain-fresh-root")
  [ "${kept_suite:-bookworm}" = "$SUITE" ] || die "the kept root is $kept_suite, not $SUITE" \
    "pass --suite ${kept_suite:-bookworm}, or drop --reuse"
  base_step="reused the root a --keep run left"
else
  remove_root
  if [ "$NEW_BASE" -eq 1 ] || [ ! -f "$BASE" ]; then
    log "debootstrap --variant=minbase $SUITE from $MIRROR (log: $LOGS/debootstrap.log)"
    if ! debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 9>&-; then
      tail -n 20 "$LOGS/debootstrap.log" >&2
      die "debootstrap failed (log: $LOGS/debootstrap.log)" "check that $MIRROR is reachable, or pass --mirror"
    fi
    tar -C "$ROOT" --numeric-owner -cpf "$BASE.partial" . && mv "$BASE.partial" "$BASE"
    base_step="debootstrap (bare $SUITE minbase, cached as $BASE)"
  else
    mkdir -p "$ROOT"
    tar -C "$ROOT" --numeric-owner -xpf "$BASE"
    base_step="unpacked the cached bare debootstrap $BASE (--new-base to redo it)"
  fi
  echo "$SUITE" >"$ROOT/.llamatrain-fresh-root"
fi
t_base=$((SECONDS - t0))
log "root ready in ${t_base} s: $base_step"

# ---- apt sources and DNS from the host --------------------------------------------------------
if [ -z "$APT_SOURCES" ]; then
  APT_SOURCES=debian
  if [ -r /etc/os-release ] && grep -q "^VERSION_CODENAME=$SUITE\$" /etc/os-release &&
    grep -q '^ID=debian$' /etc/os-release; then APT_SOURCES=host; fi
fi
rm -rf "$ROOT/etc/apt/sources.list.d" "$ROOT/etc/apt/sources.list"
mkdir -p "$ROOT/etc/apt/sources.list.d"
if [ "$APT_SOURCES" = host ]; then
  [ ! -f /etc/apt/sources.list ] || cp /etc/apt/sources.list "$ROOT/etc/apt/"
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ ! -f "$f" ] || cp "$f" "$ROOT/etc/apt/sources.list.d/"
  done
else
  security=${MIRROR%/debian}/debian-security
  [ "$security" != "$MIRROR/debian-security" ] || security=http://deb.debian.org/debian-security
  cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
rm -f "$ROOT/etc/resolv.conf"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's /etc/hosts too: without one, resolving the machine's own name (OpenMPI's mpirun does, for
# every rank) waits for DNS timeouts.
cp -L /etc/hosts "$ROOT/etc/hosts"
# The network's own CA certificates too (a TLS-inspecting proxy's, which this machine lists under
# /usr/local/share/ca-certificates): a machine on this network has them, and without them npm cannot
# reach its registry from the root. Debian's ca-certificates adds them to the system list when it is
# installed (setup.sh); a root that already has the package gets them now.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$ROOT/usr/local/share/ca-certificates"
  cp -L /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  [ ! -x "$ROOT/usr/sbin/update-ca-certificates" ] || chroot "$ROOT" update-ca-certificates >/dev/null 2>&1 || true
fi

# ---- a clean clone of HEAD ------------------------------------------------------------------
sha=$(git -C "$SRC" rev-parse HEAD)
dirty=$(git -C "$SRC" status --porcelain --untracked-files=no | wc -l)
[ "$dirty" -eq 0 ] || log "note: $dirty changed tracked file(s) are NOT tested: the root gets a clone of HEAD ${sha:0:10}"
rm -rf --one-file-system "$ROOT/llamatrain"
git clone -q --no-checkout "$SRC" "$ROOT/llamatrain"
git -C "$ROOT/llamatrain" -c advice.detachedHead=false checkout -q --detach "$sha" ||
  die "the clone lacks HEAD $sha" "commit on a branch, then run again"

# ---- the two commands, in the chroot ----------------------------------------------------------
# As on a machine: the root is a mount point (unshare --mount makes it private), and the cgroup
# hierarchies systemd mounts are there (the host's, as a container sees them).
mount --bind "$ROOT" "$ROOT"
mount -t proc proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
if mountpoint -q /sys/fs/cgroup; then mount --rbind /sys/fs/cgroup "$ROOT/sys/fs/cgroup"; fi
mount --bind /dev "$ROOT/dev"
mount --bind /dev/pts "$ROOT/dev/pts"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$ROOT/dev/shm"

# A login-like environment: nothing from the host's shell leaks in, except a proxy if one is set.
in_root() {
  local env=(HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  [ -z "$CXX_PKG" ] || env+=("CXX=$CXX_PKG" "CC=gcc-${CXX_PKG#g++-}")
  [ -z "$LINK_DIR" ] || env+=("LDFLAGS=-L$LINK_DIR")
  [ "$WERROR" -eq 0 ] || env+=(LLAMATRAIN_WERROR=ON)
  local v
  for v in http_proxy https_proxy no_proxy; do [ -z "${!v:-}" ] || env+=("$v=${!v}"); done
  chroot "$ROOT" /usr/bin/env -i "${env[@]}" /bin/bash -c "cd /llamatrain && $1" 9>&-  # not the lock
}

t_cxx=0
LINK_DIR=""
if [ -n "$CXX_PKG" ]; then
  t0=$SECONDS
  log "installing $CXX_PKG and gcc-${CXX_PKG#g++-} in the root (log: $LOGS/cxx.log)"
  in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    $CXX_PKG gcc-${CXX_PKG#g++-} g++" >"$LOGS/cxx.log" 2>&1 ||
    die "could not install $CXX_PKG in the $SUITE root (log: $LOGS/cxx.log)" "check that $SUITE has that package"
  # Debian builds its C++ libraries (oneDNN, ...) with the release's default GCC; an older g++-N's
  # own libstdc++.so lacks the newer symbols they need, so link against the default's (the one the
  # machine runs with anyway).
  default_major=$(in_root "g++ -dumpversion" 2>/dev/null | cut -d. -f1)
  if [ -n "$default_major" ] && [ "$default_major" != "${CXX_PKG#g++-}" ]; then
    LINK_DIR=/usr/lib/gcc/x86_64-linux-gnu/$default_major
  fi
  t_cxx=$((SECONDS - t0))
fi

if [ -n "$BUNDLE" ]; then
  # The GPU machine's case: its tools, the bundle, the toolkit; the device check's dry run.
  t0=$SECONDS
  log "installing the GPU machine's tools in the root (log: $LOGS/tools.log)"
  in_root "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    g++ cmake ninja-build pkg-config python3 xz-utils" >"$LOGS/tools.log" 2>&1 ||
    die "could not install the build tools in the root (log: $LOGS/tools.log)"
  mkdir -p "$ROOT/llamatrain/.devdeps"
  cp "$BUNDLE/deps.tar.xz" "$BUNDLE/env.sh" "$ROOT/llamatrain/.devdeps/"
  [ ! -f "$BUNDLE/MANIFEST" ] || cp "$BUNDLE/MANIFEST" "$ROOT/llamatrain/.devdeps/"
  if [ -d /usr/local/cuda/ ]; then
    mkdir -p "$ROOT/usr/local/cuda"
    mount --bind -o ro "$(readlink -f /usr/local/cuda)" "$ROOT/usr/local/cuda"
  fi
  t_tools=$((SECONDS - t0))
  t0=$SECONDS
  log "running: bash scripts/device_check.sh --dry-run (log: $LOGS/device_check.log)"
  check_rc=0
  in_root "OUT=/llamatrain/device_check_out bash scripts/device_check.sh --dry-run" 2>&1 |
    tee "$LOGS/device_check.log" &
  wait $! || check_rc=$?
  rm -rf "$LOGS/device_check_out"
  cp -r "$ROOT/llamatrain/device_check_out" "$LOGS/" 2>/dev/null || true
  echo
  echo "==== bundle test: $(date -u '+%Y-%m-%d %H:%M UTC') (the check's logs: $LOGS/device_check_out)"
  echo "checkout:    ${sha:0:10}; bundle $BUNDLE ($(du -h "$BUNDLE/deps.tar.xz" | cut -f1))"
  echo "root:        Debian $SUITE with $(in_root "g++ --version | head -n 1" 2>/dev/null), cmake, ninja, pkg-config, python3; CUDA $([ -d /usr/local/cuda/ ] && echo "from the host" || echo "none")"
  printf '%-32s %6d s\n' "root" "$t_base" "tools" "$t_tools" "device_check.sh --dry-run" "$((SECONDS - t0))"
  [ "$check_rc" -eq 0 ] && echo "bundle test: ok" || echo "bundle test: FAILED (exit $check_rc)"
  exit "$check_rc"
fi

JUNIT=build/release/test-results.xml
t0=$SECONDS
log "running: bash scripts/demo.sh (log: $LOGS/demo.log)"
demo_rc=0
# In the background and waited for: bash runs a trap only once a foreground command ends, so a TERM
# sent to this script alone would wait out the whole step; `wait` returns at once (the pipeline's
# status under pipefail), and the trap's cleanup stops what runs in the root.
in_root "bash scripts/demo.sh" 2>&1 | tee "$LOGS/demo.log" &
wait $! || demo_rc=$?
t_demo=$((SECONDS - t0))
compiler=$(in_root "\${CXX:-g++} --version | head -n 1" 2>/dev/null || echo unknown)

t0=$SECONDS
test_rc=0
if [ "$demo_rc" -eq 0 ]; then
  log "running: bash scripts/test.sh (log: $LOGS/test.log)"
  in_root "bash scripts/test.sh" 2>&1 | tee "$LOGS/test.log" &
  wait $! || test_rc=$?
fi
t_test=$((SECONDS - t0))

skipped_rc=0
skipped=""
if [ "$demo_rc" -eq 0 ] && [ -f "$ROOT/llamatrain/$JUNIT" ]; then
  skipped=$(bash "$ROOT/llamatrain/scripts/skipped_tests.sh" "$ROOT/llamatrain/$JUNIT") || skipped_rc=$?
fi
summary=$(grep -E '^[0-9]+% tests passed' "$LOGS/test.log" 2>/dev/null | tail -n 1 || true)

echo
echo "==== fresh machine test: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "host:        $(uname -srm), $(nproc) cores, $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown OS}")"
echo "checkout:    ${sha:0:10} (clean clone of HEAD$([ "$dirty" -eq 0 ] || echo "; $dirty uncommitted change(s) not included"))"
echo "root:        Debian $SUITE; compiler: $compiler; warnings are errors: $([ "$WERROR" -eq 1 ] && echo yes || echo no)$([ -z "$LINK_DIR" ] || echo "; links libstdc++ from $LINK_DIR")"
echo "apt sources: $APT_SOURCES"
if [ "$REUSE" -eq 1 ]; then echo "NOTE:        reused a kept root: NOT a fresh-machine result"; fi
printf '%-32s %6d s  %s\n' "root" "$t_base" "$base_step"
[ -z "$CXX_PKG" ] || printf '%-32s %6d s  %s\n' "install $CXX_PKG" "$t_cxx" ok
printf '%-32s %6d s  %s\n' "bash scripts/demo.sh" "$t_demo" "$([ "$demo_rc" -eq 0 ] && echo ok || echo "FAILED (exit $demo_rc)")"
if [ "$demo_rc" -eq 0 ]; then
  printf '%-32s %6d s  %s\n' "bash scripts/test.sh" "$t_test" "$([ "$test_rc" -eq 0 ] && echo ok || echo "FAILED (exit $test_rc)")"
else
  echo "bash scripts/test.sh             not run (the demo failed; see $LOGS/demo.log)"
fi
if [ "$skipped_rc" -ne 0 ]; then
  echo "skipped tests (setup.sh should have installed what they need):"
  echo "$skipped"
elif [ "$demo_rc" -eq 0 ]; then
  echo "skipped tests: none"
fi
[ -z "$summary" ] || echo "$summary"
[ "$demo_rc" -eq 0 ] && [ "$test_rc" -eq 0 ] && [ "$skipped_rc" -eq 0 ] && [ -n "$summary" ]
