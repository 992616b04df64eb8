"""Reproducer: the Python interpreter exits while serving_build runs on a daemon thread.

Runs the scenario RUNS times in fresh processes of this venv's Python and counts the aborts
(SIGABRT, "terminate called ..." / "FATAL: exception not rethrown"). `control` does the same with
a long native query and no extension.

Measured: DuckDB 1.5.6 and 2.0.0 abort in both modes (their Python package's own bug). DuckDB 2.0.1
never aborts in the control (at exit it interrupts running queries, the thread gets
InterruptException and is gone in time) but aborts in about 1 run of 10 with streamhouse (RUNS=30 shows it):
serving_build does not stop when its caller is interrupted (see repro_interrupt_commits.py), so
the thread comes back while the interpreter is being torn down.

Usage (from the repo root, after `make release venv`):
    .venv/bin/python docs/repro/repro_daemon_exit.py [build|control] [RUNS=30]
    .venv-duckdb15/bin/python docs/repro/repro_daemon_exit.py control 3
"""

import os
import subprocess
import sys
import tempfile
import threading
import time

EXT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "release", "streamhouse.duckdb_extension"
)


def child(mode, db):
    import duckdb

    c = duckdb.connect(db, config={"allow_unsigned_extensions": "true"})
    if mode == "build":
        c.execute("LOAD '" + os.path.abspath(EXT) + "'")
        c.execute(
            "CREATE TABLE big AS SELECT i AS order_id, 'b' || (i % 97) AS company, "
            "DATE '2024-01-01' + CAST(i % 365 AS INTEGER) AS order_day, (i % 1000) - 300 AS revenue "
            "FROM range(1000000) t(i)"
        )
        sql = "SELECT * FROM serving_build('big')"
    else:
        sql = "SELECT count(*) FROM range(3000000000) t(i) WHERE i % 7 = 3"
    started = threading.Event()

    def work():
        cur = c.cursor()
        started.set()
        try:
            cur.execute(sql).fetchall()
        except duckdb.Error:
            pass

    threading.Thread(target=work, daemon=True).start()
    started.wait()
    time.sleep(0.05)
    # the interpreter exits here, the daemon thread still inside the query


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "build"
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    import duckdb

    aborts = 0
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run(
                [sys.executable, __file__, "--child", mode, os.path.join(tmp, "e.duckdb")],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        if p.returncode != 0:
            aborts += 1
            print(f"run {i + 1}: exit code {p.returncode}: {p.stderr.strip()!r}")
    print(f"DuckDB {duckdb.__version__}, {mode}: {aborts} of {runs} runs did not exit cleanly")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
