#!/bin/bash
# The batch script of the benchmark's training job (bench/chaos/run.py submits it with sbatch
# -N2 --requeue): a log shipper in the background (the live watch), then one training rank per
# node through srun. Every CHAOS_* and LOGDX_* variable comes from the submitting environment.
set -u
attempt=$(( ${SLURM_RESTART_COUNT:-0} + 1 ))
log="$CHAOS_WORK/job-$SLURM_JOB_ID.log"
start=$(stat -c %s "$log" 2>/dev/null || echo 0)
echo "chaos job $SLURM_JOB_ID attempt $attempt on $SLURM_JOB_NODELIST"
"$CHAOS_PYTHON" "$CHAOS_SRC/ship.py" --log "$log" --attempt "$attempt" --start "$start" &
ship=$!
srun --kill-on-bad-exit=1 -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
  "$CHAOS_PYTHON" -u "$CHAOS_SRC/train.py" --ckpt "$CHAOS_CKPT" $CHAOS_TRAIN_ARGS
rc=$?
echo "training exited with status $rc"
kill -TERM "$ship" 2>/dev/null
wait "$ship"
exit $rc
