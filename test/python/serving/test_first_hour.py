"""A new user's first hour: streamhouse never replaces their tables and never ignores what they
meant. One test per finding; each fails on the behaviour before it was fixed. Oracles: the rows
written here, aggregated in plain Python."""

from __future__ import annotations

import datetime

import duckdb
import pyarrow as pa
import pytest
from conftest import build, connect, dashboard, sql_literal
from support.lake_util import Warehouse

ORDERS = [
    (1, "acme", datetime.date(2026, 11, 1), 1200),
    (2, "acme", datetime.date(2026, 11, 1), 300),
    (3, "acme", datetime.date(2026, 11, 2), 900),
    (4, "O'Reilly", datetime.date(2026, 11, 2), 50),
]


def make_orders(con, name="orders", rows=ORDERS):
    con.execute(f"CREATE OR REPLACE TABLE {name} (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?, ?)", rows)


def python_dashboard(rows, company):
    days = {}
    for _, c, d, r in rows:
        if c == company:
            days[d] = days.get(d, 0) + r
    return sorted(days.items(), key=lambda kv: (-kv[1], kv[0]))


# -- 1. a build never replaces a table streamhouse did not create --------------------------------


def test_build_refuses_to_replace_the_users_fct_orders(con):
    make_orders(con)
    con.execute("CREATE TABLE fct_orders AS SELECT 1::BIGINT AS order_id, 'precious' AS note")
    with pytest.raises(duckdb.Error) as e:
        build(con, "orders")
    msg = str(e.value)
    assert "serving_build: a table" in msg and "fct_orders (order_id BIGINT, note VARCHAR)" in msg, msg
    assert "was not created by streamhouse" in msg and "replace := true" in msg and "USE" in msg, msg
    assert con.execute("SELECT note FROM fct_orders").fetchall() == [("precious",)]
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'mart_daily'").fetchone()[0] == 0


def test_build_refuses_to_replace_the_users_mart_daily_and_a_view(con):
    make_orders(con)
    con.execute("CREATE TABLE mart_daily (x INT)")
    with pytest.raises(duckdb.Error, match=r"a table .*mart_daily \(x INTEGER\) already exists"):
        build(con, "orders")
    con.execute("DROP TABLE mart_daily")
    con.execute("CREATE VIEW mart_daily AS SELECT 1 AS x")
    with pytest.raises(duckdb.Error, match=r"a view .*mart_daily already exists and was not created by streamhouse"):
        build(con, "orders")
    assert con.execute("SELECT * FROM mart_daily").fetchall() == [(1,)]


def test_a_table_of_the_layers_shape_without_a_recorded_layer_is_the_users(con):
    make_orders(con)
    con.execute("CREATE TABLE fct_orders AS SELECT * FROM orders")  # exactly our shape, but no layer
    with pytest.raises(duckdb.Error, match="was not created by streamhouse"):
        build(con, "orders")


def test_replace_true_lets_the_build_drop_them(con):
    make_orders(con)
    con.execute("CREATE TABLE fct_orders AS SELECT 'precious' AS note")
    con.execute("CREATE TABLE mart_daily (x INT)")
    con.execute("SELECT * FROM serving_build('orders', replace := true)").fetchall()
    assert dashboard(con, "acme") == python_dashboard(ORDERS, "acme")
    assert con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == len(ORDERS)


def test_rebuilding_its_own_layer_needs_no_replace(con):
    make_orders(con)
    build(con, "orders")
    more = [*ORDERS, (5, "acme", datetime.date(2026, 11, 3), 7)]
    make_orders(con, "orders", more)
    assert build(con, "orders")["fct_rows"] == len(more)
    assert dashboard(con, "acme") == python_dashboard(more, "acme")


