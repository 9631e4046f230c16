#!/usr/bin/env bash
# Start the local OpenAI-compatible LLM server (llama.cpp from the `xllamacpp` wheel, serving the
# packaged Gemma 3 270M) for the openai-backend tests, and print the env line they need.
#
#   eval "$(.ci/llm-server.sh)"      # exports LOGDX_TEST_LLM_URL and LOGDX_TEST_LLM_PROMPTS_DIR
#   .ci/llm-server.sh stop           # stops it (PID file)
#
# Needs the `llm` extra installed in .venv (make install-dev). Progress goes to stderr; stdout
# carries only the export line, so `eval` is safe.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${LOGDX_LLM_DIR:-/tmp/logdx-llm}"
PORT="${LOGDX_LLM_PORT:-18088}"
PY="${PYTHON:-.venv/bin/python}"
log() { echo "llm-server.sh: $*" >&2; }

if [[ "${1:-start}" == "stop" ]]; then
  if [[ -f "$DIR/pid" ]]; then
    kill "$(cat "$DIR/pid")" 2>/dev/null || true
    rm -f "$DIR/pid"
  fi
  exit 0
fi

mkdir -p "$DIR/prompts"
if ! [[ -f "$DIR/pid" ]] || ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
  log "starting on 127.0.0.1:$PORT"
  setsid "$PY" -m app.cli llm serve --host 127.0.0.1 --port "$PORT" --parallel 2 --ctx 4096 \
    --prompts-log-dir "$DIR/prompts" >"$DIR/server.log" 2>&1 < /dev/null &
  echo $! > "$DIR/pid"
fi
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
    echo "export LOGDX_TEST_LLM_URL=http://127.0.0.1:$PORT/v1 LOGDX_TEST_LLM_PROMPTS_DIR=$DIR/prompts"
    exit 0
  fi
  if ! kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
    log "server exited; last lines of $DIR/server.log:"; tail -20 "$DIR/server.log" >&2; exit 1
  fi
  sleep 0.5
done
log "no /health after 60 s"; exit 1
