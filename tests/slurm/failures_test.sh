#!/usr/bin/env bash
# Failures of a training job on a real 2-node SLURM cluster (launch/slurm/run.slurm, the tiny model,
# one rank per node) and what `llamatrain diagnose` makes of each one's job log and run folder, and
# what run.slurm then does:
# 1. rank 1 killed by SIGKILL: srun (--kill-on-bad-exit) ends the step; killed_by_signal, rank 1,
#    signal 9; worth retrying: run.slurm requeues the job (one restart allowed here), which then
#    finishes;
# 2. rank 1 frozen by SIGSTOP: rank 0's watchdog (LLAMATRAIN_WATCHDOG_TIMEOUT=2) aborts the job
#    (MPI_Abort: srun's status is 1, as for a config error); watchdog, rank 1; worth retrying;
# 3. a model script that fails before llamatrain starts (3 tasks on 2 nodes): never_started, pointing
#    to `llamatrain doctor`; not retried;
# 4. a job cancelled while pending: no log at all; diagnose's error says where to look and points to
#    `llamatrain doctor`.
# The first job may restart once (LLAMATRAIN_MAX_RESTARTS=1), the others not at all (0); run_test
# checks that a requeued job resumes on the same loss curve.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 2
model=$SRC/launch/models/tiny.sh
script=$SRC/launch/slurm/run.slurm
export TRAIN_ITERS=100000 SAVE_EVERY=1000000 GBS=64 LLAMATRAIN_MAX_RESTARTS=0
steps_logged() { local n=0; [ -f "$1/metrics.jsonl" ] && n=$(grep -c '"loss"' "$1/metrics.jsonl" || true); echo "${n:-0}"; }
wait_steps() {  # RUN_DIR N JOB
  local i
  for ((i = 0; i < 600; i++)); do
    [ "$(steps_logged "$1")" -ge "$2" ] && return 0
    case $(slurm_job_field "$3" JobState) in COMPLETED | FAILED | CANCELLED) fail "job $3 ended before step $2" ;; esac
    sleep 0.1
  done
  fail "run $1 did not reach step $2 in 60 s"
}

# 1. SIGKILL (400 steps: the requeued start finishes in seconds, and the first still runs when rank 1
# is looked for on a loaded machine; 60 steps took about a second and were sometimes done by then)
export LLAMATRAIN_RUN_DIR=$WORK/killed
job=$(TRAIN_ITERS=400 LLAMATRAIN_MAX_RESTARTS=1 submit --nodes 2 "$script" "$model")
wait_steps "$LLAMATRAIN_RUN_DIR" 3 "$job"
pid=$(rank_pid "$job" 1) || fail "no process of rank 1 of job $job"
kill -KILL "$pid"
for ((i = 0; i < 600; i++)); do
  [ "$(slurm_job_field "$job" Restarts)" -ge 1 ] 2>/dev/null && break
  sleep 0.2
done
[ "$(slurm_job_field "$job" Restarts)" = 1 ] || fail "job $job was not requeued after a rank's SIGKILL"
log=slurm-llamatrain-$job.out
expect_in "$WORK/$log" "run.slurm: killed_by_signal is worth retrying"
expect_in "$WORK/$log" "run.slurm: requeueing job $job (restart 1 of 1)"
slurm_wait_job_state "$job" PENDING 60 || fail "the requeued job $job is $(slurm_job_field "$job" JobState), expected PENDING"
# Before the job starts again: its log and run folder, and the start's own log folder as run.slurm read it.
for name in killed killed-start; do
  if [ $name = killed ]; then
    diagnose_job $name "$log" killed
    expect_evidence $name "$log" "^srun: error: n2: task 1: Killed$"
  else
    diagnose_job $name "logs/$job/0"
    expect_evidence $name "logs/$job/0/srun.log" "^srun: error: n2: task 1: Killed$"
  fi
  expect_diagnosis $name killed_by_signal
  [ "$(diag_field $name .rank)" = 1 ] && [ "$(diag_field $name .signal)" = 9 ] || fail "not rank 1 and signal 9: $(cat "$WORK/$name.diag")"
  grep -q "^cause: rank 1 was killed by signal 9 (SIGKILL)" "$WORK/$name.diag" || fail "$(cat "$WORK/$name.diag")"
  expect_resume $name "cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/killed sbatch --nodes 2 --ntasks-per-node 1 $script $model"
done
grep -q "^run.slurm: diagnosis: cause: rank 1 was killed by signal 9 (SIGKILL) (killed_by_signal)$" "$WORK/$log" \
  || fail "run.slurm printed no diagnosis of the kill"
