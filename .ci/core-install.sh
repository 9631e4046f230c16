#!/usr/bin/env bash
# Installs logdx as users do, from a wheel (`python -m build`; not editable, no extras) into a
# fresh virtualenv, and uses it from a directory outside the checkout: `logdx rules test`,
# `logdx diagnose`, then `logdx serve` with a real API call. A module only an extra provides,
# or data the wheel does not carry (rules, prompts, migrations, templates), fails here, not on
# a user's first start. (tests/test_packaging.py checks the same and more, in `make test`.)
# Uses its own small virtualenvs; pip reuses its wheel cache, so a rerun takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PYTHON=${PYTHON:-python3}
VENV=${CORE_VENV:-/tmp/logdx-core-venv}
TOOLS=${CORE_TOOLS_VENV:-/tmp/logdx-build-tools}
PORT=${CORE_PORT:-18999}
WORK=$(mktemp -d)
PID=
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT

[ -x "$TOOLS/bin/python" ] || "$PYTHON" -m venv "$TOOLS"
"$TOOLS/bin/pip" install -q build
# build from a copy: nothing is written into the checkout
mkdir "$WORK/src"
tar -C "$REPO" --exclude='__pycache__' --exclude='*.so' --exclude='app/_data' -cf - \
  pyproject.toml setup.py MANIFEST.in README.md alembic.ini app rules prompts alembic examples \
  tests/data/metric_lines.txt tests/data/normal_lines.txt | tar -C "$WORK/src" -xf -
"$TOOLS/bin/python" -m build --outdir "$WORK/dist" "$WORK/src" > "$WORK/build.log" 2>&1 \
  || { cat "$WORK/build.log"; echo "core install: python -m build failed" >&2; exit 1; }
WHEEL=$(ls "$WORK"/dist/logdx-*.whl)

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install -q "$WHEEL"

cd "$WORK"   # outside the checkout from here on
export LOGDX_DATA_DIR="$WORK/data" LOGDX_RULES_CACHE_DIR="$WORK/rules-cache"
unset PYTHONPATH LOGDX_RULES_DIR LOGDX_RULES_OVERLAY
where=$("$VENV/bin/python" -c 'import app.resources as r; print(r.data_dir("rules"))')
case "$where" in "$VENV"/*) ;; *) echo "core install: rules found at $where, not in the venv" >&2; exit 1;; esac

"$VENV/bin/logdx" rules test | tail -1
printf 'step 1 loss 2.0\nRuntimeError: CUDA error: out of memory\n' > job.log
"$VENV/bin/logdx" diagnose job.log --json | grep -q '"error_type": "OutOfMemoryError"' \
  || { echo "core install: logdx diagnose did not find the OOM" >&2; exit 1; }

TOKEN=$("$VENV/bin/logdx" token create --role scheduler --name core-check 2>/dev/null)
"$VENV/bin/logdx" serve --port "$PORT" --log-level warning > serve.log 2>&1 &
PID=$!
for _ in $(seq 1 60); do
  "$VENV/bin/python" -c "import httpx, sys; sys.exit(httpx.get('http://127.0.0.1:$PORT/healthz').status_code != 200)" \
    >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || { cat serve.log; echo "core install: server died" >&2; exit 1; }
  sleep 1
done
answer=$("$VENV/bin/python" - "$PORT" "$TOKEN" job.log <<'PY'
import sys, httpx
port, token, path = sys.argv[1:]
r = httpx.post(f"http://127.0.0.1:{port}/v1/diagnose", content=open(path, "rb").read(), timeout=120,
               headers={"Authorization": f"Bearer {token}", "Content-Type": "text/plain"})
print(r.text)
sys.exit(r.status_code != 200)
PY
) || { cat serve.log; echo "core install: diagnosis failed: $answer" >&2; exit 1; }
echo "$answer" | grep -q '"error_type":"OutOfMemoryError"' || { echo "core install: unexpected answer: $answer" >&2; exit 1; }
echo "core install: the wheel ($(basename "$WHEEL")) diagnosed a log from the CLI and the server"
