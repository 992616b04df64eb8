"""One layer per statement (issue 37, item 2): every reader and writer uses the catalog and schema its
`serving_meta` records, so same-named tables elsewhere on the search path (a dbt schema's own
`fct_orders`/`mart_daily` models, another ATTACHed database) never change an answer — the readers, the
refresh, and (issue 51) serving_publish, serving_follow's applies, serving_unfollow and serving_layers.

Oracle: plain Python sums over the rows inserted, and pypaimon's read of the published mart table."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from conftest import SEES_SEARCH_PATH, connect
from support.lake_util import Warehouse, read_mart
from support.live_util import status_dict, wait_for

ROWS = [
    (1, "acme", "2026-11-01", 1200),
    (2, "acme", "2026-11-01", 300),
    (3, "acme", "2026-11-02", 900),
    (4, "b", "2026-11-02", 50),
]
ROW = "SELECT {id}::BIGINT AS order_id, 'acme' AS company, DATE '2026-11-01' AS order_day, {v}::BIGINT AS revenue"
ACME = [("2026-11-01", 1500), ("2026-11-02", 900)]
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)


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


@pytest.mark.parametrize("use", ["USE dbt", "SET search_path = 'dbt,main'"])
def test_publish_follow_unfollow_and_layers_use_the_recorded_layer(tmp_path, use):
    """Issue 51: the writers that run beside the dashboard — serving_publish, serving_follow and its
    applies, serving_unfollow — and serving_layers also keep to the recorded layer under decoys on the
    search path. Oracle: plain Python sums, and pypaimon's read of the published mart table."""
    if not SEES_SEARCH_PATH:
        use = "SELECT 1"
    con = connect()
    wh = Warehouse(tmp_path / "wh")
    fact = wh.create("fct", ORDERS, ["order_id"], {"bucket": "1"})
    as_rows = [
        {"order_id": i, "company": c, "order_day": datetime.date.fromisoformat(d), "revenue": v} for i, c, d, v in ROWS
    ]
    fact.commit(as_rows)
    con.execute("SELECT * FROM serving_build(?)", ["paimon:" + wh.path("fct")])
    con.execute("CREATE SCHEMA dbt")
    con.execute("CREATE TABLE dbt.fct_orders AS " + ROW.format(id=9, v=999999))
    con.execute(
        "CREATE TABLE dbt.mart_daily AS SELECT company, order_day, revenue::HUGEINT AS revenue FROM dbt.fct_orders"
    )
    con.execute(use)
    # serving_layers: the one layer, never the decoy schema (it has no serving_meta).
    layers = con.execute("SELECT schema, fct_rows FROM serving_layers()").fetchall()
    assert layers == [("main", 4)], layers
    # serving_publish writes the layer's mart, not the decoy's.
    con.execute("SELECT * FROM serving_publish(?)", ["paimon:" + wh.path("mart")])
    want = {("acme", datetime.date(2026, 11, 1)): (1500, 2), ("acme", datetime.date(2026, 11, 2)): (900, 1)}
    want[("b", datetime.date(2026, 11, 2))] = (50, 1)
    assert read_mart(wh.catalog, "mart") == want
    # serving_follow applies the fact's next commit to the layer; the decoys stay as they were.
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", ["paimon:" + wh.path("fct")])
    fact.commit([{**as_rows[2], "revenue": 100}])
    wait_for(lambda: status_dict(con)["lake_snapshot"] == 2, 30, "the follower to apply snapshot 2")
    assert dash(con, "serving_dashboard") == [("2026-11-01", 1500), ("2026-11-02", 100)]
    followed = con.execute("SELECT followed FROM serving_unfollow()").fetchall()
    assert followed == [("paimon:" + wh.path("fct"),)], followed
    assert con.execute("SELECT revenue FROM dbt.mart_daily").fetchall() == [(999999,)]
    assert con.execute("SELECT count(*) FROM dbt.fct_orders").fetchone() == (1,)
