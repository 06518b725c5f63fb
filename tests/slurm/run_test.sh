#!/usr/bin/env bash
# launch/slurm/run.slurm on a real 2-node SLURM cluster, training the tiny model with one rank per
# node (data parallel 2, srun --mpi=pmix):
# 1. an uninterrupted job: its checkpoint, TensorBoard file, Hugging Face export, job log and
#    per-rank logs;
# 2. `scancel` mid-run: the ranks save a checkpoint before they end; `llamatrain diagnose` of the job
#    log and run folder says the job was cancelled, and the sbatch command it prints, run as it is,
#    resumes from the checkpoint on the same loss curve (every step's loss equal to the uninterrupted
#    job's);
# 3. SIGTERM to the ranks mid-run (what --signal sends before the time limit): the job requeues
#    itself (its diagnosis: stopped by SIGTERM, worth retrying) and finishes under the same job id,
#    again on the same loss curve.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 2
model=$SRC/launch/models/tiny.sh
# 16 micro-batches per rank per step: slow enough (tens of ms a step) to interrupt mid-run.
export TRAIN_ITERS=${SLURM_TEST_STEPS:-40} SAVE_EVERY=1000 GBS=64

steps_logged() { local n=0; [ -f "$1/metrics.jsonl" ] && n=$(grep -c '"loss"' "$1/metrics.jsonl" || true); echo "${n:-0}"; }
wait_steps() {  # RUN_DIR N JOB: until the run logged N steps
  local i
  for ((i = 0; i < 600; i++)); do
    [ "$(steps_logged "$1")" -ge "$2" ] && return 0
    case $(slurm_job_field "$3" JobState) in COMPLETED | FAILED | CANCELLED) fail "job $3 ended before step $2" ;; esac
    sleep 0.1
  done
  fail "run $1 did not reach step $2 in 60 s"
}

# 1. Uninterrupted.
export LLAMATRAIN_RUN_DIR=$WORK/full
job=$(submit_wait --nodes 2 "$SRC/launch/slurm/run.slurm" "$model") || fail "the training job failed"
log=$WORK/slurm-llamatrain-$job.out
[ "$(slurm_job_field "$job" JobState)" = COMPLETED ] || fail "job $job is $(slurm_job_field "$job" JobState)"
expect_in "$log" "run.slurm: job $job (start 1 of at most 4) on 2 nodes (n[1-2]), 2 ranks"
# The start event names each node once, in rank order (each rank reports its own host).
expect_in "$WORK/logs/$job/0/rank-0.log" '"nodes":"n[1-2]","hosts":["n1","n2"]'
# Rank 0 tells the story; rank 1's file exists for its own errors.
[ -f "$WORK/logs/$job/0/rank-1.log" ] || fail "no per-rank log for rank 1"
expect_in "$WORK/logs/$job/0/rank-0.log" "step $TRAIN_ITERS/$TRAIN_ITERS"
curve "$WORK/full" >"$WORK/full.curve"
[ "$(cut -d' ' -f1 "$WORK/full.curve" | tr '\n' ' ')" = "$(seq -s' ' 1 "$TRAIN_ITERS") " ] \
  || fail "the job logged steps $(cut -d' ' -f1 "$WORK/full.curve" | tr '\n' ' '), expected 1..$TRAIN_ITERS"
ls "$WORK/full/checkpoints/step_$TRAIN_ITERS" >/dev/null 2>&1 || fail "no checkpoint of step $TRAIN_ITERS: $(ls "$WORK/full/checkpoints")"
ls "$WORK"/full/events.out.tfevents.* >/dev/null 2>&1 || fail "no TensorBoard event file in $WORK/full"
for f in config.json model.safetensors tokenizer.model; do
  [ -s "$WORK/full/hf/$f" ] || fail "the Hugging Face export lacks $f: $(ls "$WORK/full/hf" 2>&1)"
done
expect_in "$WORK/full/train_log.txt" "parallel layout: 2 ranks"

# 2. scancel mid-run, then the same command again.
export LLAMATRAIN_RUN_DIR=$WORK/cancelled
job=$(submit --nodes 2 "$SRC/launch/slurm/run.slurm" "$model")
wait_steps "$WORK/cancelled" 5 "$job"
scancel "$job"
state=$(slurm_wait_job "$job" 120) || fail "job $job did not end after scancel"
[ "$state" = CANCELLED ] || fail "job $job is $state after scancel, expected CANCELLED"
saved=$(ls "$WORK/cancelled/checkpoints" 2>/dev/null | sed -n 's/^step_\([0-9]*\)$/\1/p' | sort -n | tail -n 1)
[ -n "$saved" ] || fail "scancel left no checkpoint in $WORK/cancelled/checkpoints"
[ "$saved" -lt "$TRAIN_ITERS" ] || fail "the cancelled job reached the last step ($saved) before scancel: a longer run is needed"
log=slurm-llamatrain-$job.out
expect_in "$WORK/$log" "run.slurm: the job was cancelled; not retrying"
diagnose_job cancelled "$log" cancelled
expect_diagnosis cancelled cancelled
expect_evidence cancelled "$log" "\*\*\* JOB $job ON n[12] CANCELLED AT "
[ "$(diag_field cancelled .last_checkpoint)" = "$WORK/cancelled/checkpoints/step_$saved" ] \
  || fail "last checkpoint $(diag_field cancelled .last_checkpoint), expected step_$saved"
