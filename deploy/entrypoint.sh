#!/bin/sh
# What the container image, the systemd unit and the Kubernetes Deployment run: migrate the
# database, then serve. Settings come from LOGDX_* environment variables (docs/SERVICE.md); this
# script reads three more:
#   LOGDX_HOST (0.0.0.0), LOGDX_PORT (8000), LOGDX_LOG_LEVEL (info)
#   LOGDX_BIN: the logdx to run (default: the one beside this script, as when it is installed
#   into the venv's bin/; else `logdx` on PATH)
# With arguments it runs `logdx ARGS...` instead of serving (the re-labeling CronJob:
# `entrypoint.sh relabel --only-stale`; `entrypoint.sh token create --role admin`), after the
# same migration, so a one-off command never meets an older schema.
set -eu

if [ -z "${LOGDX_BIN:-}" ]; then
  LOGDX_BIN=logdx
  [ -x "$(dirname "$0")/logdx" ] && LOGDX_BIN="$(dirname "$0")/logdx"
fi
if ! command -v "$LOGDX_BIN" >/dev/null 2>&1; then
  echo "entrypoint: $LOGDX_BIN not found (install the logdx wheel, or set LOGDX_BIN)" >&2
  exit 127
fi

# LOGDX_RULES_DIR names a directory that does not exist yet: start it from the shipped rules (a
# writable copy, so approved rule proposals can be written; later starts keep it as it is)
if [ -n "${LOGDX_RULES_DIR:-}" ] && [ ! -e "$LOGDX_RULES_DIR" ]; then
  "$LOGDX_BIN" rules export "$LOGDX_RULES_DIR"
fi

# a failed migration (database unreachable, corrupt SQLite file) stops here, before serving
"$LOGDX_BIN" migrate

if [ "$#" -gt 0 ]; then
  exec "$LOGDX_BIN" "$@"
fi
# start-up migrates again in-process: a no-op now, and it keeps replicas started together safe
exec "$LOGDX_BIN" serve --host "${LOGDX_HOST:-0.0.0.0}" --port "${LOGDX_PORT:-8000}" \
  --log-level "${LOGDX_LOG_LEVEL:-info}"
