#!/usr/bin/env bash
# SLURM array example: one margin-sweep preset split over 8 tasks, then merged by a dependent job.
#   sbatch experiments/slurm/margin_sweep_array.sh            (submits the array)
#   sbatch --dependency=afterok:<jobid> --wrap "build/hebb merge results/fig2b.shard*of8.h5 --out results/fig2b.h5"
#SBATCH --job-name=memcap-fig2b
#SBATCH --array=0-7
#SBATCH --cpus-per-task=2
#SBATCH --time=00:20:00
#SBATCH --output=logs/%x-%A_%a.out
set -euo pipefail
export HDF5_USE_FILE_LOCKING=FALSE
mkdir -p results logs
# --shard defaults to SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT; --resume makes requeued tasks keep finished jobs.
build/hebb margin-sweep --preset fig2b-width --threads "${SLURM_CPUS_PER_TASK:-2}" --progress lines --resume \
  --out results/fig2b.h5