start_requeued "$job"
[ "$(slurm_wait_job "$job" 240)" = COMPLETED ] || fail "the requeued job $job is $(slurm_job_field "$job" JobState), expected COMPLETED"
expect_in "$WORK/$log" "run.slurm: job $job (start 2 of at most 2)"
# The job log now holds both starts: the latest is diagnosed.
diagnose_job killed-finished "$log" killed
expect_diagnosis killed-finished success
[ "$(diag_field killed-finished .last_step)" = 400 ] || fail "the requeued job ended at step $(diag_field killed-finished .last_step), expected 400"

# 2. SIGSTOP: the watchdog
export LLAMATRAIN_RUN_DIR=$WORK/hung
job=$(LLAMATRAIN_WATCHDOG_TIMEOUT=2 submit --nodes 2 "$script" "$model")
wait_steps "$LLAMATRAIN_RUN_DIR" 3 "$job"
pid=$(rank_pid "$job" 1) || fail "no process of rank 1 of job $job"
kill -STOP "$pid"
state=$(slurm_wait_job "$job" 120)
kill -CONT "$pid" 2>/dev/null || true
[ "$state" = FAILED ] || fail "job $job is $state after a rank's SIGSTOP, expected FAILED"
log=slurm-llamatrain-$job.out
diagnose_job hung "$log" hung
expect_diagnosis hung watchdog
[ "$(diag_field hung .rank)" = 1 ] || fail "the hang names rank $(diag_field hung .rank), expected 1: $(cat "$WORK/hung.diag")"
grep -q "^cause: a hang: rank 1 never joined all_reduce" "$WORK/hung.diag" || fail "$(cat "$WORK/hung.diag")"
expect_evidence hung "$log" "^\[rank 0\] watchdog: .* has not completed after"
expect_resume hung "cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/hung sbatch --nodes 2 --ntasks-per-node 1 $script $model"
expect_in "$WORK/$log" "run.slurm: srun ended with status 1"  # MPI_Abort's status, the same as an error's
grep -q "^run.slurm: diagnosis: cause: a hang: rank 1 never joined .*(watchdog)$" "$WORK/$log" \
  || fail "run.slurm printed no diagnosis of the hang"
expect_in "$WORK/$log" "run.slurm: watchdog is worth retrying, but the job exceeded the retry limit (0 restarts"

# 3. The model script fails before llamatrain starts.
export LLAMATRAIN_RUN_DIR=$WORK/unstarted
job=$(submit --nodes 2 --ntasks 3 --ntasks-per-node 2 "$script" "$model")
[ "$(slurm_wait_job "$job" 120)" = FAILED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected FAILED"
log=slurm-llamatrain-$job.out
[ ! -e "$LLAMATRAIN_RUN_DIR/train_log.txt" ] || fail "the job wrote a training log"
diagnose_job unstarted "$log"
expect_diagnosis unstarted never_started
grep -q "^cause: the job never started training: the job has 3 tasks on 2 nodes" "$WORK/unstarted.diag" || fail "$(cat "$WORK/unstarted.diag")"
expect_evidence unstarted "$log" "^error: the job has 3 tasks on 2 nodes, expected the same number on every node$"
diag_field unstarted .fix | grep -qF "llamatrain doctor" || fail "the fix does not point to llamatrain doctor: $(cat "$WORK/unstarted.diag")"
expect_resume unstarted "cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/unstarted sbatch --nodes 2 --ntasks 3 $script $model"
expect_in "$WORK/$log" "run.slurm: never_started is not worth retrying"
[ "$(slurm_job_field "$job" Restarts)" = 0 ] || fail "job $job was requeued"

# 4. Cancelled while pending: no job log, no run folder; diagnose says where to look instead.
job=$(LLAMATRAIN_RUN_DIR=$WORK/pending submit --begin=now+600 --nodes 2 "$script" "$model")
scancel "$job"
[ "$(slurm_wait_job "$job" 30)" = CANCELLED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected CANCELLED"
[ ! -e "$WORK/slurm-llamatrain-$job.out" ] || fail "the job cancelled while pending wrote a log"
status=0
(cd "$WORK" && "$BIN" diagnose "slurm-llamatrain-$job.out" pending) >"$WORK/pending.diag" 2>&1 || status=$?
[ "$status" = 1 ] || fail "diagnose of a job that never started exited $status: $(cat "$WORK/pending.diag")"
expect_in "$WORK/pending.diag" "error: diagnose: slurm-llamatrain-$job.out does not exist"
expect_in "$WORK/pending.diag" "a job that never started (cancelled or failed while pending) wrote no log"
expect_in "$WORK/pending.diag" "llamatrain doctor"
echo "PASS"
