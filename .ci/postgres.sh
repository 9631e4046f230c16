#!/usr/bin/env bash
# Start a throwaway local PostgreSQL for the service tests and print the env line they need.
#
#   eval "$(.ci/postgres.sh)"        # exports LOGDX_TEST_POSTGRES_URL
#   .ci/postgres.sh stop             # stops the cluster
#
# Installs Debian's postgresql when no server binaries are found (needs root + apt-get).
# The cluster runs as the unprivileged `postgres` user (initdb refuses root), listens only on
# 127.0.0.1, trusts local connections and lives in $LOGDX_PG_DIR (default /tmp/logdx-pg).
# Progress goes to stderr; stdout carries only the export line, so `eval` is safe.
set -euo pipefail

PGDIR="${LOGDX_PG_DIR:-/tmp/logdx-pg}"
PGPORT="${LOGDX_PG_PORT:-5432}"
DBNAME="${LOGDX_PG_DB:-logdx_test}"
log() { echo "postgres.sh: $*" >&2; }

find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [[ -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
  done
  command -v pg_ctl >/dev/null 2>&1 && { dirname "$(command -v pg_ctl)"; return 0; }
  return 1
}

BINDIR="$(find_bindir || true)"
if [[ -z "$BINDIR" ]]; then
  log "no PostgreSQL found; installing the Debian package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  BINDIR="$(find_bindir)"
fi

as_pg() {
  if [[ "$(id -u)" == 0 ]]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PGDIR" --shell /bin/sh postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [[ "${1:-start}" == "stop" ]]; then
  as_pg "$BINDIR/pg_ctl" -D "$PGDIR/data" -m fast stop >&2 || true
  exit 0
fi

mkdir -p "$PGDIR"
[[ "$(id -u)" == 0 ]] && { id postgres >/dev/null 2>&1 || useradd --system --home-dir "$PGDIR" --shell /bin/sh postgres; chown postgres "$PGDIR"; }

if [[ ! -f "$PGDIR/data/PG_VERSION" ]]; then
  log "initdb in $PGDIR/data"
  as_pg "$BINDIR/initdb" -D "$PGDIR/data" -A trust -U postgres -E UTF8 >/dev/null
fi

if ! as_pg "$BINDIR/pg_ctl" -D "$PGDIR/data" status >/dev/null 2>&1; then
  log "starting on 127.0.0.1:$PGPORT"
  as_pg "$BINDIR/pg_ctl" -D "$PGDIR/data" -w -t 60 -l "$PGDIR/server.log" \
    -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDIR -c fsync=off -c max_connections=200" start >&2
fi

if ! as_pg "$BINDIR/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$DBNAME'" | grep -q 1; then
  as_pg "$BINDIR/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres "$DBNAME"
fi

echo "export LOGDX_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$PGPORT/$DBNAME"
