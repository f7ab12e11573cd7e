#!/usr/bin/env bash
# SLURM array example: one margin-sweep preset split over the tasks of an array, then merged by a
# dependent job. Submit from the repository root with
#   bash experiments/slurm/margin_sweep_array.sh            (creates logs/ and results/, submits both)
# Settings (environment): HEBB (default build/hebb), OUT (results/fig2b.h5), ARRAY (0-7; any
# MIN-MAX[:STEP] range), SWEEP_ARGS (default "--preset fig2b-width").
# Each task runs shard (TASK_ID - MIN) / STEP of COUNT (the hebb sweep reads SLURM_ARRAY_TASK_*).
# Requeued or resubmitted tasks continue from OUT.shard<i>of<n>.h5.partial (--resume); resubmit a
# single task with its shard spelled out: sbatch --array=3 --export=ALL,SHARD=3/8 <this script>.
#SBATCH --job-name=memcap-fig2b
#SBATCH --array=0-7
#SBATCH --cpus-per-task=2
#SBATCH --time=00:20:00
#SBATCH --output=logs/%x-%A_%a.out
#SBATCH --open-mode=append
#SBATCH --requeue
set -euo pipefail
HEBB=${HEBB:-build/hebb}
OUT=${OUT:-results/fig2b.h5}
ARRAY=${ARRAY:-0-7}
SWEEP_ARGS=${SWEEP_ARGS:---preset fig2b-width}
export HDF5_USE_FILE_LOCKING=FALSE   # cluster file systems (Lustre, NFS) often lack POSIX locks

if [[ -z ${SLURM_ARRAY_TASK_ID:-} ]]; then
  # Submitter: SLURM opens the log file before the job starts, so logs/ must exist first.
  mkdir -p logs "$(dirname "$OUT")"
  export HEBB OUT SWEEP_ARGS
  array_job=$(sbatch --parsable --array="$ARRAY" --export=ALL "$0")
  array_job=${array_job%%;*}
  range=${ARRAY%%\%*}; step=1; [[ $range == *:* ]] && step=${range#*:} && range=${range%%:*}
  first=${range%-*}; last=${range#*-}
  n=$(( (last - first) / step + 1 ))
  stem=${OUT%.*}; ext=.${OUT##*.}
  shards=()
  for ((i = 0; i < n; ++i)); do shards+=("${stem}.shard${i}of${n}${ext}"); done
  merge_job=$(sbatch --parsable --dependency=afterok:"$array_job" --job-name=memcap-merge \
    --output=logs/%x-%j.out --export=ALL --wrap "$HEBB merge ${shards[*]} --out $OUT")
  echo "submitted array job $array_job ($n tasks) and merge job $merge_job -> $OUT"
  exit 0
fi

shard=()
[[ -n ${SHARD:-} ]] && shard=(--shard "$SHARD")
# shellcheck disable=SC2086  # SWEEP_ARGS is a list of flags
"$HEBB" margin-sweep $SWEEP_ARGS "${shard[@]}" --threads "${SLURM_CPUS_PER_TASK:-2}" --progress lines --resume \
  --out "$OUT"
