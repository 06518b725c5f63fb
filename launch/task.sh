#!/usr/bin/env bash
# One task of a job: sourced by the model scripts (launch/models/*.sh) after they set CONFIG and
# OVERRIDES, it adds what the job itself decides (processes per node and nodes from SLURM, the run
# folder, resuming, threads per rank) and runs llamatrain in the mode the batch script asks for:
#   LLAMATRAIN_MODE=train   (default, run.slurm) llamatrain train CONFIG OVERRIDES...
#   LLAMATRAIN_MODE=plan    (preflight.slurm)    llamatrain plan CONFIG OVERRIDES... --nodes N --ranks-per-node R
#   LLAMATRAIN_MODE=doctor  (preflight.slurm)    llamatrain doctor --all-ranks CONFIG OVERRIDES...
#   LLAMATRAIN_MODE=print   the command line of `train`, one argument a line, and nothing run
#   LLAMATRAIN_MODE=fit     (run.slurm)          llamatrain plan ... --fit-nodes: how many of the job's
#                           nodes the config's layout can use
# Environment it reads (all optional):
#   LLAMATRAIN           the program (default: llamatrain on PATH, else build/release/llamatrain)
#   LLAMATRAIN_RUN_DIR   the run folder (exp_manager.explicit_log_dir); default: NeMo's
#                        <exp_dir>/<name>/<SLURM_JOB_ID>, which a requeued job keeps
#   LLAMATRAIN_OVERRIDES more key=value overrides, space-separated; they win over the script's
#   LLAMATRAIN_RANK_LOGS a folder: each rank also writes its output to rank-<N>.log there
#   OMP_NUM_THREADS      threads per rank; default: the CPUs SLURM gave the task, else the node's
#                        CPUs divided by the ranks on the node
# Arguments after the model script's name are more overrides, last of all.

: "${CONFIG:?the model script sets CONFIG (a YAML file) before sourcing task.sh}"
# The program: $LLAMATRAIN, else llamatrain on PATH, else this checkout's release build.
if [ -z "${LLAMATRAIN:-}" ]; then
  LLAMATRAIN=$(command -v llamatrain || true)
  [ -n "$LLAMATRAIN" ] || LLAMATRAIN=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/release/llamatrain
fi
mode=${LLAMATRAIN_MODE:-train}

# The job's shape: the step's inside srun (run.slurm may use fewer nodes than the job has), else the
# job's, else one process; without a task count, srun starts one task per node.
nodes=${SLURM_STEP_NUM_NODES:-${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}}
tasks=${SLURM_STEP_NUM_TASKS:-${SLURM_NTASKS:-${SLURM_NPROCS:-$nodes}}}
if [ $((tasks % nodes)) != 0 ]; then
  echo "error: the job has $tasks tasks on $nodes nodes, expected the same number on every node" >&2
  echo "hint: sbatch --nodes $nodes --ntasks-per-node R ..." >&2
  exit 1
fi
ranks_per_node=$((tasks / nodes))

job_overrides=("trainer.devices=$ranks_per_node" "trainer.num_nodes=$nodes" "exp_manager.resume_if_exists=true"
               "exp_manager.resume_ignore_no_checkpoint=true")
[ -z "${LLAMATRAIN_RUN_DIR:-}" ] || job_overrides+=("exp_manager.explicit_log_dir=$LLAMATRAIN_RUN_DIR")
read -r -a env_overrides <<<"${LLAMATRAIN_OVERRIDES:-}"
all_overrides=("${OVERRIDES[@]}" "${job_overrides[@]}" "${env_overrides[@]}" "$@")

if [ -z "${OMP_NUM_THREADS:-}" ]; then
  if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
    export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
  elif [ -n "${SLURM_CPUS_ON_NODE:-}" ]; then
    export OMP_NUM_THREADS=$(((SLURM_CPUS_ON_NODE / ranks_per_node) > 0 ? SLURM_CPUS_ON_NODE / ranks_per_node : 1))
  fi
fi

if [ -n "${LLAMATRAIN_RANK_LOGS:-}" ] && [ -n "${SLURM_PROCID:-}" ] && [ "$mode" != fit ]; then
  mkdir -p "$LLAMATRAIN_RANK_LOGS"
  rank_log=$LLAMATRAIN_RANK_LOGS/rank-$SLURM_PROCID.log
  # The copy must outlive the signals that stop the job (scancel signals every process of it), or
  # the rank would lose its output while it saves the last checkpoint.
  exec > >(trap '' TERM INT; exec tee -a "$rank_log") 2> >(trap '' TERM INT; exec tee -a "$rank_log" >&2)
fi

case $mode in
  train) exec "$LLAMATRAIN" train "$CONFIG" "${all_overrides[@]}" ;;
  plan) exec "$LLAMATRAIN" plan "$CONFIG" "${all_overrides[@]}" --nodes "$nodes" --ranks-per-node "$ranks_per_node" ;;
  doctor) exec "$LLAMATRAIN" doctor --all-ranks "$CONFIG" "${all_overrides[@]}" ;;
  print) printf '%s\n' "$LLAMATRAIN" train "$CONFIG" "${all_overrides[@]}" ;;
  fit) exec "$LLAMATRAIN" plan "$CONFIG" "${all_overrides[@]}" --nodes "$nodes" --ranks-per-node "$ranks_per_node" --fit-nodes ;;
  *)
    echo "error: LLAMATRAIN_MODE=$mode, expected train, plan, doctor, print or fit" >&2
    exit 1 ;;
esac
