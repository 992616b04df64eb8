"""One step of a version-matrix / lifecycle scenario, run in a fresh process by any of the test
venvs' Pythons (DuckDB 1.2.2 ... 2.0.1): stdlib + duckdb only, no f-string tricks newer than 3.8.

Usage: python matrix_child.py STEP EXT DB [ARGS...]; prints one line `RESULT <json>` and exits 0
unless something unexpected happens (then the traceback goes to stderr and the exit code is 1).
It is also the standalone reproducer for a failing scenario: the test failure prints the exact
command line.

Values that JSON cannot carry exactly are cast to VARCHAR in SQL (dates, HUGEINT revenue).
"""

import json
import os
import sys
import threading
import time

import duckdb

CFG = {"allow_unsigned_extensions": "true"}
COLUMNS = "{'order_id': 'BIGINT', 'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'}"
DASH = "SELECT CAST(order_day AS VARCHAR), CAST(revenue AS VARCHAR) FROM serving_dashboard(?)"
SUMMARY = "SELECT fct_rows, mart_rows, companies, days, CAST(total_revenue AS VARCHAR) FROM serving_build(?)"
# A big generated source: long enough a build that the process exits while it runs.
BIG_SOURCE = (
    "CREATE OR REPLACE TABLE big AS SELECT i AS order_id, 'b' || (i % 97) AS company, "
    "DATE '2024-01-01' + CAST(i % 365 AS INTEGER) AS order_day, (i % 1000) - 300 AS revenue "
    "FROM range({n}) t(i)"
)


def lit(text):
    return "'" + text.replace("'", "''") + "'"


def done(obj):
    sys.stdout.write("RESULT " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def connect(db):
    return duckdb.connect(db, config=dict(CFG))


def load(c, ext):
    c.execute("LOAD " + lit(ext))


def load_src(c, csv_path):
    c.execute(
        "CREATE OR REPLACE TABLE src AS SELECT * FROM read_csv("
        + lit(csv_path)
        + ", header = true, quote = '\"', escape = '\"', columns = "
        + COLUMNS
        + ")"
    )


def our_functions(c):
    return [
        r[0]
        for r in c.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() "
            "WHERE function_name LIKE 'serving\\_%' ESCAPE '\\' "
            "OR function_name LIKE 'paimon\\_%' ESCAPE '\\' "
            "OR function_name LIKE 'fluss\\_%' ESCAPE '\\' ORDER BY 1"
        ).fetchall()
    ]


def companies_of(c, table):
    return [r[0] for r in c.execute("SELECT DISTINCT company FROM " + table + " ORDER BY 1").fetchall()]


def dashboards(c, companies):
    return {co: [list(r) for r in c.execute(DASH, [co]).fetchall()] for co in [*companies, "nobody"]}


def serving_state(c):
    """What a reopened database holds, read with plain SQL (no extension needed)."""
    fct = c.execute("SELECT count(*), CAST(sum(revenue::HUGEINT) AS VARCHAR) FROM fct_orders").fetchone()
    mart = c.execute(
        "SELECT company, CAST(order_day AS VARCHAR), CAST(revenue AS VARCHAR) FROM mart_daily ORDER BY ALL"
    ).fetchall()
    source = c.execute("SELECT source FROM serving_meta").fetchall()
    return {"fct": list(fct), "mart": [list(r) for r in mart], "source": [r[0] for r in source]}


def wait_no_wal(db, seconds=2.0):
    deadline = time.monotonic() + seconds
    while os.path.exists(db + ".wal") and time.monotonic() < deadline:
        time.sleep(0.005)
    return not os.path.exists(db + ".wal")


def step_refused(ext, db):
    """LOAD must fail with DuckDB's own error; the process and the connection survive it."""
    c = connect(db)
    errors = []
    for _ in range(2):
        try:
            load(c, ext)
            errors.append(None)
        except duckdb.Error as e:
            errors.append({"type": type(e).__name__, "message": str(e)})
    done(
        {
            "version": duckdb.__version__,
            "errors": errors,
            "after": c.execute("SELECT 42").fetchone()[0],
            "functions": our_functions(c),
        }
    )
    c.close()


def step_load_only(ext, db, close):
    c = connect(db)
    load(c, ext)
    done({"version": duckdb.__version__, "functions": our_functions(c)})
    if close == "close":
        c.close()
    # "noclose": the interpreter exits with the connection (and the extension's) still open.


