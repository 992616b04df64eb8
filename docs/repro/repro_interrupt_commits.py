"""Reproducer: interrupting serving_build does not stop it, and the build is committed although
the caller is told it was interrupted.

The build runs on the extension's own connection, which the caller's interrupt (Ctrl-C in the CLI,
connection.interrupt() in Python, DuckDB 2.0.1's interrupt of running queries at exit) never
reaches: the call returns only when the whole build is done, with "INTERRUPT Error:
Interrupted!", and serving_meta then shows the new build. A native statement of the same size
stops within about a millisecond and leaves nothing.

Usage (from the repo root, after `make release venv`): .venv/bin/python docs/repro/repro_interrupt_commits.py
"""

import os
import threading
import time

import duckdb

EXT = os.path.abspath(
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "release", "streamhouse.duckdb_extension"
    )
)

c = duckdb.connect(":memory:", config={"allow_unsigned_extensions": "true"})
c.execute("LOAD '" + EXT + "'")
c.execute("CREATE TABLE small AS SELECT 1 AS order_id, 'a' AS company, DATE '2024-01-01' AS order_day, 5 AS revenue")
c.execute("SELECT * FROM serving_build('small')").fetchall()
c.execute(
    "CREATE TABLE big AS SELECT i AS order_id, 'b' || (i % 97) AS company, "
    "DATE '2024-01-01' + CAST(i % 365 AS INTEGER) AS order_day, (i % 1000) - 300 AS revenue "
    "FROM range(3000000) t(i)"
)


def interrupted(sql):
    cur, out = c.cursor(), {}

    def work():
        try:
            cur.execute(sql).fetchall()
            out["result"] = "finished"
        except duckdb.Error as e:
            out["result"] = repr(e)

    th = threading.Thread(target=work)
    th.start()
    time.sleep(0.05)
    t = time.monotonic()
    cur.interrupt()
    th.join()
    return out["result"], time.monotonic() - t


print("DuckDB", duckdb.__version__)
result, seconds = interrupted("CREATE TABLE native AS SELECT company, order_day, sum(revenue) FROM big GROUP BY ALL")
created = c.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'native'").fetchone()[0] == 1
print(f"native CTAS:   caller got {result}, {seconds:.3f} s after the interrupt; table created: {created}")
result, seconds = interrupted("SELECT * FROM serving_build('big')")
print(
    f"serving_build: caller got {result}, {seconds:.3f} s after the interrupt; serving_meta.source is now "
    f"{c.execute('SELECT source FROM serving_meta').fetchone()[0]!r} (was 'small'), "
    f"fct_orders has {c.execute('SELECT count(*) FROM fct_orders').fetchone()[0]} rows"
)
