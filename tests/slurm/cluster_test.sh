#!/usr/bin/env bash
# The test cluster itself (tests/slurm/cluster.sh) with one node: it starts, runs a 2-task step with
# srun --mpi=pmix (`llamatrain doctor --all-ranks`: both ranks on n1, the all-reduce exact), and
# stopping it leaves no daemon and no job process behind.
source "$(dirname "$0")/lib.sh"
slurm_test_setup 1
[ "$(sinfo -h -N -o '%N %t')" = "n1 idle" ] || fail "sinfo: $(sinfo -N)"
hosts=$(srun --nodes 1 --ntasks 2 hostname | sort | tr '\n' ' ')
[ "$hosts" = "n1 n1 " ] || fail "srun hostname gave '$hosts', expected the node's own hostname twice"

srun --mpi=pmix --kill-on-bad-exit=1 --nodes 1 --ntasks 2 "$BIN" doctor --all-ranks --run-dir "$WORK/run" \
  >"$WORK/doctor.out" 2>&1 || fail "doctor --all-ranks under srun failed: $(cat "$WORK/doctor.out")"
expect_in "$WORK/doctor.out" "2 ranks answered on 1 node: n1 (ranks 0-1)"
expect_in "$WORK/doctor.out" "PASS  allreduce   sum of 2 ranks exact"

# A job still running when the cluster stops must not outlive it.
job=$(sbatch --parsable --chdir="$WORK" --wrap "sleep 300")
slurm_wait_job_state "$job" RUNNING 30 || fail "job $job did not start"
pids=$(cut -d' ' -f2 "$SLURM_CLUSTER_DIR/pids")
slurm_cluster_stop "$SLURM_CLUSTER_DIR"
for pid in $pids; do
  ! kill -0 "$pid" 2>/dev/null || fail "daemon $pid still runs after slurm_cluster_stop"
done
[ -z "$(slurm_cluster_processes "$SLURM_CLUSTER_DIR")" ] || fail "processes of the cluster left: $(slurm_cluster_processes "$SLURM_CLUSTER_DIR")"
echo "PASS"
