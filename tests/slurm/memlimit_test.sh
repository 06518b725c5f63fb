#!/usr/bin/env bash
# A job memory limit on a real SLURM cluster (1 node, 2 ranks, --mem far below what they need):
# SLURM kills the step (memory polled every second), and run.slurm ends the job without a retry,
# since a restart would only meet the same limit, saying why and what to change.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 1
export LLAMATRAIN_RUN_DIR=$WORK/run
export TRAIN_ITERS=100000 SAVE_EVERY=1000000 GBS=64
job=$(submit_wait --nodes 1 --ntasks-per-node 2 --mem=20M "$SRC/launch/slurm/run.slurm" "$SRC/launch/models/tiny.sh") \
  && fail "the job succeeded under a 20 MB limit"
log=$WORK/slurm-llamatrain-$job.out
[ "$(slurm_job_field "$job" JobState)" = FAILED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected FAILED"
[ "$(slurm_job_field "$job" Restarts)" = 0 ] || fail "job $job was requeued after going over its memory limit"
expect_in "$log" "exceeded memory limit"
expect_in "$log" "run.slurm: a rank went over the job's memory limit and SLURM killed it; not retrying"
expect_in "$WORK/logs/$job/0/srun.log" "exceeded memory limit"
echo "PASS"
