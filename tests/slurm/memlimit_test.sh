#!/usr/bin/env bash
# A job memory limit on a real SLURM cluster (1 node, 2 ranks, --mem well below what they need, ~360 MB
# here, and well above what the batch step itself takes, ~140 MB while run.slurm runs `llamatrain
# diagnose`: at 20 MB a poll that caught diagnose killed run.slurm before it wrote its diagnosis):
# SLURM kills the step (memory polled every second); run.slurm's diagnosis names the memory limit and
# it ends the job without a retry, since a restart would only meet the same limit. `llamatrain
# diagnose` of the job log and the run folder says the same, showing slurmstepd's line, and gives the
# sbatch command that resumes the run.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 1
export LLAMATRAIN_RUN_DIR=$WORK/run
export TRAIN_ITERS=100000 SAVE_EVERY=1000000 GBS=64
job=$(submit_wait --nodes 1 --ntasks-per-node 2 --mem=240M "$SRC/launch/slurm/run.slurm" "$SRC/launch/models/tiny.sh") \
  && fail "the job succeeded under a 240 MB limit"
log=slurm-llamatrain-$job.out
[ "$(slurm_job_field "$job" JobState)" = FAILED ] || fail "job $job is $(slurm_job_field "$job" JobState), expected FAILED"
[ "$(slurm_job_field "$job" Restarts)" = 0 ] || fail "job $job was requeued after going over its memory limit"
expect_in "$WORK/$log" "exceeded memory limit"
expect_in "$WORK/logs/$job/0/srun.log" "exceeded memory limit"
# run.slurm's own diagnosis, in the job log
expect_in "$WORK/$log" "run.slurm: diagnosis: llamatrain diagnose $WORK/logs/$job/0"
grep -q "^run.slurm: diagnosis: cause: the host ran out of memory: SLURM's memory limit .*(host_oom)$" "$WORK/$log" \
  || fail "the job log has no host_oom diagnosis"
expect_in "$WORK/$log" "run.slurm: a rank went over the job's memory limit and SLURM killed it; not retrying"

resume="cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/run sbatch --nodes 1 --ntasks-per-node 2 --mem=240M $SRC/launch/slurm/run.slurm $SRC/launch/models/tiny.sh"
diagnose_job mem "$log" run
expect_diagnosis mem host_oom
expect_evidence mem "$log" "^slurmstepd-n1: error: StepId=$job\.0 exceeded memory limit \([0-9]+ > [0-9]+\), being killed"
expect_resume mem "$resume"
grep -q "^fix: give the job more memory (sbatch --mem" "$WORK/mem.diag" || fail "no memory fix: $(cat "$WORK/mem.diag")"
# the start's own log folder, as run.slurm reads it
diagnose_job mem-rank-logs "logs/$job/0"
expect_diagnosis mem-rank-logs host_oom
expect_evidence mem-rank-logs "logs/$job/0/srun.log" "exceeded memory limit"
expect_resume mem-rank-logs "$resume"
echo "PASS"
