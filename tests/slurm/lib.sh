#!/usr/bin/env bash
# Shared set-up of the SLURM tests (sourced): a private folder removed at exit, the cluster stopped
# on every exit path, the fixture corpus preprocessed, and the environment the launch scripts read.
# Usage: source tests/slurm/lib.sh; slurm_test_setup NODES
# Provides: $SRC (repository), $BIN (llamatrain), $WORK (the folder), $FIXTURE (data prefix),
# fail MESSAGE (prints the job logs and exits 1), expect_in FILE TEXT, submit / submit_wait ARGS,
# rank_pid JOB RANK, start_requeued JOB, curve RUN_DIR, and for `llamatrain diagnose` of a job's logs:
# diagnose_job NAME PATHS, diag_field NAME FILTER, expect_diagnosis NAME CAUSE,
# expect_evidence NAME FILE PATTERN, expect_resume NAME COMMAND.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${LLAMATRAIN_BIN:-$SRC/build/release/llamatrain}
source "$SRC/tests/slurm/cluster.sh"

slurm_test_cleanup() {
  local status=$?
  slurm_cluster_stop "${WORK:-}/cluster" || true
  if [ "$status" = 0 ] || [ -z "${KEEP_SLURM_TEST:-}" ]; then rm -rf "${WORK:?}"; else echo "kept $WORK"; fi
  exit "$status"
}

slurm_test_setup() {
  slurm_cluster_require
  [ -x "$BIN" ] || { echo "FAIL: $BIN is not built"; exit 1; }
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/llamatrain-slurm-test.XXXXXX")
  trap slurm_test_cleanup EXIT
  trap 'exit 130' INT TERM
  "$BIN" preprocess --quiet --input "$SRC/tests/data/fixtures/corpus.jsonl" \
    --tokenizer-model "$SRC/tests/data/fixtures/tokenizer.model" --output-prefix "$WORK/fx" --append-eod
  FIXTURE=$WORK/fx_text_document
  # The cluster also stops if this test is killed outright (a ctest timeout): a guard watches $$.
  SLURM_CLUSTER_OWNER=$$ slurm_cluster_start "$1" "$WORK/cluster"
  # What the jobs inherit (sbatch exports the submitting environment).
  export LLAMATRAIN=$BIN DATASET_PATH=$FIXTURE OMP_NUM_THREADS=1
  export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl=self,vader,tcp
  export XDG_CACHE_HOME=$WORK/cache
  unset LLAMATRAIN_RUN_DIR LLAMATRAIN_OVERRIDES LLAMATRAIN_MODE SLURM_JOB_ID
}

