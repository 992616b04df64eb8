"""`FROM 'paimon:<dir>'` (issue 20): a table whose latest snapshot needs no merge is read by
DuckDB's own Parquet reader (READ_PARQUET in the plan), any other by paimon_scan (PAIMON_SCAN).
Either way the rows and column types must be paimon_scan's: the oracles are paimon-rust's reader
(`reader := 'paimon-rust'`) and the rows written, compared in Python. The plan is asserted in
every test, so a test of one form cannot silently pass through the other.
"""

from __future__ import annotations

import datetime
import threading
import time

import duckdb
import pyarrow as pa
import pytest
from conftest import build, connect, sql_literal
from support.lake_endpoint import HeldDataFiles
from support.lake_util import ORDERS, Warehouse, plain_rows, plain_schema
from support.lake_util import commit as commit_rows

PLAIN = "READ_PARQUET"
MERGED = "PAIMON_SCAN"


def lake(path: str) -> str:
    return sql_literal("paimon:" + path)


def route(con, path: str, sql: str = "SELECT * FROM {t}") -> str:
    plan = "\n".join(r[1] for r in con.execute("EXPLAIN " + sql.format(t=lake(path))).fetchall())
    found = {name for name in (PLAIN, MERGED) if name in plan}
    assert len(found) == 1, plan
    return found.pop()


def rows_of(con, sql: str) -> list:
    return sorted(con.execute(sql).fetchall(), key=repr)


def reference(con, path: str, columns: str = "*") -> list:
    return rows_of(con, f"SELECT {columns} FROM paimon_scan({sql_literal(path)}, reader := 'paimon-rust')")


def types(con, sql: str) -> list:
    return [(r[0], r[1]) for r in con.execute(f"DESCRIBE {sql}").fetchall()]


@pytest.fixture(scope="module")
def plain_table(tmp_path_factory) -> tuple[str, list[dict]]:
    """Every column type, one commit into 4 buckets (one sorted run per bucket: a compacted
    table reads the same), in a directory whose name holds a quote."""
    wh = Warehouse(tmp_path_factory.mktemp("plain") / "it's")
    rows = plain_rows(20_000)
    t = wh.create("t", plain_schema(), ["id"], {"bucket": "4", "merge-engine": "partial-update"})
    t.commit(rows)
    return wh.path("t"), rows


def test_a_plain_table_is_read_by_duckdbs_parquet_reader(plain_table, con):
    path, rows = plain_table
    assert route(con, path) == PLAIN
    cols = [f.name for f in plain_schema()]
    sel = ", ".join(f'"{c}"' for c in cols)
    got = rows_of(con, f"SELECT {sel} FROM {lake(path)}")
    assert got == reference(con, path, sel) == sorted((tuple(r[c] for c in cols) for r in rows), key=repr)
    # The column types are paimon_scan's, whatever the Parquet reader would make of the files.
    assert types(con, f"SELECT * FROM {lake(path)}") == types(con, f"SELECT * FROM paimon_scan({sql_literal(path)})")


def test_a_locked_down_sandbox_leaves_the_read_to_paimon_scan(plain_table, ext_path):
    """With enable_external_access off (the table's directory allowed), paimon_scan's judgement
    of the table applies, not DuckDB's reader's of its resolved file paths: same rows."""
    path, rows = plain_table
    con = connect(":memory:", ext_path)
    root = path.rsplit("/db.db/", 1)[0]
    con.execute(f"SET allowed_directories = [{sql_literal(root)}]")
    con.execute("SET enable_external_access = false")
    assert route(con, path) == MERGED
    assert con.execute(f"SELECT count(*), sum(id) FROM {lake(path)}").fetchone() == (len(rows), sum(range(len(rows))))
    con.close()


def test_a_macro_named_read_parquet_cannot_stand_in(plain_table, con):
    path, rows = plain_table
    con.execute("CREATE MACRO read_parquet(x) AS TABLE SELECT 42 AS id")
    assert route(con, path) == PLAIN
    assert rows_of(con, f"SELECT id FROM {lake(path)}") == sorted(((r["id"],) for r in rows), key=repr)


