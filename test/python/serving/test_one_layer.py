"""One layer per statement (issue 37, item 2): every reader and writer uses the catalog and schema its
`serving_meta` records, so same-named tables elsewhere on the search path (a dbt schema's own
`fct_orders`/`mart_daily` models, another ATTACHed database) never change an answer.

Oracle: plain Python sums over the rows inserted."""

from __future__ import annotations

import pytest
from conftest import SEES_SEARCH_PATH, connect

ROWS = [
    (1, "acme", "2026-11-01", 1200),
    (2, "acme", "2026-11-01", 300),
    (3, "acme", "2026-11-02", 900),
    (4, "b", "2026-11-02", 50),
]
ROW = "SELECT {id}::BIGINT AS order_id, 'acme' AS company, DATE '2026-11-01' AS order_day, {v}::BIGINT AS revenue"
ACME = [("2026-11-01", 1500), ("2026-11-02", 900)]


def layer_with_decoys(con, use: str) -> None:
    con.execute("CREATE TABLE orders (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", [list(r) for r in ROWS])
    con.execute("SELECT * FROM serving_build('orders')")
    # A dbt project's own models of the same names, full of other numbers.
    con.execute("CREATE SCHEMA dbt")
    con.execute("CREATE TABLE dbt.fct_orders AS " + ROW.format(id=9, v=999999))
    con.execute(
        "CREATE TABLE dbt.mart_daily AS SELECT company, order_day, revenue::HUGEINT AS revenue FROM dbt.fct_orders"
    )
    con.execute(use)


def dash(con, fn: str) -> list:
    return [(str(d), int(v)) for d, v in con.execute(f"SELECT * FROM {fn}('acme')").fetchall()]


@pytest.mark.parametrize("use", ["USE dbt", "SET search_path = 'dbt,main'"])
def test_readers_and_writers_use_the_recorded_layer(use):
    if not SEES_SEARCH_PATH:
        use = "SELECT 1"
    con = connect()
    layer_with_decoys(con, use)
    assert dash(con, "serving_dashboard") == ACME
    assert dash(con, "serving_olap") == ACME
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    s = con.execute("SELECT fct_rows, mart_rows FROM serving_status()").fetchone()
    assert s == (4, 3), s
    plan = " ".join(r[2] for r in con.execute("SELECT * FROM serving_explain('acme')").fetchall())
    assert "mart_daily" in plan
    # A refresh writes the same layer the readers read.
    con.execute("CREATE TABLE main.ch AS " + ROW.format(id=3, v=100))
    con.execute("SELECT * FROM serving_refresh('main.ch')")
    assert dash(con, "serving_dashboard") == [("2026-11-01", 1600)]
    assert dash(con, "serving_olap") == [("2026-11-01", 1600)]
    assert con.execute("SELECT revenue FROM dbt.mart_daily").fetchall() == [(999999,)]


def test_an_attached_database_of_same_named_tables_never_answers(tmp_path):
    """A second database ATTACHed first on the search path, holding its own `fct_orders`/`mart_daily`
    (a warehouse file a dbt project also writes): unqualified names would find its tables first, the
    layer's `serving_meta` is only in the database it was built in, and every reader and writer still
    uses that one."""
    con = connect()
    home = con.execute("SELECT current_database()").fetchone()[0]
    con.execute("CREATE TABLE orders (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", [list(r) for r in ROWS])
    con.execute("SELECT * FROM serving_build('orders')")
    con.execute(f"ATTACH '{tmp_path / 'warehouse.duckdb'}' AS warehouse")
    con.execute("CREATE TABLE warehouse.main.fct_orders AS " + ROW.format(id=9, v=999999))
    con.execute(
        "CREATE TABLE warehouse.main.mart_daily AS "
        "SELECT company, order_day, revenue::HUGEINT AS revenue FROM warehouse.main.fct_orders"
    )
    if SEES_SEARCH_PATH:
        con.execute(f"SET search_path = 'warehouse.main,{home}.main'")
        # The premise: an unqualified name now finds the attached database's table.
        assert con.execute("SELECT sum(revenue) FROM fct_orders").fetchone()[0] == 999999
    assert dash(con, "serving_dashboard") == ACME
    assert dash(con, "serving_olap") == ACME
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    assert con.execute("SELECT fct_rows, mart_rows FROM serving_status()").fetchone() == (4, 3)
    con.execute(f"CREATE TABLE {home}.main.ch AS " + ROW.format(id=3, v=100))
    con.execute(f"SELECT * FROM serving_refresh('{home}.main.ch')")
    assert dash(con, "serving_dashboard") == [("2026-11-01", 1600)]
    assert dash(con, "serving_olap") == [("2026-11-01", 1600)]
    assert con.execute("SELECT revenue FROM warehouse.main.mart_daily").fetchall() == [(999999,)]
    assert con.execute("SELECT count(*) FROM warehouse.main.fct_orders").fetchone()[0] == 1
