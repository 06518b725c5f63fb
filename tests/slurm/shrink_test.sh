#!/usr/bin/env bash
# Jobs on the nodes they have (launch/slurm/run.slurm on a real 2-node SLURM cluster, the tiny model,
# one rank per node, node ranges):
# 1. a job whose global batch (6 of micro-batches of 2) data parallel 2 does not divide, given both
#    nodes by `sbatch --nodes 1-2`, trains on one of them and says so;
# 2. a job that loses a node goes on: submitted with `--nodes 1-2` it starts on both nodes (data
#    parallel 2); node n2 is lost mid-run (its slurmd and its rank killed,
# the node set DOWN), SLURM requeues the job, and the next start runs on n1 alone with data parallel 1
# and twice the gradient accumulation, resuming from the newest checkpoint. The trainer says how the
# layout changed and that the global batch did not; the loss curve, every step, equals a one-process
# run of the same config within fp32 tolerance; `llamatrain diagnose` of the first start's logs names
# the lost node.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 2
model=$SRC/launch/models/tiny.sh
script=$SRC/launch/slurm/run.slurm
export TRAIN_ITERS=200 SAVE_EVERY=10 GBS=64 UBS=2 LLAMATRAIN_MAX_RESTARTS=1
PY=/usr/bin/python3
newest_checkpoint() { { ls "$1/checkpoints" 2>/dev/null || true; } | sed -n 's/^step_\([0-9]*\)$/\1/p' | sort -n | tail -n 1; }

# 1. The layout fits one of the two nodes.
export LLAMATRAIN_RUN_DIR=$WORK/fit
job=$(GBS=6 TRAIN_ITERS=4 submit_wait --nodes 1-2 "$script" "$model") || fail "the job of global batch 6 failed"
expect_in "$WORK/slurm-llamatrain-$job.out" "run.slurm: the config's layout cannot use all 2 nodes of the job; training on 1 of them"
expect_in "$WORK/slurm-llamatrain-$job.out" "run.slurm: job $job (start 1 of at most 2) on 2 nodes (n[1-2]), 1 ranks"
expect_in "$LLAMATRAIN_RUN_DIR/train_log.txt" ": 1 rank = data 1 x tensor 1 x pipeline 1"
expect_in "$LLAMATRAIN_RUN_DIR/train_log.txt" "global batch 6 = micro batch 2 x 3 accumulation"
expect_in "$LLAMATRAIN_RUN_DIR/train_log.txt" "done: 4 steps"

# 2. A lost node. The reference: one process, no SLURM.
(cd "$WORK" && env -u SLURM_CONF LLAMATRAIN_RUN_DIR="$WORK/ref" bash "$model") >"$WORK/ref.out" 2>&1 \
  || fail "the one-process run failed: $(tail -5 "$WORK/ref.out")"
curve "$WORK/ref" >"$WORK/ref.curve"

export LLAMATRAIN_RUN_DIR=$WORK/shrunk
job=$(submit --nodes 1-2 "$script" "$model" 2>"$WORK/sbatch.err") || fail "sbatch failed: $(cat "$WORK/sbatch.err")"
for ((i = 0; i < 600; i++)); do
  saved=$(newest_checkpoint "$LLAMATRAIN_RUN_DIR")
  [ "${saved:-0}" -ge 10 ] && break
  case $(slurm_job_field "$job" JobState) in COMPLETED | FAILED | CANCELLED) fail "job $job ended before its checkpoint of step 10" ;; esac
  sleep 0.1
done
[ "${saved:-0}" -ge 10 ] || fail "no checkpoint of step 10 within 60 s"
[ "$(slurm_job_field "$job" NumNodes)" = 2 ] || fail "the job started on $(slurm_job_field "$job" NodeList), expected both nodes"
# n2 is lost: its daemon and its rank die, and the controller marks it DOWN.
rank1=$(rank_pid "$job" 1) || fail "no process of rank 1 of job $job"
slurmd2=$(sed -n 's/^slurmd-n2 //p' "$SLURM_CLUSTER_DIR/pids")
exec 3>&2 2>/dev/null  # (this shell started slurmd: no "Killed" notice when it reaps it)
kill -KILL "$slurmd2" "$rank1"
wait "$slurmd2" || true
exec 2>&3 3>&-
scontrol update NodeName=n2 State=DOWN Reason="lost in a test"
for ((i = 0; i < 600; i++)); do
  [ "$(slurm_job_field "$job" Restarts)" -ge 1 ] 2>/dev/null && [ "$(slurm_job_field "$job" JobState)" = PENDING ] && break
  sleep 0.2
