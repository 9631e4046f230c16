#!/usr/bin/env bash
# Restart-aware launcher: runs the training command with the controller's restart spec turned
# into the framework's own arguments (checkpoint to load, iterations to skip).
#
#   examples/restart_launcher.sh megatron -- torchrun --nproc-per-node 8 pretrain_gpt.py ARGS...
#
# FORMAT: megatron (Megatron-LM: --load ROOT --ckpt-step N --iterations-to-skip I...),
# megatron-deepspeed (--load ROOT --skip-train-iteration-range A-B), hf (--resume_from_checkpoint
# DIR). The spec is $LOGDX_RESTART_FILE, else logdx-restart.json in the working directory (where
# the controller writes it before requeueing the job); without one the command runs as given.
# Put the command's own --load last-resort default before "--": a later --load wins in argparse.
set -euo pipefail
format="${1:?usage: restart_launcher.sh FORMAT -- COMMAND [ARGS...]}"
shift
[ "${1:-}" = "--" ] && shift
spec="${LOGDX_RESTART_FILE:-logdx-restart.json}"
extra=()
if [ -f "$spec" ]; then
  words="$(logdx restart-args "$spec" --format "$format")"
  eval "extra=($words)"
  echo "restart_launcher: restart spec $spec: ${extra[*]:-nothing to add}" >&2
fi
exec "$@" "${extra[@]}"