def test_filters_and_projections_reach_the_parquet_reader(plain_table, con):
    path, rows = plain_table
    sql = "SELECT count(*), sum(qty) FROM {t} WHERE id < 5000 AND name IS NOT NULL"
    assert route(con, path, sql) == PLAIN
    got = con.execute(sql.format(t=lake(path))).fetchone()
    kept = [r for r in rows if r["id"] < 5000 and r["name"] is not None]
    assert got == (len(kept), sum(r["qty"] for r in kept if r["qty"] is not None))
    plan = "\n".join(r[1] for r in con.execute("EXPLAIN " + sql.format(t=lake(path))).fetchall())
    assert "id<5000" in plan.replace(" ", ""), plan  # pushed into the scan, not filtered after it
    assert con.execute(f"SELECT count(*) FROM {lake(path)}").fetchone() == (len(rows),)


def test_partitions_and_append_tables_read_plain(tmp_path, con):
    wh = Warehouse(tmp_path / "wh")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string(), nullable=False)])
    from pypaimon import Schema

    spec = Schema.from_pyarrow_schema(
        schema, partition_keys=["region"], primary_keys=["id", "region"], options={"bucket": "2"}
    )
    wh.catalog.create_table("db.parts", spec, False)
    rows = [{"id": i, "region": ["eu", "us", "apac"][i % 3]} for i in range(3000)]
    commit_rows(wh.catalog.get_table("db.parts"), schema, rows)
    appended = wh.create("log", schema, None, {"bucket": "-1"})
    appended.commit(rows[:100])
    appended.commit(rows[:100])  # an append table keeps both copies
    for name, want in [("parts", rows), ("log", rows[:100] * 2)]:
        path = wh.path(name)
        assert route(con, path) == PLAIN, name
        got = rows_of(con, f"SELECT id, region FROM {lake(path)}")
        assert got == reference(con, path, "id, region") == sorted(((r["id"], r["region"]) for r in want), key=repr)


def test_a_table_that_needs_a_merge_is_read_by_paimon_scan(tmp_path, con):
    """Overlapping commits, files of an older schema and a table without snapshots all go to
    paimon_scan, and give its answer."""
    wh = Warehouse(tmp_path / "wh")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    t = wh.create("t", schema, ["id"], {"bucket": "1", "merge-engine": "deduplicate"})
    t.commit([{"id": i, "v": i} for i in range(100)])
    path = wh.path("t")
    assert route(con, path) == PLAIN
    t.commit([{"id": i, "v": -i} for i in range(50, 150)])
    assert route(con, path) == MERGED
    want = sorted([(i, i) for i in range(50)] + [(i, -i) for i in range(50, 150)], key=repr)
    assert rows_of(con, f"SELECT id, v FROM {lake(path)}") == reference(con, path, "id, v") == want
    wh.create("empty", schema, ["id"], {"bucket": "1"})  # created, never committed to
    assert route(con, wh.path("empty")) == MERGED
    assert con.execute(f"SELECT count(*) FROM {lake(wh.path('empty'))}").fetchone() == (0,)


def test_a_prepared_statement_reads_the_latest_snapshot(tmp_path, con):
    """EXECUTE binds the statement again, so the table is planned again: a commit after PREPARE
    (which turns the plain table into one that needs a merge) is seen, merged."""
    wh = Warehouse(tmp_path / "wh")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    t = wh.create("t", schema, ["id"], {"bucket": "1", "merge-engine": "deduplicate"})
    t.commit([{"id": i, "v": i} for i in range(10)])
    path = wh.path("t")
    con.execute(f"PREPARE q AS SELECT count(*), sum(v) FROM {lake(path)}")
    assert con.execute("EXECUTE q").fetchone() == (10, sum(range(10)))
    t.commit([{"id": i, "v": 100} for i in range(5, 15)])
    assert route(con, path) == MERGED
    assert con.execute("EXECUTE q").fetchone() == (15, sum(range(5)) + 100 * 10)


