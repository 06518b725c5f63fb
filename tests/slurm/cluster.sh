#!/usr/bin/env bash
# A real SLURM cluster of 1 or more nodes on this machine, for tests: munged on its own socket and
# key, slurmctld, and one slurmd per node (multiple-slurmd: nodes n1..nN at 127.0.0.1 on their own
# ports, each in its own UTS namespace so that every node has its own hostname). No systemd, no
# cgroups: processes are tracked by /proc (proctrack/linuxproc) and memory limits are enforced by
# polling (jobacct_gather/linux with OverMemoryKill). Everything lives in one folder (config, state,
# spool, sockets, logs); ports are free ones picked at start; traffic stays on loopback. Needs root
# and the Debian packages slurmctld slurmd slurm-client munge (scripts/setup.sh installs them).
#
# As a library (tests source it):
#   source tests/slurm/cluster.sh
#   SLURM_CLUSTER_OWNER=$$           # optional: stop the cluster when this process is gone, even
#                                     # if it is killed with SIGKILL (a detached guard watches it)
#   slurm_cluster_start 2 "$dir"      # exports SLURM_CONF (and the cluster's other variables)
#   trap slurm_cluster_stop EXIT      # stops every daemon it started, by pid
#   sbatch --wait ...; slurm_job_field "$jobid" JobState
# As a program:
#   bash tests/slurm/cluster.sh start 2 DIR   # prints `export SLURM_CONF=...` lines for eval
#   bash tests/slurm/cluster.sh stop DIR
# Knobs (environment, read at start): SLURM_CLUSTER_CPUS (CPUs per node, default 2),
# SLURM_CLUSTER_MEMORY_MB (RealMemory per node, default 2048), SLURM_CLUSTER_EXTRA_CONF (lines
# appended to slurm.conf).

# Exits 77 (ctest's skip code here) with the reason when the machine cannot run the cluster.
slurm_cluster_require() {
  local p missing=""
  for p in munged slurmctld slurmd sbatch srun scontrol unshare; do
    command -v "$p" >/dev/null 2>&1 || missing+=" $p"
  done
  if [ -n "$missing" ]; then
    echo "SKIP: needs$missing (Debian packages munge slurmctld slurmd slurm-client; bash scripts/setup.sh installs them)"
    exit 77
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "SKIP: a SLURM cluster of its own needs root (slurmd starts the job's processes as the job's user)"
    exit 77
  fi
}

# A TCP port on 127.0.0.1 that nobody listens on now, below the kernel's range for outgoing
# connections (a port in that range can be taken by any connection before the daemon binds it), and
# not one handed out before in this shell (the daemons bind theirs only after all are picked). Sets
# SLURM_FREE_PORT (a command substitution would run it in a subshell, which forgets what it gave).
SLURM_PORTS_GIVEN=" "
slurm_free_port() {
  local port low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 12000 ] || low=32768
  while :; do
    port=$((10000 + RANDOM % (low - 10000)))
    [[ "$SLURM_PORTS_GIVEN" != *" $port "* ]] || continue
    if ! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
      SLURM_PORTS_GIVEN+="$port "
      SLURM_FREE_PORT=$port
      return
    fi
  done
}

