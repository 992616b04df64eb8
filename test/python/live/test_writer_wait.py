"""Writers take turns, and the turn is bounded (docs/lifecycle.md): a second writer waits for the
running one up to `wait := INTERVAL` (120 s when left out), then fails with "another build/refresh
is running on this database (waited ... for it)", changing nothing. The bound is what keeps a
source view that itself calls a writer from waiting for ever for its own caller.

A writer is held for a known time by the very case the bound exists for: a build from a view
whose rows call serving_refresh waits (on the writer connection the build holds) for the inner
refresh's `wait`, then fails. Oracles: the clock, the exact message, and the layer's rows against
plain-Python sums of the orders (conftest's oracle), never the extension.
"""

from __future__ import annotations

import threading
import time

import duckdb
import pytest
from conftest import connect, gen_rows, oracle

BUSY = (
    "{function}: another build/refresh is running on this database (waited {waited} for it); "
    "try again when it has finished"
)
ROWS, _ = gen_rows(seed=71, n_rows=400, n_companies=5, n_days=9)


@pytest.fixture
def db(tmp_path):
    """A file database with the orders built, a change set, and the view that holds the writer:
    reading `held_<ms>` calls serving_refresh('changes', wait := <ms> ms) on the build's writer."""
    path = str(tmp_path / "wait.duckdb")
    con = connect(path)
    con.execute("CREATE TABLE orders (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ROWS)
    con.execute("CREATE TABLE changes AS SELECT *, false AS deleted FROM orders LIMIT 3")
    for ms in (1000, 4000):
        con.execute(
            f"CREATE VIEW held_{ms} AS SELECT * FROM orders WHERE "
            f"(SELECT count(*) FROM serving_refresh('changes', wait := INTERVAL '{ms} milliseconds')) >= 0"
        )
    con.execute("SELECT * FROM serving_build('orders')").fetchall()
    yield path, con
    con.close()


def served(con) -> tuple:
    return (
        con.execute("SELECT * FROM fct_orders ORDER BY order_id").fetchall(),
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall(),
    )


def assert_serves_the_orders(con) -> None:
    fct, mart = served(con)
    assert fct == sorted(ROWS), "fct_orders is not the orders"
    want = sorted((c, d, r) for (c, d), r in oracle(ROWS)[1].items())
    assert [(c, d, int(r)) for c, d, r in mart] == want, "mart_daily is not the orders' sums"


def test_a_writer_inside_a_writer_fails_after_its_wait_and_changes_nothing(db):
    """The nested case: the build holds the writer, the refresh its view calls waits 1 s for it, then
    the build fails naming the refresh and its wait, after that one wait (the source is not read
    again to find an offending row: each read would wait again); the layer is the one before."""
    _, con = db
    t0 = time.monotonic()
    with pytest.raises(duckdb.Error) as e:
        con.execute("SELECT * FROM serving_build('held_1000')").fetchall()
    took = time.monotonic() - t0
    assert BUSY.format(function="serving_refresh", waited="1 s") in str(e.value), str(e.value)
    assert 1.0 <= took < 2.5, f"the build failed after {took:.2f} s, not after the nested refresh's 1 s wait"
    assert_serves_the_orders(con)


def hold_the_writer(path: str, started: threading.Event, out: dict) -> threading.Thread:
    """Another connection's build of `held_4000`: it holds the writer ~4 s, then fails."""

    def run():
        c = duckdb.connect(path, config={"allow_unsigned_extensions": "true"})
        try:
            started.set()
            c.execute("SELECT * FROM serving_build('held_4000')").fetchall()
            out["held"] = "succeeded"
        except duckdb.Error as e:
            out["held"] = str(e)
        finally:
            c.close()

    t = threading.Thread(target=run)
    t.start()
    started.wait(10)
    time.sleep(1.0)  # the build has taken the writer (its own inner refresh waits 4 s for it)
    return t


def test_a_second_writer_waits_its_wait_then_says_so(db):
    path, con = db
    out: dict = {}
    held = hold_the_writer(path, threading.Event(), out)
    try:
        for function, sql in [
            ("serving_refresh", "SELECT * FROM serving_refresh('changes', wait := INTERVAL '500 ms')"),
            ("serving_build", "SELECT * FROM serving_build('orders', wait := INTERVAL '0.25 seconds')"),
            ("serving_build", "SELECT * FROM serving_build('orders', wait := INTERVAL '0 seconds')"),
        ]:
            waited = sql.split("INTERVAL '")[1].split("'")[0].replace(" seconds", " s").replace("500 ms", "0.5 s")
            t0 = time.monotonic()
            with pytest.raises(duckdb.Error) as e:
                con.execute(sql).fetchall()
            took = time.monotonic() - t0
            assert "held" not in out, f"the held writer ended too early for the test: {out}"
            assert BUSY.format(function=function, waited=waited) in str(e.value), str(e.value)
            want = float(waited.split()[0])
            assert want <= took < want + 1.5, f"{sql}: gave up after {took:.2f} s"
    finally:
        held.join(30)
    assert BUSY.format(function="serving_refresh", waited="4 s") in out["held"], out
    assert_serves_the_orders(con)


def test_writers_take_turns_within_the_wait(db):
    """A writer whose wait outlasts the running one waits for it, then runs."""
    path, con = db
    out: dict = {}
    held = hold_the_writer(path, threading.Event(), out)
    try:
        t0 = time.monotonic()
        got = con.execute(
            "SELECT fct_rows, mart_rows FROM serving_build('orders', wait := INTERVAL '30 seconds')"
        ).fetchall()
        took = time.monotonic() - t0
    finally:
        held.join(30)
    # Held ~4 s from about 1 s before the build was called: it waited its turn (about 3 s).
    assert took >= 2.5, f"the build ran after {took:.2f} s, while another writer held the writer connection"
    assert BUSY.format(function="serving_refresh", waited="4 s") in out["held"], out
    assert got == [(len(ROWS), len(oracle(ROWS)[1]))], got
    assert_serves_the_orders(con)


@pytest.mark.parametrize("function", ["serving_build", "serving_refresh", "serving_publish"])
@pytest.mark.parametrize(
    "wait,shown",
    [
        ("INTERVAL '-1 second'", "-00:00:01"),
        ("INTERVAL '61 minutes'", "01:01:00"),
        ("INTERVAL '1 month'", "1 month"),
        ("NULL::INTERVAL", None),
    ],
)
def test_a_bad_wait_is_refused_by_name(db, function, wait, shown):
    _, con = db
    before = served(con)
    arg = {"serving_build": "'orders'", "serving_refresh": "'changes'", "serving_publish": "'/nonexistent/mart'"}
    with pytest.raises(duckdb.Error) as e:
        con.execute(f"SELECT * FROM {function}({arg[function]}, wait := {wait})").fetchall()
    if shown is None:
        said = f"{function}: parameter 'wait' must not be NULL"
    else:
        said = (
            f"{function}: parameter 'wait' = '{shown}': must be an INTERVAL from 0 seconds to 1 hour "
            "(how long to wait for a running build or refresh of this database)"
        )
    assert said in str(e.value), str(e.value)
    assert served(con) == before
