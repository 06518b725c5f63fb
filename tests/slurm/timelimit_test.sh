#!/usr/bin/env bash
# The time limit on a real SLURM cluster (1 node, 2 ranks on it): run.slurm's --signal makes SLURM
# send SIGTERM to the ranks before the limit (here 55 s before a 1-minute limit; SLURM checks limits
# about every 30 s), and they save a checkpoint and stop before SLURM would kill them. With no
# restart allowed (LLAMATRAIN_MAX_RESTARTS=0) the job then ends FAILED, saying so, and the
# checkpoint is there to resume from.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 1
export LLAMATRAIN_RUN_DIR=$WORK/run LLAMATRAIN_MAX_RESTARTS=0
# Far more steps than fit in the minute: the signal surely comes mid-run.
export TRAIN_ITERS=100000 SAVE_EVERY=1000000 GBS=64
job=$(submit_wait --nodes 1 --ntasks-per-node 2 --time=1 --signal=TERM@55 \
  "$SRC/launch/slurm/run.slurm" "$SRC/launch/models/tiny.sh") && fail "the job succeeded, expected it stopped by the time limit's signal"
log=$WORK/slurm-llamatrain-$job.out
[ "$(slurm_job_field "$job" JobState)" = FAILED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected FAILED"
expect_in "$log" "run.slurm: job $job (start 1 of at most 1) on 1 nodes (n1), 2 ranks"
expect_in "$log" "stopped by signal 15 after step"
expect_in "$log" "run.slurm: srun ended with status 143"
expect_in "$log" "run.slurm: exceeded the retry limit (0 restarts, LLAMATRAIN_MAX_RESTARTS)"
step=$(sed -n 's/^stopped by signal 15 after step \([0-9]*\).*/\1/p' "$log" | head -n 1)
[ -d "$WORK/run/checkpoints/step_$step" ] || fail "no checkpoint of step $step: $(ls "$WORK/run/checkpoints" 2>&1)"
grep -q "TIMEOUT\|DUE TO TIME LIMIT" "$log" && fail "SLURM killed the job at its time limit: the signal came too late"
echo "PASS"