done
[ "$(slurm_job_field "$job" JobState)" = PENDING ] || fail "job $job is $(slurm_job_field "$job" JobState) after losing n2, expected PENDING (requeued)"
log=slurm-llamatrain-$job.out
# The first start's logs (its own folder and the job log as it stands) name the lost node as the cause.
for name in lost lost-start; do
  if [ $name = lost ]; then
    diagnose_job $name "$log" shrunk
  else
    diagnose_job $name "logs/$job/0"
  fi
  expect_diagnosis $name node_failure
  grep -q "^cause: node n2 failed (SLURM lost it) and SLURM ended the job (node_failure)$" "$WORK/$name.diag" || fail "$(cat "$WORK/$name.diag")"
  [ "$(diag_field $name .retry)" = true ] || fail "a lost node is not worth a retry: $(cat "$WORK/$name.json")"
done
expect_evidence lost "$log" "^srun: error: Node failure on n2$"
# (SLURM holds a requeued job for a while: let it start once n1's step daemons are gone)
for ((i = 0; i < 300; i++)); do
  ls "$SLURM_CLUSTER_DIR"/spool/n1/stepd.* >/dev/null 2>&1 || break
  sleep 0.1
done
sleep 2
scontrol update JobId="$job" StartTime=now
state=$(slurm_wait_job "$job" 300) || fail "the requeued job $job did not finish"
[ "$state" = COMPLETED ] || fail "the job requeued after losing n2 is $state, expected COMPLETED"
expect_in "$WORK/$log" "run.slurm: job $job (start 2 of at most 2) on 1 nodes (n1), 1 ranks"
train_log=$LLAMATRAIN_RUN_DIR/train_log.txt
expect_in "$train_log" "parallel layout: 2 ranks = data 2 x tensor 1 x pipeline 1; 16 micro-batches of 2 per data-parallel rank per step"
expect_in "$train_log" "layout changed since the checkpoint: data 2 x tensor 1 x pipeline 1 -> data 1 x tensor 1 x pipeline 1"
expect_in "$train_log" "gradient accumulation changed since the checkpoint: 16 -> 32 micro-batches of 2 per data-parallel rank; the global batch stays 64 samples"
resumed=$(sed -n 's/.*resumed at step \([0-9]*\) .*/\1/p' "$train_log" | tail -n 1)
[ -n "$resumed" ] && [ "$resumed" -ge "$saved" ] || fail "the second start did not resume from a checkpoint of the first"
expect_in "$train_log" "training: steps $resumed -> $TRAIN_ITERS, global batch 64 = micro batch 2 x 32 accumulation"
diagnose_job shrunk-finished "$log" shrunk
expect_diagnosis shrunk-finished success
# Every step's loss, before and after the lost node, is the one-process run's (fp32: the sums of the
# global batch's gradients are only ordered differently).
curve "$LLAMATRAIN_RUN_DIR" >"$WORK/shrunk.curve"
"$PY" - "$WORK/ref.curve" "$WORK/shrunk.curve" "$TRAIN_ITERS" <<'PYEOF' || fail "the loss curve of the shrunk job is not the one-process run's"
import sys
ref = dict(line.split() for line in open(sys.argv[1]))
got = dict(line.split() for line in open(sys.argv[2]))
steps = [str(s) for s in range(1, int(sys.argv[3]) + 1)]
missing = [s for s in steps if s not in got]
if missing:
    sys.exit(f"steps missing from the shrunk run: {missing[:10]}")
worst = max(abs(float(got[s]) - float(ref[s])) / abs(float(ref[s])) for s in steps)
print(f"largest relative loss difference against one process, steps 1-{sys.argv[3]}: {worst:.2g}")
sys.exit(0 if worst <= 1e-5 else 1)
PYEOF
echo "PASS"