def test_a_layer_table_the_user_replaced_by_hand_is_refused(con):
    make_orders(con)
    build(con, "orders")
    con.execute("DROP TABLE mart_daily")
    con.execute("CREATE TABLE mart_daily AS SELECT 'mine' AS owner")
    with pytest.raises(duckdb.Error, match=r"mart_daily \(owner VARCHAR\) already exists"):
        build(con, "orders")
    assert con.execute("SELECT owner FROM mart_daily").fetchall() == [("mine",)]


def test_a_build_in_another_schema_leaves_the_users_table_alone(con):
    make_orders(con)
    con.execute("CREATE TABLE fct_orders AS SELECT 'precious' AS note")
    con.execute("CREATE SCHEMA serving")
    con.execute("USE serving")
    build(con, "main.orders")
    assert dashboard(con, "acme") == python_dashboard(ORDERS, "acme")
    assert con.execute("SELECT note FROM main.fct_orders").fetchall() == [("precious",)]


# -- 2. a change set's delete flag can be named; a look-alike is refused, never ignored ----------


def build_and_change(con, changes_sql):
    make_orders(con)
    build(con, "orders")
    con.execute(f"CREATE OR REPLACE TABLE changes AS {changes_sql}")


def refresh_row(con, sql):
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return dict(zip(names, cur.fetchone(), strict=True))


@pytest.mark.parametrize(
    "column, value",
    [("op", "'D'"), ("is_deleted", "1"), ("row_kind", "'-D'"), ("OP", "'D'")],
)
def test_a_delete_flag_look_alike_is_refused_with_the_hint(con, column, value):
    build_and_change(
        con,
        f"SELECT 4::BIGINT AS order_id, 'O''Reilly' AS company, DATE '2026-11-02' AS order_day, 50 AS revenue, "
        f"{value} AS {column}",
    )
    before = con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
    with pytest.raises(duckdb.Error) as e:
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
    msg = str(e.value)
    assert f"serving_refresh: change set 'changes' has a column '{column}'" in msg, msg
    assert "looks like a delete flag" in msg and "deleted := " in msg, msg
    assert con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == before


@pytest.mark.parametrize(
    "flag_sql, deleted",
    [
        ("'D' AS op", "op = 'D'"),
        ("1 AS is_deleted", "is_deleted = 1"),
        ("true AS gone", "gone"),
        ("true AS gone", "GONE"),
    ],
)
def test_deleted_names_the_flag(con, flag_sql, deleted):
    build_and_change(
        con,
        f"SELECT 4::BIGINT AS order_id, NULL::VARCHAR AS company, NULL::DATE AS order_day, NULL::BIGINT AS revenue, "
        f"{flag_sql}",
    )
    got = refresh_row(con, f"SELECT * FROM serving_refresh('changes', deleted := {duckdb_literal(deleted)})")
    assert (got["updated"], got["deleted"]) == (0, 1)
    remaining = [o for o in ORDERS if o[0] != 4]
    assert dashboard(con, "O'Reilly") == python_dashboard(remaining, "O'Reilly") == []
    assert dashboard(con, "acme") == python_dashboard(remaining, "acme")
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0


def test_deleted_expression_mixing_updates_and_deletes(con):
    build_and_change(
        con,
        "SELECT * FROM (VALUES (3::BIGINT, 'acme', DATE '2026-11-01', 100::BIGINT, 'U'), "
        "(4, NULL, NULL, NULL, 'D')) t(order_id, company, order_day, revenue, op)",
    )
    got = refresh_row(con, "SELECT * FROM serving_refresh('changes', deleted := 'op = ''D''')")
    assert (got["updated"], got["deleted"]) == (1, 1)
    after = [(1, "acme", datetime.date(2026, 11, 1), 1200), (2, "acme", datetime.date(2026, 11, 1), 300)]
    after.append((3, "acme", datetime.date(2026, 11, 1), 100))
    assert dashboard(con, "acme") == python_dashboard(after, "acme")