resume="cd $WORK && LLAMATRAIN_RUN_DIR=$WORK/cancelled sbatch --nodes 2 --ntasks-per-node 1 $SRC/launch/slurm/run.slurm $model"
expect_resume cancelled "$resume"
# The printed command, as a user would run it (from another folder; the environment is this one).
submitted=$(cd / && bash -c "$(diag_field cancelled .resume)") || fail "the resume command failed: $submitted"
job=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$submitted")
[ -n "$job" ] || fail "the resume command did not submit a job: $submitted"
[ "$(slurm_wait_job "$job" 600)" = COMPLETED ] || fail "the resumed job $job is $(slurm_job_field "$job" JobState)"
diagnose_job resumed "slurm-llamatrain-$job.out" cancelled
expect_diagnosis resumed success
expect_in "$WORK/cancelled/train_log.txt" "step_$saved"
curve "$WORK/cancelled" >"$WORK/cancelled.curve"
diff "$WORK/full.curve" "$WORK/cancelled.curve" >"$WORK/cancelled.diff" \
  || fail "cancelled at step $saved and resumed, the loss curve differs from the uninterrupted one: $(head "$WORK/cancelled.diff")"

# 3. SIGTERM to the ranks only (the time limit's warning): run.slurm requeues, the job resumes.
export LLAMATRAIN_RUN_DIR=$WORK/requeued
job=$(submit --nodes 2 "$SRC/launch/slurm/run.slurm" "$model")
wait_steps "$WORK/requeued" 5 "$job"
scancel --signal=TERM "$job"
for ((i = 0; i < 600; i++)); do
  [ "$(slurm_job_field "$job" Restarts)" -ge 1 ] 2>/dev/null && break
  sleep 0.2
done
[ "$(slurm_job_field "$job" Restarts)" = 1 ] || fail "job $job was not requeued after SIGTERM"
slurm_wait_job_state "$job" PENDING 60 || fail "the requeued job $job is $(slurm_job_field "$job" JobState), expected PENDING"
start_requeued "$job"
state=$(slurm_wait_job "$job" 240) || fail "the requeued job $job did not finish"
[ "$state" = COMPLETED ] || fail "the requeued job $job is $state, expected COMPLETED"
log=$WORK/slurm-llamatrain-$job.out
expect_in "$log" "run.slurm: stopped_by_signal is worth retrying"
grep -q "^run.slurm: diagnosis: cause: the run was stopped by SIGTERM .*(stopped_by_signal)$" "$log" \
  || fail "run.slurm printed no diagnosis before the requeue"
expect_in "$log" "run.slurm: requeueing job $job (restart 1 of 3)"
expect_in "$log" "run.slurm: job $job (start 2 of at most 4)"
diagnose_job requeued "slurm-llamatrain-$job.out" requeued  # both starts in it: the latest is diagnosed
expect_diagnosis requeued success
curve "$WORK/requeued" >"$WORK/requeued.curve"
diff "$WORK/full.curve" "$WORK/requeued.curve" >"$WORK/requeued.diff" \
  || fail "stopped by SIGTERM and requeued, the loss curve differs from the uninterrupted one: $(head "$WORK/requeued.diff")"
# The uninterrupted, the cancelled and the requeued run on one `llamatrain report` page, where this
# build has the command (CLI11 answers --help of an unknown command with the main help, whose usage
# line names no command).
if "$BIN" report --help 2>&1 | grep -q '^Usage: .* report '; then
  "$BIN" report "$WORK/full" "$WORK/cancelled" "$WORK/requeued" -o "$WORK/report.html" >"$WORK/report.txt" 2>&1 \
    || fail "llamatrain report failed: $(cat "$WORK/report.txt")"
  for want in "<svg" cancelled requeued; do expect_in "$WORK/report.html" "$want"; done
fi

# 4. A step that fails to launch on every node (a stale PMIx socket where each node's step daemon
# must create its own): srun reports success for it; run.slurm notices that no rank started and
# requeues.
export LLAMATRAIN_RUN_DIR=$WORK/relaunched
job=$(TRAIN_ITERS=4 submit --begin=now+3 --nodes 2 "$SRC/launch/slurm/run.slurm" "$model")
touch "$SLURM_CLUSTER_DIR/spool/n1/stepd.slurm.pmix.$job.0" "$SLURM_CLUSTER_DIR/spool/n2/stepd.slurm.pmix.$job.0"
for ((i = 0; i < 300; i++)); do
  [ "$(slurm_job_field "$job" Restarts)" -ge 1 ] 2>/dev/null && break
  sleep 0.2
done
expect_in "$WORK/slurm-llamatrain-$job.out" "run.slurm: srun reported success, but ranks 0 1 never started"
expect_in "$WORK/slurm-llamatrain-$job.out" "run.slurm: requeueing job $job (restart 1 of 3)"
rm -f "$SLURM_CLUSTER_DIR"/spool/n*/stepd.slurm.pmix.$job.0
slurm_wait_job_state "$job" PENDING 60 || fail "job $job is $(slurm_job_field "$job" JobState) after a failed launch, expected PENDING (requeued)"
start_requeued "$job"
state=$(slurm_wait_job "$job" 240) || fail "the requeued job $job did not finish"
[ "$state" = COMPLETED ] || fail "the job requeued after a failed launch is $state, expected COMPLETED"
[ "$(steps_logged "$WORK/relaunched")" = 4 ] || fail "the relaunched job logged $(steps_logged "$WORK/relaunched") steps, expected 4"
echo "PASS"
