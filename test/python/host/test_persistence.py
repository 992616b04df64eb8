"""Persistence like DuckDB's own (issue 37, item 9): what reaches the `.duckdb` file, judged by
a copy of that file alone (no `.wal`) opened by plain DuckDB in a fresh process.

- DuckDB's CLI: a script that LOADs streamhouse and writes (with or without streamhouse calls)
  leaves what the same script leaves without the extension — no `.wal`, everything in the
  `.duckdb` (the control: the same script run by the plain CLI). The CLI exits right after
  closing its database; the extension's exit handler lets go of the instance with DuckDB's
  shutdown checkpoint.
- Any host, connected and idle: the user's own writes (and the layer's) are checkpointed
  `SETTLE_QUIET` after the last write, so a copy of the `.duckdb` alone holds them.

Oracles: the rows as generated (plain Python sums), and the plain CLI's own files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import sql_literal

CLI = Path(sys.executable).parent / "duckdb"
TIMEOUT = 120
N = 100_000
# The table of the session: 100k rows, a number and a text each.
WRITE = f"CREATE TABLE t AS SELECT range AS i, 'x' || range AS s FROM range({N});"
T_ORACLE = [N, sum(range(N)), sum(len(f"x{i}") for i in range(N))]
T_QUERY = "SELECT count(*) AS n, CAST(sum(i) AS VARCHAR) AS s, CAST(sum(length(s)) AS VARCHAR) AS l FROM t"
ORDERS = (
    "CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 7) AS company, DATE '2024-01-01' + CAST(i % 30 AS INTEGER) "
    "AS order_day, CAST(i % 1000 AS BIGINT) AS revenue FROM range(50000) t(i);"
)
SRC_REVENUE = sum(i % 1000 for i in range(50000))


def cli() -> Path:
    if not CLI.is_file():
        pytest.fail(f"duckdb CLI not found at {CLI} (run `make venv`)", pytrace=False)
    return CLI


def run_cli(db: Path, sql: str) -> None:
    p = subprocess.run([str(cli()), "-unsigned", str(db), "-c", sql], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0 and not p.stderr.strip(), f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"


READ_CHILD = textwrap.dedent(
    """
    import duckdb, json, sys
    c = duckdb.connect(sys.argv[1], read_only=True)
    out = {}
    for name, sql in json.loads(sys.argv[2]).items():
        cur = c.execute(sql)
        names = [d[0] for d in cur.description]
        out[name] = [dict(zip(names, map(str, row))) for row in cur.fetchall()]
    print("RESULT " + json.dumps(out))
    """
)


def the_file_alone(db: Path, queries: dict) -> dict:
    """Each query's rows (values as text), from a copy of `db` without its WAL, opened read-only
    by plain DuckDB in a fresh process (a WAL beside the copy would be replayed: there is none)."""
    copy = db.parent / ("alone_" + db.name)
    shutil.copy(db, copy)
    assert not Path(str(copy) + ".wal").exists()
    p = subprocess.run(
        [sys.executable, "-c", READ_CHILD, str(copy), json.dumps(queries)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.split("RESULT ")[1])


def wal(db: Path) -> Path:
    return Path(str(db) + ".wal")


def t_result(rows) -> list:
    [r] = rows
    return [int(r["n"]), int(r["s"]), int(r["l"])]


def test_cli_load_alone_leaves_the_files_duckdb_leaves(ext_path, tmp_path):
    """The issue's session: LOAD, then 100k rows of the user's; no streamhouse call. The plain CLI
    leaves no WAL and the `.duckdb` alone holds the table: so must the CLI with streamhouse."""
    control, db = tmp_path / "plain.duckdb", tmp_path / "loaded.duckdb"
    run_cli(control, WRITE)
    assert not wal(control).exists(), "control: the plain CLI left a WAL"
    assert t_result(the_file_alone(control, {"t": T_QUERY})["t"]) == T_ORACLE, "control"
    run_cli(db, f"LOAD {sql_literal(ext_path)}; {WRITE}")
    assert not wal(db).exists(), f"a {wal(db).stat().st_size}-byte WAL left beside the .duckdb"
    assert t_result(the_file_alone(db, {"t": T_QUERY})["t"]) == T_ORACLE


def test_cli_after_streamhouse_calls_the_users_writes_reach_the_file(ext_path, tmp_path):
    """LOAD, a build, the user's own table after it, exit: the `.duckdb` alone holds the layer and
    the user's table, as the plain CLI's file holds a script's tables."""
    db = tmp_path / "built.duckdb"
    run_cli(db, f"LOAD {sql_literal(ext_path)}; {ORDERS} SELECT * FROM serving_build('src'); {WRITE}")
    assert not wal(db).exists(), "a WAL left beside the .duckdb"
    got = the_file_alone(
        db,
        {
            "t": T_QUERY,
            "fct": "SELECT count(*) AS n, CAST(sum(revenue) AS VARCHAR) AS s FROM fct_orders",
            "mart": "SELECT CAST(sum(revenue) AS VARCHAR) AS s FROM mart_daily",
        },
    )
    assert t_result(got["t"]) == T_ORACLE
    assert got["fct"] == [{"n": "50000", "s": str(SRC_REVENUE)}], got["fct"]
    assert got["mart"] == [{"s": str(SRC_REVENUE)}], got["mart"]


IDLE_CHILD = textwrap.dedent(
    r"""
    import duckdb, json, os, shutil, sys, time
    ext, db, call = sys.argv[1], sys.argv[2], sys.argv[3] == "call"
    c = duckdb.connect(db, config={"allow_unsigned_extensions": "true"})
    c.execute(f"LOAD '{ext}'")
    if call:
        c.execute(sys.argv[4])
        c.execute("SELECT * FROM serving_build('src')").fetchall()
    c.execute(sys.argv[5])
    # Connected and idle: the WAL is folded into the file within a few SETTLE_QUIETs.
    deadline = time.monotonic() + 5
    while os.path.exists(db + ".wal") and os.path.getsize(db + ".wal") > 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    settled = not os.path.exists(db + ".wal") or os.path.getsize(db + ".wal") == 0
    shutil.copy(db, db + ".copy")  # still connected: the copy is what the file holds now
    c.close()
    print("RESULT " + json.dumps({"settled": settled}))
    """
)


@pytest.mark.parametrize("call", ["load_only", "call"])
def test_connected_and_idle_the_users_writes_reach_the_file(ext_path, tmp_path, call):
    """Python, connected and idle after the user's own write (with or without a streamhouse call
    before it): within seconds the `.duckdb` alone holds the user's table (and the layer)."""
    db = tmp_path / "idle.duckdb"
    p = subprocess.run(
        [sys.executable, "-c", IDLE_CHILD, ext_path, str(db), call, ORDERS, WRITE],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.split("RESULT ")[1])
    assert res["settled"], "the WAL was not folded into the file within 5 s of idling"
    copy = Path(str(db) + ".copy")
    queries = {"t": T_QUERY, "tables": "SELECT table_name FROM duckdb_tables() ORDER BY ALL"}
    if call == "call":
        queries["fct"] = "SELECT count(*) AS n, CAST(sum(revenue) AS VARCHAR) AS s FROM fct_orders"
    got = the_file_alone(copy, queries)
    assert t_result(got["t"]) == T_ORACLE
    if call == "call":
        assert got["fct"] == [{"n": "50000", "s": str(SRC_REVENUE)}], got["fct"]
    else:
        assert [r["table_name"] for r in got["tables"]] == ["t"], got["tables"]