@pytest.mark.parametrize(
    "deleted, problem",
    [
        ("op", "column 'deleted' of source 'changes' has type VARCHAR (column 'op'), expected BOOLEAN; for a flag"),
        ("nope = 1", "parameter 'deleted' = 'nope = 1': not a column or boolean expression"),
        ("1 + 1", "parameter 'deleted' = '1 + 1': its type is INTEGER, not BOOLEAN"),
        ("", "parameter 'deleted' = '': give the BOOLEAN column or the boolean expression"),
    ],
)
def test_a_bad_deleted_is_refused_naming_it(con, deleted, problem):
    build_and_change(
        con, "SELECT 4::BIGINT AS order_id, 'x' AS company, DATE '2026-11-02' AS order_day, 1 AS revenue, 'D' AS op"
    )
    with pytest.raises(duckdb.Error) as e:
        con.execute(f"SELECT * FROM serving_refresh('changes', deleted := {duckdb_literal(deleted)})").fetchall()
    msg = str(e.value)
    assert problem in msg, msg


def test_a_non_boolean_deleted_column_says_how_to_get_there(con):
    build_and_change(
        con, "SELECT 4::BIGINT AS order_id, 'x' AS company, DATE '2026-11-02' AS order_day, 1 AS revenue, 1 AS deleted"
    )
    with pytest.raises(
        duckdb.Error, match=r"INTEGER \(column 'deleted'\), expected BOOLEAN; .*deleted := 'op = ''D'''"
    ):
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()


def duckdb_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- 3. a build of another source stops the follower and says so -------------------------------

LAKE_ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)