# The job logs and daemon logs of the test, for a failure's message.
show_logs() {
  local f
  for f in "$WORK"/*.out "$WORK"/logs/*/*/*.log; do
    [ -f "$f" ] || continue
    echo "----- $f"; tail -n 60 "$f"
  done
  for f in "$WORK"/cluster/log/slurmctld.log "$WORK"/cluster/log/slurmd-*.log; do
    [ -f "$f" ] || continue
    echo "----- $f"; tail -n 15 "$f"
  done
}

fail() {
  echo "FAIL: $*"
  show_logs
  exit 1
}

expect_in() {
  grep -qF -- "$2" "$1" || fail "expected '$2' in $1"
}

# submit ARGS...: sbatch --parsable in $WORK; prints the job id.
submit() {
  sbatch --parsable --chdir="$WORK" "$@"
}

# submit_wait ARGS...: submit, then wait for the job's end (polling more often than sbatch --wait,
# whose first poll can come 10 s late); prints the job id; fails unless the job COMPLETED.
submit_wait() {
  local job
  job=$(submit "$@") || return 1
  echo "$job"
  slurm_wait_job "$job" 600 >/dev/null || return 1
  [ "$(slurm_job_field "$job" JobState)" = COMPLETED ]
}

# rank_pid JOB RANK: the pid of the llamatrain process of that rank of the job (its environment
# says SLURM_JOB_ID and SLURM_PROCID); waits up to 30 s for it.
rank_pid() {
  local e pid env comm end=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$end" ]; do
    for e in /proc/[0-9]*/environ; do
      pid=${e#/proc/}; pid=${pid%/environ}
      # `read`, a builtin: no process started per candidate (the scan must be quick on a loaded
      # machine, while the rank still runs).
      { read -r comm <"/proc/$pid/comm"; } 2>/dev/null || continue
      [ "$comm" = llamatrain ] || continue
      env=$({ tr '\0' '\n' <"$e"; } 2>/dev/null) || continue
      if grep -qxF "SLURM_JOB_ID=$1" <<<"$env" && grep -qxF "SLURM_PROCID=$2" <<<"$env"; then
        echo "$pid"
        return 0
      fi
    done
    sleep 0.1
  done
  return 1
}

# diagnose_job NAME PATHS...: `llamatrain diagnose` of the paths, run in $WORK as a user would:
# the text in $WORK/NAME.diag, the JSON in $WORK/NAME.json.
diagnose_job() {
  local name=$1
  shift
  (cd "$WORK" && "$BIN" diagnose "$@") >"$WORK/$name.diag" 2>&1 || fail "llamatrain diagnose $* failed: $(cat "$WORK/$name.diag")"
  (cd "$WORK" && "$BIN" diagnose --json "$@") >"$WORK/$name.json" 2>&1 || fail "llamatrain diagnose --json $* failed"
}
# diag_field NAME JQ_FILTER: one field of the diagnosis (jq -r).
diag_field() { jq -r "$2" "$WORK/$1.json"; }
# expect_diagnosis NAME CAUSE: the cause in both forms ("cause: ... (CAUSE)" in the text).
expect_diagnosis() {
  [ "$(diag_field "$1" .cause)" = "$2" ] || fail "diagnosed $(diag_field "$1" .cause), expected $2: $(cat "$WORK/$1.diag")"
  grep -q "^cause: .* ($2)\$" "$WORK/$1.diag" || fail "the text diagnosis does not name $2: $(cat "$WORK/$1.diag")"
}
# expect_evidence NAME FILE PATTERN: an evidence item of the diagnosis is a line of FILE (relative to
# $WORK as diagnose names it) that matches PATTERN (grep -E), and that line of the file is the text
# shown, in the text form as FILE:LINE: TEXT too.
expect_evidence() {
  local name=$1 file=$2 pattern=$3 line text
  while IFS=$'\t' read -r line text; do
    if [ "$(sed -n "${line}p" "$WORK/$file")" = "$text" ] && grep -qE -- "$pattern" <<<"$text"; then
      grep -qF -- "  $file:$line: $text" "$WORK/$name.diag" || fail "evidence $file:$line is not in the text diagnosis"
      return 0
    fi
  done < <(jq -r --arg f "$file" '.evidence[] | select(.file == $f) | "\(.line)\t\(.text)"' "$WORK/$name.json")
  fail "no evidence line of $file matching '$pattern' in the diagnosis: $(cat "$WORK/$name.diag")"
}
# expect_resume NAME COMMAND: the resume command, exactly, in both forms.
expect_resume() {
  [ "$(diag_field "$1" .resume)" = "$2" ] || fail "resume command
  $(diag_field "$1" .resume)
expected
  $2"
  grep -qxF -- "resume: $2" "$WORK/$1.diag" || fail "the text diagnosis lacks 'resume: $2'"
}

# curve RUN_DIR: step -> loss of a run's metrics.jsonl (the last record of a step wins), one "step
# loss" a line.
curve() {
  /usr/bin/python3 -c '
import json, sys
c = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r: c[r["step"]] = r["loss"]
for s in sorted(c): print(s, repr(c[s]))' "$1/metrics.jsonl"
}

# SLURM holds a requeued job for 120 s before it may start again: time for the last start's step
# daemons to end (a step of the same id cannot start while they hold its PMIx socket) and for its
# revoked job credential to age (a start within the same second is refused). The test waits for
# those instead (every node idle, no step socket, 2 s), then lets the job start:
# start_requeued JOBID.
start_requeued() {
  local i
  for ((i = 0; i < 300; i++)); do
    if [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" = "$SLURM_CLUSTER_NODES" ] && ! ls "$SLURM_CLUSTER_DIR"/spool/*/stepd.* >/dev/null 2>&1; then
      break
    fi
    sleep 0.1
  done
  sleep 2
  scontrol update JobId="$1" StartTime=now
}
