#!/usr/bin/env bash
# Starts the server from a core-only install (`pip install -e .`, no extras: what `make serve`
# does) and diagnoses one log through it: a module that only an extra provides fails here, not on
# a user's first `make serve`. (A non-editable wheel does not carry rules/, prompts/, alembic/.)
# Uses its own small virtualenv; pip reuses its wheel cache, so a rerun takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${CORE_VENV:-/tmp/logdx-core-venv}
PORT=${CORE_PORT:-18999}
DATA=$(mktemp -d)
PID=
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$DATA"' EXIT

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q -e .
export LOGDX_DATA_DIR="$DATA"
TOKEN=$(cd "$DATA" && "$VENV/bin/logdx" token create --role scheduler --name core-check 2>/dev/null)
(cd "$DATA" && exec "$VENV/bin/logdx" serve --port "$PORT" --log-level warning) > "$DATA/serve.log" 2>&1 &
PID=$!
for _ in $(seq 1 60); do
  curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$DATA/serve.log"; echo "core install: server died" >&2; exit 1; }
  sleep 1
done
printf 'step 1 loss 2.0\nRuntimeError: CUDA error: out of memory\n' > "$DATA/job.log"
answer=$(curl -fsS -H "Authorization: Bearer $TOKEN" --data-binary @"$DATA/job.log" \
  -H 'Content-Type: text/plain' "http://127.0.0.1:$PORT/v1/diagnose") || {
  cat "$DATA/serve.log"; echo "core install: diagnosis failed" >&2; exit 1; }
echo "$answer" | grep -q '"error_type"' || { echo "core install: unexpected answer: $answer" >&2; exit 1; }
echo "core install: server started and diagnosed a log"