def lake_orders(wh, name, rows):
    t = wh.create(name, LAKE_ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
    t.commit([dict(zip(["order_id", "company", "order_day", "revenue"], r, strict=True)) for r in rows])
    return t


def status(con):
    cur = con.execute("SELECT * FROM serving_status()")
    names = [d[0] for d in cur.description]
    return dict(zip(names, cur.fetchone(), strict=True))


def test_a_build_of_another_source_stops_the_follower(con, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    lake_orders(wh, "d", ORDERS)
    followed = "paimon:" + wh.path("d")
    build(con, followed)
    con.execute(f"SELECT * FROM serving_follow('{followed}', every := INTERVAL '20 ms')").fetchall()
    assert status(con)["following"] == followed
    make_orders(con)
    got = build(con, "orders")
    assert got["stopped_following"] == followed
    st = status(con)
    assert st["source"] == "orders" and st["following"] is None, st
    # A rebuild from the followed table itself keeps it followed.
    build(con, followed)
    con.execute(f"SELECT * FROM serving_follow('{followed}', every := INTERVAL '20 ms')").fetchall()
    assert build(con, followed)["stopped_following"] is None
    assert status(con)["following"] == followed
    con.execute("SELECT * FROM serving_unfollow()").fetchall()


# -- 4. lake paths are recorded absolute --------------------------------------------------------


def test_a_relative_lake_path_is_recorded_absolute(con, tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    lake_orders(wh, "t", ORDERS)
    monkeypatch.chdir(tmp_path)
    got = build(con, "paimon:wh/db.db/t")
    absolute = "paimon:" + str((tmp_path / "wh" / "db.db" / "t").resolve())
    assert got["source"] == absolute
    monkeypatch.chdir("/")
    st = status(con)
    assert st["source"] == absolute and st["lake_latest_snapshot"] == 1, st
    got = refresh_row(con, f"SELECT * FROM serving_refresh('{absolute}')")
    assert got["lake_snapshot"] == 1
    assert dashboard(con, "acme") == python_dashboard(ORDERS, "acme")


# -- 7. read-only databases: every reader works, writers say why they cannot -------------------


def test_read_only_database_readers_work_writers_say_read_only(ext_path, tmp_path):
    db = str(tmp_path / "ro.duckdb")
    c = connect(db, ext_path)
    make_orders(c)
    build(c, "orders")
    c.close()
    wait_released(db)
    c = duckdb.connect(db, read_only=True, config={"allow_unsigned_extensions": "true"})
    c.execute(f"LOAD '{ext_path}'")
    try:
        assert dashboard(c, "acme") == python_dashboard(ORDERS, "acme")
        assert dashboard(c, "acme", "serving_olap") == python_dashboard(ORDERS, "acme")
        assert c.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
        assert status(c)["last_reconcile_clean"] is True
        for sql in ("SELECT * FROM serving_build('orders')", "SELECT * FROM serving_refresh('orders')"):
            function = sql.split("FROM ")[1].split("(")[0]
            with pytest.raises(duckdb.Error) as e:
                c.execute(sql).fetchall()
            msg = str(e.value)
            assert f"{function}: the database 'ro' is read-only" in msg and "open it read-write" in msg, msg
    finally:
        c.close()


def wait_released(db, seconds=5.0):
    """Until another instance may open the file (the extension's connections let go of it)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            duckdb.connect(db, read_only=True).close()
            return
        except duckdb.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


# -- 10/11/12. errors say what to do, start with the function, and nothing meant is ignored -----


@pytest.mark.parametrize(
    "column_sql, want",
    [
        ("CAST(revenue AS DECIMAL(10,2)) AS revenue", "CAST(round(amount * 100) AS BIGINT) AS revenue"),
        ("CAST(revenue AS DOUBLE) AS revenue", "CAST(round(amount * 100) AS BIGINT) AS revenue"),
    ],
)
def test_a_decimal_revenue_says_how_to_get_there(con, column_sql, want):
    make_orders(con)
    con.execute(f"CREATE TABLE dec_orders AS SELECT order_id, company, order_day, {column_sql} FROM orders")
    with pytest.raises(duckdb.Error) as e:
        build(con, "dec_orders")
    assert str(e.value).startswith("Invalid Input Error: serving_build: column 'revenue'"), str(e.value)
    assert want in str(e.value)


def test_a_timestamp_order_day_says_how_to_get_there(con):
    make_orders(con)
    con.execute(
        "CREATE TABLE ts_orders AS SELECT order_id, company, CAST(order_day AS TIMESTAMP) AS order_day, "
        "revenue FROM orders"
    )
    with pytest.raises(duckdb.Error, match=r"serving_build: column 'order_day' .*CAST\(ts AS DATE\) AS order_day"):
        build(con, "ts_orders")


def test_errors_start_with_the_function_and_a_file_gets_no_temp_note(con, tmp_path):
    make_orders(con)
    build(con, "orders")
    for sql, function in [
        ("SELECT * FROM serving_build('no_such_table')", "serving_build"),
        ("SELECT * FROM serving_refresh('no_such_table')", "serving_refresh"),
    ]:
        with pytest.raises(duckdb.Error) as e:
            con.execute(sql).fetchall()
        assert f"{function}: source 'no_such_table' does not exist" in str(e.value), str(e.value)
        assert "TEMP tables" in str(e.value)
    missing = str(tmp_path / "missing.parquet")
    with pytest.raises(duckdb.Error) as e:
        build(con, missing)
    assert "serving_build: source" in str(e.value) and "TEMP" not in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda p: None, "no such file or directory"),
        (lambda p: p.mkdir(), "it is a directory but not a Paimon table (it has no schema/ subdirectory)"),
    ],
)
def test_a_path_without_an_extension_says_what_is_there(con, tmp_path, make, said):
    path = tmp_path / "does" / "not" / "exist"
    path.parent.mkdir(parents=True)
    make(path)
    with pytest.raises(duckdb.Error) as e:
        build(con, str(path))
    msg = str(e.value)
    assert f"serving_build: source '{path}' is not usable: {said}" in msg, msg
    assert "file extension" not in msg and "paimon:<dir>" in msg


def test_options_for_a_table_source_are_refused(con):
    make_orders(con)
    for sql in (
        "SELECT * FROM serving_build('orders', options := MAP {'s3.region': 'eu-west-1'})",
        "SELECT * FROM serving_refresh('orders', options := MAP {'s3.region': 'eu-west-1'})",
    ):
        with pytest.raises(duckdb.Error) as e:
            con.execute(sql).fetchall()
        function = sql.split("FROM ")[1].split("(")[0]
        assert str(e.value).startswith(
            f"Binder Error: {function}: parameter 'options' = 'MAP {{…}}': storage options ('s3.region') are for "
            "Paimon tables on object storage (s3://...), and 'orders' is not on object storage: leave options out"
        ), str(e.value)


@pytest.mark.parametrize("key", ["s3.acess-key", "bogus", "s3.endpoint.url"])
def test_an_unknown_option_key_is_refused_naming_it(con, tmp_path, key):
    with pytest.raises(duckdb.Error) as e:
        con.execute(f"SELECT * FROM paimon_scan('{tmp_path}', options := MAP {{'{key}': 'x'}})").fetchall()
    msg = str(e.value)
    assert "paimon_scan: parameter 'options'" in msg and f"unknown option key '{key}'" in msg, msg
    assert "s3.access-key" in msg and "'x'" not in msg


# -- 13. a monitor can trust serving_status -----------------------------------------------------


def test_status_before_the_first_build_is_a_row_that_says_so(con):
    st = status(con)
    assert st["state"] == "not built" and st["source"] is None and st["refreshes"] == 0, st


def test_a_reconcile_outcome_goes_stale_when_the_layer_moves(con):
    make_orders(con)
    build(con, "orders")
    con.execute("SELECT * FROM serving_reconcile()").fetchall()
    assert status(con)["last_reconcile_clean"] is True
    con.execute(
        "CREATE TABLE ch AS SELECT 9::BIGINT AS order_id, 'acme' AS company, DATE '2026-11-05' AS order_day, "
        "1::BIGINT AS revenue"
    )
    got = refresh_row(con, "SELECT * FROM serving_refresh('ch')")
    st = status(con)
    assert st["last_reconcile_clean"] is None and st["last_reconcile_at"] is not None, st
    assert got["elapsed_ms"] == round(got["elapsed_ms"], 3)


def test_unfollow_with_nothing_followed_gives_no_row(con):
    make_orders(con)
    build(con, "orders")
    assert con.execute("SELECT * FROM serving_unfollow()").fetchall() == []


# -- 14. the serving layers of a database can be listed -----------------------------------------


def test_serving_layers_lists_every_layer(con):
    make_orders(con)
    build(con, "orders")
    con.execute("CREATE SCHEMA staging")
    con.execute("USE staging")
    build(con, "main.orders")
    con.execute("USE main")
    got = con.execute("SELECT catalog, schema, source, refreshes, fct_rows FROM serving_layers()").fetchall()
    assert got == [("memory", "main", "orders", 0, len(ORDERS)), ("memory", "staging", "main.orders", 0, len(ORDERS))]


def test_serving_layers_lists_the_layers_of_every_attached_database(con, tmp_path):
    """One row per layer in every attached database (a file database, a read-only one), none for
    a database without a layer, and a detached database's layer is gone from the list."""
    make_orders(con)
    build(con, "orders")
    ro_file = tmp_path / "ro.duckdb"
    con.execute(f"ATTACH {sql_literal(str(ro_file))} AS ro")
    con.execute("CREATE SCHEMA ro.s")
    con.execute("USE ro.s")
    build(con, "memory.main.orders")
    con.execute("USE memory")
    con.execute("DETACH ro")
    con.execute(f"ATTACH {sql_literal(str(ro_file))} AS ro (READ_ONLY)")
    con.execute(f"ATTACH {sql_literal(str(tmp_path / 'other.duckdb'))} AS other")
    con.execute(f"ATTACH {sql_literal(str(tmp_path / 'empty.duckdb'))} AS empty")
    con.execute("USE other")
    make_orders(con, "two", ORDERS[:2])
    build(con, "two")
    con.execute("CREATE TABLE changes AS SELECT 5::BIGINT AS order_id, 'acme' AS company, "
                "DATE '2026-11-03' AS order_day, 7::BIGINT AS revenue, false AS deleted")  # fmt: skip
    con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
    con.execute("USE memory")
    sql = "SELECT catalog, schema, source, refreshes, fct_rows FROM serving_layers() ORDER BY ALL"
    assert con.execute(sql).fetchall() == [
        ("memory", "main", "orders", 0, len(ORDERS)),
        ("other", "main", "two", 1, 3),
        ("ro", "s", "memory.main.orders", 0, len(ORDERS)),
    ]
    con.execute("DETACH other")
    assert con.execute(sql).fetchall() == [
        ("memory", "main", "orders", 0, len(ORDERS)),
        ("ro", "s", "memory.main.orders", 0, len(ORDERS)),
    ]


def test_a_build_inside_an_explicit_transaction_commits_on_its_own(con):
    """README (what the C API does not let streamhouse do): a build inside the caller's BEGIN ...
    ROLLBACK commits on its own, does not see the caller's uncommitted rows, and the caller's
    transaction keeps seeing the layer as it was when it began."""
    make_orders(con)
    build(con, "orders")
    more = [*ORDERS, (5, "acme", datetime.date(2026, 11, 3), 70)]
    make_orders(con, "more", more)
    con.execute("BEGIN")
    con.execute("INSERT INTO more VALUES (6, 'acme', DATE '2026-11-04', 9000)")  # never committed
    assert con.execute("SELECT count(*), sum(revenue) FROM fct_orders").fetchone() == (4, 2450)
    got = build(con, "more")
    assert (got["fct_rows"], got["source"]) == (len(more), "more"), got  # without the uncommitted row
    # The caller's transaction still sees the layer of its start.
    assert con.execute("SELECT count(*), sum(revenue) FROM fct_orders").fetchone() == (4, 2450)
    con.execute("ROLLBACK")
    # The build stayed; the caller's insert did not.
    assert con.execute("SELECT count(*) FROM more").fetchone() == (len(more),)
    assert con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders ORDER BY 1").fetchall() == more
    assert dashboard(con, "acme") == python_dashboard(more, "acme")
    assert con.execute("SELECT source FROM serving_status()").fetchone() == ("more",)


def test_deleted_cannot_carry_a_statement(con):
    build_and_change(
        con, "SELECT 4::BIGINT AS order_id, 'x' AS company, DATE '2026-11-02' AS order_day, 1 AS revenue, 'D' AS op"
    )
    evil = "true) AS d FROM (SELECT 1); DROP TABLE fct_orders; SELECT (true"
    with pytest.raises(duckdb.Error, match="a ';' is not part of a boolean expression"):
        con.execute("SELECT * FROM serving_refresh('changes', deleted := ?)", [evil]).fetchall()
    assert con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == len(ORDERS)
    # An aggregate is refused by the expression gate, naming it (issue 51: deleted := as columns :=).
    with pytest.raises(duckdb.Error, match=r"it calls bool_or\(\), which DuckDB lists as a function of kind aggregate"):
        con.execute("SELECT * FROM serving_refresh('changes', deleted := 'bool_or(op = ''D'')')").fetchall()


def test_a_users_table_in_another_case_is_still_the_users(con):
    make_orders(con)
    con.execute('CREATE TABLE "FCT_ORDERS" AS SELECT 1 AS precious')
    with pytest.raises(duckdb.Error, match="was not created by streamhouse"):
        build(con, "orders")
    assert con.execute('SELECT precious FROM "FCT_ORDERS"').fetchall() == [(1,)]