def test_bad_paths_get_paimon_scans_errors(tmp_path, con):
    (tmp_path / "not_paimon").mkdir()
    for path in [str(tmp_path / "nowhere"), str(tmp_path / "not_paimon"), ""]:
        with pytest.raises(duckdb.Error) as ours:
            con.execute(f"SELECT * FROM {lake(path)}").fetchall()
        with pytest.raises(duckdb.Error) as scans:
            con.execute(f"SELECT * FROM paimon_scan({sql_literal(path)})").fetchall()
        # The same error; only DuckDB's pointer into the statement text differs.
        assert str(ours.value).split("\n")[0] == str(scans.value).split("\n")[0], path
        assert not path or path in str(ours.value)  # the empty path: the message names no path
    # A name without the prefix is DuckDB's as before.
    with pytest.raises(duckdb.CatalogException, match="nowhere_table"):
        con.execute("SELECT * FROM nowhere_table").fetchall()


def test_busy_connections_never_wait_and_never_change_an_answer(plain_table, ext_path):
    """More statements at once than streamhouse has reader connections (8): a statement that
    finds none free for a moment is read by paimon_scan instead of waiting longer. Every answer
    is the same, and none waits forever (the suite's timeout)."""
    path, rows = plain_table
    con = connect(":memory:", ext_path)
    want = (len(rows), sum(r["qty"] for r in rows if r["qty"] is not None))
    answers, errors = [], []

    def worker():
        cur = con.cursor()
        try:
            for _ in range(5):
                answers.append(cur.execute(f"SELECT count(*), sum(qty) FROM {lake(path)}").fetchone())
        except Exception as e:  # collected and asserted below
            errors.append(e)
        finally:
            cur.close()

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert answers == [want] * 60
    con.close()


# streamhouse's reader connections per database (src/host/session.rs, READERS).
READERS = 8
LTS = duckdb.__version__.startswith("1.4.")


def test_with_every_reader_connection_busy_the_read_falls_back_to_paimon_scan(plain_table, ext_path, tmp_path):
    """The fallback itself, made to happen: all 8 reader connections are held by serving_olap
    calls whose lake fact lives on an endpoint that answers the table's metadata (opened at bind)
    and holds every read of its data files unanswered (a reader function keeps its connection
    while it reads). A plain table named in FROM is then planned by paimon_scan after a moment's
    wait (not READ_PARQUET, and not a wait for a connection) with the same answer; once the
    endpoint answers, the calls fail by name and the plain route is back (the control)."""
    path, rows = plain_table
    want = (len(rows), sum(r["qty"] for r in rows if r["qty"] is not None))
    con = connect(":memory:", ext_path)
    con.execute("CREATE TABLE o AS SELECT 1::BIGINT AS order_id, 'acme' AS company, DATE '2026-01-01' AS order_day, "
                "5::BIGINT AS revenue")  # fmt: skip
    build(con, "o")
    assert route(con, path) == PLAIN  # the control before
    fact = "paimon:s3://lake/wh/db.db/orders"
    bucket = tmp_path / "bucket"
    orders = Warehouse(bucket / "wh").create("orders", ORDERS, ["order_id"], {"bucket": "1"})
    orders.commit([{"order_id": 1, "company": "acme", "order_day": datetime.date(2026, 1, 1), "revenue": 5}])
    errors: list = []
    with HeldDataFiles(str(bucket)) as stub:
        options = {
            "s3.endpoint": f"http://127.0.0.1:{stub.port}",
            "s3.access-key": "k",
            "s3.secret-key": "secret-key",
            "s3.region": "us-east-1",
            "s3.path-style-access": "true",
        }
        opts = {"key": list(options), "value": list(options.values())}

        def hold_a_reader():
            cur = con.cursor()
            try:
                cur.execute(
                    "SELECT * FROM serving_olap('acme', fact := $1, options := $2::MAP(VARCHAR, VARCHAR))", [fact, opts]
                ).fetchall()
            except duckdb.Error as e:
                errors.append(str(e))
            finally:
                cur.close()

        threads = [threading.Thread(target=hold_a_reader) for _ in range(READERS)]
        for t in threads:
            t.start()
        # DuckDB 1.4's artifact reads the sandbox settings on a reader connection at paimon_scan's
        # bind (src/functions/glue/settings.rs), so there the fallback waits for a reader: the
        # endpoint lets go after 3 s. Elsewhere after 30 s, only so that nothing can hang.
        safety = threading.Timer(3.0 if LTS else 30.0, stub.release)
        safety.start()
        try:
            deadline = time.monotonic() + 30
            while stub.held < READERS and time.monotonic() < deadline:
                time.sleep(0.02)
            assert stub.held >= READERS, f"only {stub.held} of {READERS} readers reached the data files"
            started = time.monotonic()
            assert route(con, path) == MERGED, "with no reader connection free the read still went to READ_PARQUET"
            waited = time.monotonic() - started
            if not LTS:
                assert 0.2 <= waited < 10, f"the fallback took {waited:.2f} s: expected one short wait (250 ms)"
            assert con.execute(f"SELECT count(*), sum(qty) FROM {lake(path)}").fetchone() == want
        finally:
            safety.cancel()
            stub.release()
            for t in threads:
                t.join(60)
    assert not any(t.is_alive() for t in threads), "a held serving_olap call never returned"
    assert len(errors) == READERS, errors
    assert all("serving_olap" in e and "s3://lake/wh/db.db/orders" in e for e in errors), errors
    assert route(con, path) == PLAIN  # the control after: connections free, the plain route again
    con.close()