# slurm_cluster_start NODES DIR: starts the daemons, waits until every node is idle, exports
# SLURM_CONF, SLURM_CLUSTER_DIR and SLURM_CLUSTER_NODES, and writes DIR/env (the same as export lines).
slurm_cluster_start() {
  local nodes=$1 dir=$2 i
  local cpus=${SLURM_CLUSTER_CPUS:-2} mem=${SLURM_CLUSTER_MEMORY_MB:-2048}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  export SLURM_CLUSTER_DIR=$dir SLURM_CLUSTER_NODES=$nodes
  mkdir -p "$dir/munge" "$dir/state" "$dir/log" "$dir/run"
  chmod 700 "$dir/munge"
  : >"$dir/pids"

  # munge: a fresh key, its own socket (slurm's AuthInfo points every daemon and client at it).
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --foreground --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
    --num-threads=2 </dev/null >>"$dir/log/munged.log" 2>&1 &
  echo "munged $!" >>"$dir/pids"

  local ctld_port node_ports=() i
  slurm_free_port; ctld_port=$SLURM_FREE_PORT
  for ((i = 1; i <= nodes; i++)); do slurm_free_port; node_ports+=("$SLURM_FREE_PORT"); done
  {
    echo "ClusterName=llt$$"
    echo "SlurmctldHost=$(hostname -s)(127.0.0.1)"
    echo "SlurmctldPort=$ctld_port"
    echo "SlurmUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$dir/munge/munge.socket"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "TmpFS=$dir/tmp/%n"
    echo "SlurmctldPidFile=$dir/run/slurmctld.pid"
    echo "SlurmdPidFile=$dir/run/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/log/slurmctld.log"
    echo "SlurmdLogFile=$dir/log/slurmd-%n.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core_Memory"
    echo "JobAcctGatherType=jobacct_gather/linux"
    echo "JobAcctGatherParams=OverMemoryKill"
    echo "JobAcctGatherFrequency=task=1"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobCompType=jobcomp/none"
    echo "SlurmdParameters=config_overrides"
    echo "EnforcePartLimits=ALL"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    echo "KillWait=10"
    echo "MinJobAge=600"
    echo "SchedulerType=sched/backfill"
    echo "SlurmdTimeout=60"
    echo "InactiveLimit=0"
    for ((i = 1; i <= nodes; i++)); do
      echo "NodeName=n$i NodeHostname=n$i NodeAddr=127.0.0.1 Port=${node_ports[i - 1]} CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
    [ -z "${SLURM_CLUSTER_EXTRA_CONF:-}" ] || echo "$SLURM_CLUSTER_EXTRA_CONF"
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf

  # munged's socket first: the daemons authenticate every message through it.
  for ((i = 0; i < 100; i++)); do
    [ -S "$dir/munge/munge.socket" ] && break
    sleep 0.05
  done

  slurmctld -D -i -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.stdout" 2>&1 &
  echo "slurmctld $!" >>"$dir/pids"
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$dir/spool/n$i" "$dir/tmp/n$i"
    # Each node its own hostname: OpenMPI names its shared-memory segments after the host, and two
    # ranks on "different" nodes with one name collide there.
    # And its own mount namespace where /sys/fs/cgroup holds only the named "systemd" hierarchy of
    # cgroup v1 over a tmpfs: slurmd 22.05 refuses to start where nothing is mounted there (a chroot, a
    # container) and its cgroup v2 plugin needs systemd's D-Bus; the cluster uses no cgroups (process
    # tracking by /proc, memory limits by polling), so every machine runs it the same way.
    # (--propagation unchanged, then the one mount below made private: in a chroot "/" is no mount
    # point, and unshare's default of making it private fails there.)
    unshare --uts --mount --propagation unchanged /bin/sh -c "mount --make-rprivate \"\$(findmnt -n -o TARGET -T /sys/fs/cgroup)\" &&
      mount -t tmpfs -o size=64k,mode=755 llamatrain-test /sys/fs/cgroup &&
      mkdir /sys/fs/cgroup/systemd && mount -t cgroup -o none,name=systemd llamatrain-test /sys/fs/cgroup/systemd &&
      hostname n$i && exec slurmd -D -N n$i -f '$SLURM_CONF'" \
      </dev/null >>"$dir/log/slurmd-n$i.stdout" 2>&1 &
    echo "slurmd-n$i $!" >>"$dir/pids"
  done

  {
    echo "export SLURM_CONF=$SLURM_CONF"
    echo "export SLURM_CLUSTER_DIR=$dir"
    echo "export SLURM_CLUSTER_NODES=$nodes"
  } >"$dir/env"

  [ -z "${SLURM_CLUSTER_OWNER:-}" ] || slurm_cluster_guard "$SLURM_CLUSTER_OWNER" "$dir"

  # Ready when sinfo lists every node idle.
  local idle
  for ((i = 0; i < 300; i++)); do
    idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" = "$nodes" ] && return 0
    sleep 0.1
  done
  echo "slurm_cluster_start: the nodes did not become idle within 30 s; logs in $dir/log:" >&2
  sinfo -N -l >&2 || true
  tail -n 20 "$dir"/log/*.log >&2 || true
  return 1
}

# Pids of the processes that carry this cluster's SLURM_CONF in their environment: its slurmds'
# step daemons (slurmstepd) and the jobs' tasks, which outlive a stopped slurmd.
slurm_cluster_processes() {
  local dir=$1 e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "SLURM_CONF=$dir/slurm.conf" && echo "$pid"
  done
  return 0
}

# slurm_cluster_guard OWNER_PID DIR: a detached process (not a child of the caller, so a test runner
# that kills the test's process tree on a timeout does not reach it) that stops the cluster once
# OWNER_PID is gone, and ends by itself once the cluster has been stopped.
slurm_cluster_guard() {
  ( env -u SLURM_CONF setsid bash -c 'source "$1"
      while kill -0 "$2" 2>/dev/null && [ -s "$3/pids" ]; do sleep 1; done
      slurm_cluster_stop "$3"' slurm-cluster-guard "${BASH_SOURCE[0]}" "$1" "$2" </dev/null >/dev/null 2>&1 & )
}

# slurm_cluster_stop [DIR]: cancels the cluster's jobs, then ends the daemons started in DIR
# (default $SLURM_CLUSTER_DIR) by pid, and whatever is left of a job there.
slurm_cluster_stop() {
  local dir=${1:-${SLURM_CLUSTER_DIR:-}} name n pid i alive
  [ -n "$dir" ] && [ -f "$dir/pids" ] && [ -s "$dir/pids" ] || return 0
  SLURM_CONF=$dir/slurm.conf scancel --quiet --user=root >/dev/null 2>&1 || true
  for ((i = 0; i < 30; i++)); do
    [ -z "$(SLURM_CONF=$dir/slurm.conf squeue -h -t running,completing -o %i 2>/dev/null)" ] && break
    sleep 0.2
  done
  # slurmds first, then the controller, then munge.
  for name in slurmd slurmctld munged; do
    while read -r n pid; do
      case $n in $name*) kill -TERM "$pid" 2>/dev/null || true ;; esac
    done <"$dir/pids"
    for ((i = 0; i < 50; i++)); do
      alive=0
      while read -r n pid; do
        case $n in $name*) if kill -0 "$pid" 2>/dev/null; then alive=1; fi ;; esac
      done <"$dir/pids"
      [ $alive = 0 ] && break
      sleep 0.1
    done
    while read -r n pid; do
      case $n in $name*) kill -KILL "$pid" 2>/dev/null || true ;; esac
    done <"$dir/pids"
  done
  for pid in $(slurm_cluster_processes "$dir"); do kill -KILL "$pid" 2>/dev/null || true; done
  : >"$dir/pids"
}

# slurm_job_field JOBID FIELD: one field of `scontrol show job` (JobState, ExitCode, Restarts, ...).
slurm_job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# slurm_wait_job JOBID [TIMEOUT_S]: waits until the job has ended (COMPLETED, FAILED, CANCELLED,
# TIMEOUT, OUT_OF_MEMORY, NODE_FAIL); prints its final state. Returns 1 on timeout.
slurm_wait_job() {
  local job=$1 timeout=${2:-300} state i
  for ((i = 0; i < timeout * 5; i++)); do
    state=$(slurm_job_field "$job" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | OUT_OF_MEMORY | NODE_FAIL | PREEMPTED | BOOT_FAIL | DEADLINE)
        echo "$state"
        return 0 ;;
    esac
    sleep 0.2
  done
  echo "${state:-UNKNOWN}"
  return 1
}

# slurm_wait_job_state JOBID STATE [TIMEOUT_S]: waits until the job is in STATE (e.g. RUNNING).
slurm_wait_job_state() {
  local job=$1 want=$2 timeout=${3:-120} i
  for ((i = 0; i < timeout * 5; i++)); do
    [ "$(slurm_job_field "$job" JobState)" = "$want" ] && return 0
    sleep 0.2
  done
  return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case ${1:-} in
    start)
      slurm_cluster_require
      slurm_cluster_start "${2:?nodes}" "${3:?dir}" >&2
      cat "$SLURM_CLUSTER_DIR/env" ;;
    stop) slurm_cluster_stop "${2:?dir}" ;;
    *)
      echo "usage: bash $0 start NODES DIR | stop DIR" >&2
      exit 2 ;;
  esac
fi
