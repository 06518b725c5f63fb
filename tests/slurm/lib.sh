#!/usr/bin/env bash
# Shared set-up of the SLURM tests (sourced): a private folder removed at exit, the cluster stopped
# on every exit path, the fixture corpus preprocessed, and the environment the launch scripts read.
# Usage: source tests/slurm/lib.sh; slurm_test_setup NODES
# Provides: $SRC (repository), $BIN (llamatrain), $WORK (the folder), $FIXTURE (data prefix),
# fail MESSAGE (prints the job logs and exits 1), expect_in FILE TEXT.
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
