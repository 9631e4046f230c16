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
  "$VENV/bin/python" -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/readyz').status_code != 200)" \
    >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat "$DATA/serve.log"; echo "core install: server died" >&2; exit 1; }
  sleep 1
done
printf 'step 1 loss 2.0\nRuntimeError: CUDA error: out of memory\n' > "$DATA/job.log"
answer=$("$VENV/bin/python" - "$PORT" "$TOKEN" "$DATA/job.log" <<'PY'
import sys, httpx
port, token, path = sys.argv[1:]
r = httpx.post(f"http://127.0.0.1:{port}/v1/diagnose", content=open(path, "rb").read(), timeout=120,
               headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"})
print(r.text)
sys.exit(r.status_code != 200)
PY
) || { cat "$DATA/serve.log"; echo "core install: diagnosis failed: $answer" >&2; exit 1; }
echo "$answer" | grep -q '"error_type"' || { echo "core install: unexpected answer: $answer" >&2; exit 1; }
echo "core install: server started and diagnosed a log"
