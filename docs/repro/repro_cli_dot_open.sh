#!/usr/bin/env bash
# Reproducer (kept as a hand check): in the duckdb 1.5.6 CLI, `.open` back to a file database right
# after `.open` took the CLI away from it. Before 2026-12-02 it failed now and then with
#   IO Error: Cannot open file "<db>.wal": No such file or directory
# once streamhouse was LOADed (the old instance's shutdown checkpoint ran under the new one). Since
# the release writes nothing (README: lifecycle) it must report 0 failures; the strict version under
# load runs in make test (test/python/host/test_reopen_strict.py).
# Usage (from the repo root, after `make release venv`):
#   docs/repro/repro_cli_dot_open.sh [load|noload] [RUNS=30] [ROWS=2000]
set -u
cd "$(dirname "$0")/../.."
BIN=$(ls .venv/lib/python*/site-packages/duckdb_cli/duckdb)  # the real binary, not the wrapper
EXT=$PWD/build/release/streamhouse.duckdb_extension
MODE=${1:-load}; RUNS=${2:-30}; N=${3:-2000}
DB=$(mktemp -d)/dot_open.duckdb
if [ "$MODE" = load ]; then L="LOAD '$EXT';"; B="SELECT fct_rows FROM serving_build('src');"
else L=""; B="CREATE TABLE fct_orders AS SELECT * FROM src;"; fi
bad=0
for run in $(seq 1 "$RUNS"); do
  rm -f "$DB" "$DB.wal"
  out=$("$BIN" -unsigned -csv 2>&1 <<SQL
.open $DB
$L
CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, DATE '2024-01-01' + CAST(i % 5 AS INTEGER) AS order_day, i AS revenue FROM range($N) t(i);
$B
.open :memory:
.open $DB
SELECT count(*) AS fct FROM fct_orders;
SQL
)
  rc=$?
  if [ $rc -ne 0 ] || ! tr -d '\r' <<<"$out" | grep -qx "$N"; then
    bad=$((bad + 1))
    echo "== run $run: exit code $rc; output:"; tr -d '\r' <<<"$out" | tail -n +3
  fi
done
echo "$bad of $RUNS runs went wrong ($MODE, $N rows)"
