#!/usr/bin/env bash
# The time limit on a real SLURM cluster (2 nodes; two 1-minute jobs at once, each with 2 ranks on a
# node of its own), and `llamatrain diagnose` of each job's log and run folder:
# 1. run.slurm as it is: its --signal makes SLURM send SIGTERM to the ranks before the limit (here 55
#    s before; SLURM checks limits about every 30 s), and they save a checkpoint and stop before SLURM
#    would kill them. The diagnosis: stopped_by_signal (SIGTERM), worth retrying; with no restart
#    allowed (LLAMATRAIN_MAX_RESTARTS=0) the job ends FAILED, saying the retry limit was reached.
# 2. run.slurm without its --signal line: the job reaches the limit and SLURM cancels it (SIGTERM to
#    everything, then SIGKILL); the diagnosis: time_limit, from SLURM's "DUE TO TIME LIMIT" line, and
#    run.slurm does not retry.
# Each diagnosis gives the sbatch command that resumes the run (with its --time).
source "$(dirname "$0")/lib.sh"
slurm_test_setup 2
export LLAMATRAIN_MAX_RESTARTS=0
# Far more steps than fit in the minute: the signal surely comes mid-run.
export TRAIN_ITERS=100000 SAVE_EVERY=1000000 GBS=64
model=$SRC/launch/models/tiny.sh
script=$SRC/launch/slurm/run.slurm
nosignal=$WORK/run-nosignal.slurm
grep -v '^#SBATCH --signal' "$script" >"$nosignal"
job=$(LLAMATRAIN_RUN_DIR=$WORK/run submit --nodes 1 --ntasks-per-node 2 --time=1 --signal=TERM@55 "$script" "$model")
job2=$(LLAMATRAIN_RUN_DIR=$WORK/run2 submit --nodes 1 --ntasks-per-node 2 --time=1 "$nosignal" "$model")

# 1. With the signal.
[ "$(slurm_wait_job "$job" 200)" = FAILED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected FAILED"
log=slurm-llamatrain-$job.out
expect_in "$WORK/$log" "run.slurm: job $job (start 1 of at most 1) on 1 nodes (n1), 2 ranks"
expect_in "$WORK/$log" "stopped by signal 15 after step"
expect_in "$WORK/$log" "run.slurm: srun ended with status 143"
grep -q "^run.slurm: diagnosis: cause: the run was stopped by SIGTERM .*(stopped_by_signal)$" "$WORK/$log" \
  || fail "run.slurm printed no stopped_by_signal diagnosis"
expect_in "$WORK/$log" "run.slurm: stopped_by_signal is worth retrying, but the job exceeded the retry limit (0 restarts, LLAMATRAIN_MAX_RESTARTS)"
step=$(sed -n 's/^stopped by signal 15 after step \([0-9]*\).*/\1/p' "$WORK/$log" | head -n 1)
[ -d "$WORK/run/checkpoints/step_$step" ] || fail "no checkpoint of step $step: $(ls "$WORK/run/checkpoints" 2>&1)"
grep -q "TIMEOUT\|DUE TO TIME LIMIT" "$WORK/$log" && fail "SLURM killed the job at its time limit: the signal came too late"
diagnose_job signalled "$log" run
expect_diagnosis signalled stopped_by_signal
[ "$(diag_field signalled .signal)" = 15 ] || fail "signal $(diag_field signalled .signal), expected 15"
expect_evidence signalled "$log" '^@event \{"event":"signal".*"signal":15'
[ "$(diag_field signalled .last_checkpoint)" = "$WORK/run/checkpoints/step_$step" ] \
  || fail "last checkpoint $(diag_field signalled .last_checkpoint), expected step_$step"
expect_resume signalled "cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/run sbatch --nodes 1 --ntasks-per-node 2 --time=1:00 $script $model"

# 2. Without it: SLURM's time limit itself.
[ "$(slurm_wait_job "$job2" 200)" = TIMEOUT ] || fail "job $job2 is $(slurm_job_field "$job2" JobState), expected TIMEOUT"
log=slurm-llamatrain-$job2.out
diagnose_job timeout "$log" run2
expect_diagnosis timeout time_limit
expect_evidence timeout "$log" "\*\*\* JOB $job2 ON n[12] CANCELLED AT [^ ]+ DUE TO TIME LIMIT \*\*\*"
expect_resume timeout "cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/run2 sbatch --nodes 1 --ntasks-per-node 2 --time=1:00 $nosignal $model"
grep -q "^fix: ask for more time (sbatch --time)" "$WORK/timeout.diag" || fail "no time fix: $(cat "$WORK/timeout.diag")"
expect_in "$WORK/$log" "run.slurm: the job reached its time limit; not retrying"
[ "$(slurm_job_field "$job2" Restarts)" = 0 ] || fail "job $job2 was requeued at its time limit"
echo "PASS"
