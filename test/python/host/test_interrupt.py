"""An interrupted serving_build / serving_refresh is all-or-nothing: the previous serving layer
exactly as it was, or the new one, never part of it. The work runs on streamhouse's own
connection; its COMMIT waits until the caller pulls the result row, so an interrupt that lands
while the work runs rolls it back (it used to commit behind the statement's back). One window
is left, as for any client-side cancel: an interrupt that lands while the COMMIT itself runs is
reported although the commit happened (README)."""

import threading
import time

import duckdb
from conftest import connect

BIG = 1_500_000


def state(con):
    status = con.execute("SELECT source, fct_rows FROM serving_status()").fetchone()
    clean = con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
    return status, clean


def run_interrupted(con, sql, delay):
    outcome = {}

    def work():
        try:
            outcome["rows"] = con.execute(sql).fetchall()
        except duckdb.InterruptException as e:
            outcome["interrupted"] = str(e)
        except duckdb.Error as e:
            outcome["error"] = str(e)

    t = threading.Thread(target=work)
    t.start()
    time.sleep(delay)
    con.interrupt()
    t.join(60)
    assert not t.is_alive(), "the interrupted statement never returned"
    return outcome


def test_interrupted_build_and_refresh_are_all_or_nothing(tmp_path):
    con = connect(str(tmp_path / "db.duckdb"))
    con.execute(
        "CREATE TABLE small AS SELECT i AS order_id, 'c' || (i % 7) AS company, "
        "DATE '2026-01-01' + (i % 30)::INT AS order_day, i AS revenue FROM range(1000) t(i)"
    )
    con.execute(
        f"CREATE TABLE big AS SELECT i AS order_id, 'c' || (i % 7) AS company, "
        f"DATE '2026-01-01' + (i % 30)::INT AS order_day, i AS revenue FROM range({BIG}) t(i)"
    )
    con.execute(
        f"CREATE TABLE changes AS SELECT i AS order_id, 'c1' AS company, DATE '2026-02-01' AS order_day, "
        f"1 AS revenue FROM range(0, {BIG}, 3) t(i)"
    )
    seen = {"rolled_back": 0, "interrupted_in_commit": 0}
    for attempt in range(12):
        con.execute("SELECT * FROM serving_build('small')").fetchall()
        before = state(con)
        assert before == (("small", 1000), True)
        delay = 0.005 + 0.01 * attempt
        sql = "SELECT * FROM serving_build('big')" if attempt % 2 == 0 else "SELECT * FROM serving_refresh('changes')"
        out = run_interrupted(con, sql, delay)
        assert "error" not in out, out
        after = state(con)
        expected_rows = BIG if "build" in sql else 1000 + len(range(1002, BIG, 3))
        done = (("big" if "build" in sql else "small", expected_rows), True)
        if "interrupted" in out and after == before:
            seen["rolled_back"] += 1
        elif "interrupted" in out:
            seen["interrupted_in_commit"] += 1
            assert after == done, f"{sql} was interrupted and left part of its work: {after}"
        else:
            assert after == done, f"{sql} completed but the layer is {after}"
        # The writer is free again: the next build neither waits nor fails.
        started = time.perf_counter()
        con.execute("SELECT * FROM serving_build('small')").fetchall()
        assert time.perf_counter() - started < 10
    assert seen["rolled_back"] >= 3, f"interrupts during the work were not rolled back: {seen}"
