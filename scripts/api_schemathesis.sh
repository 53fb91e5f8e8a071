#!/usr/bin/env bash
# An independent schemathesis run against the API as the product serves it: a real web server
# (stock uvicorn on controlplane.asgi, as `make up` runs it) and a Celery worker (slow work such
# as an estimate runs there, never on a page thread) on a database of their own, every check,
# every phase (examples, coverage, fuzzing, stateful), 25 examples an operation. Text without
# NUL and valid UTF-8, as the API states (it refuses the rest with a 400 naming the field).
#
#   scripts/api_schemathesis.sh [REPORT_DIR]        # default var/schemathesis; exit 1 on any failure
#
# DATABASE_URL picks the server (PostgreSQL as CI runs it: a database "cp_schemathesis" is
# created and dropped on it); without it, SQLite in a temporary folder. Nothing leaves 127.0.0.1.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
REPORT_DIR="${1:-$ROOT/var/schemathesis}"
EXAMPLES="${SCHEMATHESIS_EXAMPLES:-25}"
WORK="$(mktemp -d)"
PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export CONTROLPLANE_VAR_DIR="$WORK/var" CELERY_TASK_ALWAYS_EAGER=0 DJANGO_DEBUG=0 LOG_LEVEL=WARNING \
       PLAYGROUND_RATE_PER_MINUTE=1000000
unset CELERY_BROKER_URL  # the laptop's folder broker, in this run's own var/: no queue shared with anything
mkdir -p "$CONTROLPLANE_VAR_DIR" "$REPORT_DIR"
if [ -n "${DATABASE_URL:-}" ]; then
  # Created and dropped through the server's maintenance database, "postgres": the database that
  # DATABASE_URL names need not exist (the suite's own is test_<name>, made by pytest-django).
  ADMIN_URL="${DATABASE_URL%/*}/postgres"
  export DATABASE_URL="${DATABASE_URL%/*}/cp_schemathesis"
  "$PY" - "$ADMIN_URL" <<'EOF'
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    c.execute("DROP DATABASE IF EXISTS cp_schemathesis WITH (FORCE)")
    c.execute("CREATE DATABASE cp_schemathesis")
EOF
fi
cleanup() {
  [ -n "${SERVER:-}" ] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null || true
  [ -n "${WORKER:-}" ] && kill "$WORKER" 2>/dev/null && wait "$WORKER" 2>/dev/null || true
  if [ -n "${ADMIN_URL:-}" ]; then
    "$PY" -c "import sys, psycopg; psycopg.connect(sys.argv[1], autocommit=True).execute('DROP DATABASE IF EXISTS cp_schemathesis WITH (FORCE)')" "$ADMIN_URL" || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
"$PY" manage.py migrate --verbosity 0
"$PY" manage.py bootstrap --admin-password "fuzz-$RANDOM-$RANDOM" >/dev/null
"$PY" manage.py shell -c '
from core.catalog import PoolFields, build_spec
from graphs import services
services.graph_create(spec=build_spec(template="mocker-disagg", name="fuzzed", model="m", backend="mocker",
                                      prefill=PoolFields(gpus=0), decode=PoolFields(gpus=0)))'
"$PY" -m uvicorn controlplane.asgi:application --host 127.0.0.1 --port "$PORT" --no-access-log \
  --log-level warning > "$REPORT_DIR/server.log" 2>&1 &
SERVER=$!
"$PY" -m celery -A controlplane worker --concurrency 1 --loglevel WARNING > "$REPORT_DIR/worker.log" 2>&1 &
WORKER=$!
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.5; done
# An admin token, minted again if the run revokes it (scripts/schemathesis_hooks.py).
SCHEMATHESIS_HOOKS=scripts.schemathesis_hooks PYTHONPATH="$ROOT" \
"$ROOT/.venv/bin/st" run "http://127.0.0.1:$PORT/api/schema/?format=json" \
  --url "http://127.0.0.1:$PORT" \
  --checks all --phases examples,coverage,fuzzing,stateful --max-examples "$EXAMPLES" \
  --generation-allow-x00 false --generation-codec utf-8 --seed 1 \
  --report junit,ndjson --report-dir "$REPORT_DIR" --continue-on-failure --no-color