def step_use(ext, db, csv_path, close):
    """(b) load and use; with a file database and "noclose" this is also (d)'s first process."""
    c = connect(db)
    load(c, ext)
    load_src(c, csv_path)
    summary = list(c.execute(SUMMARY, ["src"]).fetchone())
    result = {
        "version": duckdb.__version__,
        "summary": summary,
        "dash": dashboards(c, companies_of(c, "src")),
        "ddl": c.execute("SELECT paimon_tier_ddl('lake.accounts')").fetchone()[0],
        "upsert": c.execute("SELECT paimon_tier_upsert('lake.accounts', 7, -3)").fetchone()[0],
        "reconcile": c.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0],
    }
    done(result)
    if close == "close":
        c.close()


def step_close_reopen(ext, db, csv_path):
    """(c) build, close, reopen the file in the same process: the data is there, and after a
    new LOAD the dashboard is still right."""
    c = connect(db)
    load(c, ext)
    load_src(c, csv_path)
    summary = list(c.execute(SUMMARY, ["src"]).fetchone())
    before = dashboards(c, companies_of(c, "src"))
    # While the user stays connected, streamhouse checkpoints its own writes soon after its last
    # call (README: lifecycle), so the file alone then holds the layer.
    settled = wait_no_wal(db, 3.0)
    c.close()
    c = connect(db)
    state = serving_state(c)
    load(c, ext)
    after = dashboards(c, companies_of(c, "src"))
    reconcile = c.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0]
    c.close()
    done(
        {
            "version": duckdb.__version__,
            "summary": summary,
            "before": before,
            "after": after,
            "state": state,
            "reconcile": reconcile,
            "settled": settled,
        }
    )


def step_reopen(ext, db, table):
    """The second process of (d)/(e): read the file plainly, then LOAD and serve."""
    c = connect(db)
    state = serving_state(c)
    names = [r[0] for r in c.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()]
    state["tables"] = {n: c.execute("SELECT count(*) FROM " + n).fetchone()[0] for n in names}
    load(c, ext)
    state["dash"] = dashboards(c, companies_of(c, table))
    state["reconcile"] = c.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0]
    state["version"] = duckdb.__version__
    c.close()
    done(state)


def step_exit_during_build(ext, db, csv_path, big_rows):
    """(e) build src (committed), then start a build of a big table on a daemon thread and let
    the interpreter exit while it runs, without closing anything."""
    c = connect(db)
    load(c, ext)
    load_src(c, csv_path)
    first = list(c.execute(SUMMARY, ["src"]).fetchone())
    c.execute(BIG_SOURCE.format(n=int(big_rows)))
    started, finished = threading.Event(), threading.Event()
    errors = []

    def build_big():
        cur = c.cursor()
        started.set()
        try:
            cur.execute("SELECT * FROM serving_build('big')").fetchall()
        except Exception as e:  # reported, not swallowed
            errors.append(repr(e))
        finished.set()

    threading.Thread(target=build_big, daemon=True).start()
    started.wait(10)
    time.sleep(0.05)
    done({"version": duckdb.__version__, "first": first, "finished_at_exit": finished.is_set(), "errors": errors})
    # Falls off the end: interpreter shutdown with the daemon thread inside serving_build.


def step_exit_during_query_control(db):
    """The control for (e), without the extension: a long native query on a daemon thread while
    the interpreter exits. If this crashes too, DuckDB's Python package does it on its own."""
    c = connect(db)
    started = threading.Event()

    def query():
        cur = c.cursor()
        started.set()
        try:
            cur.execute("SELECT count(*) FROM range(3000000000) t(i) WHERE i % 7 = 3").fetchall()
        except duckdb.Error:
            pass

    threading.Thread(target=query, daemon=True).start()
    started.wait(10)
    time.sleep(0.05)
    done({"version": duckdb.__version__})


STEPS = {
    "refused": step_refused,
    "load_only": step_load_only,
    "use": step_use,
    "close_reopen": step_close_reopen,
    "reopen": step_reopen,
    "exit_during_build": step_exit_during_build,
    "exit_during_query_control": step_exit_during_query_control,
}

if __name__ == "__main__":
    STEPS[sys.argv[1]](*sys.argv[2:])