def orders_table(tmp_path):
    """500 orders of 3 companies over 5 days, written once into a 2-bucket partial-update table
    at tmp_path/wh (db.orders); the table and the rows."""
    from support.lake_util import ORDERS

    wh = Warehouse(tmp_path / "wh")
    rows = [
        {"order_id": i, "company": f"c{i % 3}", "order_day": datetime.date(2024, 1, 1 + i % 5), "revenue": i}
        for i in range(500)
    ]
    t = wh.create("orders", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    t.commit(rows)
    return t, rows


def test_a_view_over_the_lake_builds_the_serving_layer(tmp_path, con):
    """The replacement scan runs inside serving_build's own statement on streamhouse's
    connection (a view resolved there): it must neither wait for that connection nor change
    the layer's answer."""
    _, rows = orders_table(tmp_path)
    path = Warehouse(tmp_path / "wh").path("orders")
    assert route(con, path) == PLAIN
    con.execute(f"CREATE VIEW lake_orders AS SELECT * FROM {lake(path)}")
    build(con, "lake_orders")
    revenue = sum(r["revenue"] for r in rows)
    assert con.execute("SELECT count(*), sum(revenue) FROM fct_orders").fetchone() == (len(rows), revenue)
    mart = con.execute("SELECT company, sum(revenue) FROM mart_daily GROUP BY 1 ORDER BY 1").fetchall()
    companies = sorted({r["company"] for r in rows})
    assert mart == [(c, sum(r["revenue"] for r in rows if r["company"] == c)) for c in companies]


def test_a_build_from_a_plain_table_loads_through_the_parquet_reader(tmp_path, con):
    """serving_build('paimon:<dir>') of a snapshot that needs no merge loads with DuckDB's own
    Parquet reader (the statements it ran, from DuckDB's query log, name read_parquet); one that
    needs a merge does not. Both layers equal the oracle computed here from the rows written."""
    t, rows = orders_table(tmp_path)
    wh = Warehouse(tmp_path / "wh")
    fixes = [{"order_id": i, "company": None, "order_day": None, "revenue": 1000 + i} for i in range(0, 500, 7)]
    con.execute("CALL enable_logging('QueryLog')")
    for commits, plain in [(1, True), (2, False)]:
        if commits == 2:
            t.commit(fixes)
        con.execute("CALL truncate_duckdb_logs()")
        build(con, "paimon:" + wh.path("orders"))
        logged = [r[0] for r in con.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'").fetchall()]
        assert any("read_parquet" in m for m in logged) == plain, (commits, logged)
        revenue = {r["order_id"]: r["revenue"] for r in rows}
        if commits == 2:
            revenue.update({f["order_id"]: f["revenue"] for f in fixes})
        mart: dict = {}
        for r in rows:
            key = (r["company"], r["order_day"])
            mart[key] = mart.get(key, 0) + revenue[r["order_id"]]
        assert con.execute("SELECT count(*), sum(revenue) FROM fct_orders").fetchone() == (500, sum(revenue.values()))
        got = con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
        assert got == sorted((c, d, v) for (c, d), v in mart.items())
