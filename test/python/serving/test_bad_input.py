"""Every bad source is refused with a message naming the problem, and the previous build survives."""

from __future__ import annotations

import datetime
import time

import duckdb
import pytest
from conftest import build, connect, dashboard, gen_rows, load_table, oracle, sql_literal

GOOD = "src_good"
D = datetime.date(2024, 5, 1)


def snapshot(con):
    return (
        con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall(),
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall(),
        con.execute("SELECT source, lake_snapshot, refreshes FROM serving_meta ORDER BY ALL").fetchall(),
    )


@pytest.fixture
def good(con, tmp_path):
    """A database with a successful build; returns (con, rows, companies, snapshot)."""
    rows, companies = gen_rows(51, 4_000, 11, 40)
    load_table(con, GOOD, rows, tmp_path)
    build(con, GOOD)
    snap = snapshot(con)
    assert len(snap[0]) == len(rows) and snap[1]
    return con, rows, companies, snap


def make_table(con, name: str, ddl_columns: str, values: list[tuple]):
    con.execute(f"CREATE OR REPLACE TABLE {name} ({ddl_columns})")
    if values:
        marks = ", ".join("?" * len(values[0]))
        con.executemany(f"INSERT INTO {name} VALUES ({marks})", values)


STD = "order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT"
TXT = "order_id BIGINT, company VARCHAR, order_day VARCHAR, revenue BIGINT"

# (case id, DDL, rows, substrings that must all appear in the error message)
BAD_TABLES = [
    (
        "duplicate_order_id",
        STD,
        [(1, "a", D, 1), (987654321, "a", D, 2), (3, "b", D, 3), (987654321, "b", D, 4)],
        ["duplicate order_id 987654321", "2 rows"],
    ),
    ("duplicate_order_id_triple", STD, [(5, "a", D, 1)] * 3 + [(6, "a", D, 1)], ["duplicate order_id 5", "3 rows"]),
    (
        "missing_revenue",
        "order_id BIGINT, company VARCHAR, order_day DATE, amount BIGINT",
        [(1, "a", D, 1)],
        ["no column 'revenue'", "amount"],
    ),
    (
        "missing_company",
        "order_id BIGINT, customer VARCHAR, order_day DATE, revenue BIGINT",
        [(1, "a", D, 1)],
        ["no column 'company'"],
    ),
    (
        "missing_order_id",
        "id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT",
        [(1, "a", D, 1)],
        ["no column 'order_id'"],
    ),
    (
        "missing_order_day",
        "order_id BIGINT, company VARCHAR, day DATE, revenue BIGINT",
        [(1, "a", D, 1)],
        ["no column 'order_day'"],
    ),
    (
        "revenue_double",
        "order_id BIGINT, company VARCHAR, order_day DATE, revenue DOUBLE",
        [(1, "a", D, 1.5)],
        ["'revenue'", "DOUBLE"],
    ),
    (
        "revenue_decimal_scale",
        "order_id BIGINT, company VARCHAR, order_day DATE, revenue DECIMAL(18,2)",
        [(1, "a", D, 1)],
        ["'revenue'", "DECIMAL(18,2)"],
    ),
    (
        "revenue_varchar",
        "order_id BIGINT, company VARCHAR, order_day DATE, revenue VARCHAR",
        [(1, "a", D, "12")],
        ["'revenue'", "VARCHAR"],
    ),
    (
        "company_integer",
        "order_id BIGINT, company INTEGER, order_day DATE, revenue BIGINT",
        [(1, 7, D, 1)],
        ["'company'", "INTEGER"],
    ),
    (
        "order_id_varchar",
        "order_id VARCHAR, company VARCHAR, order_day DATE, revenue BIGINT",
        [("1", "a", D, 1)],
        ["'order_id'", "VARCHAR"],
    ),
    (
        "order_day_timestamp",
        "order_id BIGINT, company VARCHAR, order_day TIMESTAMP, revenue BIGINT",
        [(1, "a", datetime.datetime(2024, 5, 1, 12), 1)],
        ["'order_day'", "TIMESTAMP"],
    ),
    ("null_order_id", STD, [(1, "a", D, 1), (None, "a", D, 2)], ["order_id is NULL", "1 row"]),
    ("null_company", STD, [(1, "a", D, 1), (424242, None, D, 2)], ["company is NULL", "order_id 424242"]),
    ("null_order_day", STD, [(1, "a", D, 1), (434343, "a", None, 2)], ["order_day is NULL", "order_id 434343"]),
    (
        "null_order_day_text",
        TXT,
        [(1, "a", "2024-05-01", 1), (454545, "a", None, 2)],
        ["order_day is NULL", "order_id 454545"],
    ),
    ("null_revenue", STD, [(1, "a", D, 1), (444444, "a", D, None)], ["revenue is NULL", "order_id 444444"]),
    (
        "not_a_date",
        TXT,
        [(1, "a", "2024-05-01", 1), (77, "a", "not-a-date", 2)],
        ["'not-a-date'", "order_id 77", "not a valid YYYY-MM-DD date"],
    ),
    (
        "impossible_date",
        TXT,
        [(1, "a", "2024-05-01", 1), (78, "a", "2024-02-30", 2)],
        ["'2024-02-30'", "order_id 78", "not a valid YYYY-MM-DD date"],
    ),
    (
        "non_leap_feb_29",
        TXT,
        [(1, "a", "2024-02-29", 1), (79, "a", "2023-02-29", 2)],
        ["'2023-02-29'", "order_id 79", "not a valid YYYY-MM-DD date"],
    ),
    (
        "revenue_out_of_bigint",
        "order_id BIGINT, company VARCHAR, order_day DATE, revenue HUGEINT",
        [(1, "a", D, 1), (80, "a", D, 2**70)],
        [f"'{2**70}'", "order_id 80", "revenue does not fit in BIGINT"],
    ),
    (
        "order_id_out_of_bigint",
        "order_id UBIGINT, company VARCHAR, order_day DATE, revenue BIGINT",
        [(1, "a", D, 1), (2**64 - 5, "a", D, 2)],
        [f"'{2**64 - 5}'", "order_id does not fit in BIGINT"],
    ),
]


def assert_clean_message(msg: str):
    assert "Error code" not in msg, msg
    assert "Unknown error code" not in msg, msg
    # Said once: the function's own words do not come back as a "serving: ..." cause after them.
    body = msg.split("Error: ", 1)[-1]
    said = body.split(": ", 1)[-1][:60]
    assert body.count(said) == 1, f"the message repeats itself: {msg}"


def expect_build_error(con, source: str, needles: list[str]) -> str:
    with pytest.raises(duckdb.Error) as ei:
        con.execute(f"SELECT * FROM serving_build({sql_literal(source)})").fetchall()
    msg = str(ei.value)
    for needle in needles:
        assert needle in msg, f"expected {needle!r} in error message: {msg}"
    assert_clean_message(msg)
    return msg


def assert_state_unchanged(con, rows, companies, snap):
    assert snapshot(con) == snap
    per_company, _ = oracle(rows)
    for c in companies:
        assert dashboard(con, c) == per_company.get(c, [])


@pytest.mark.parametrize("case,ddl,values,needles", BAD_TABLES, ids=[c[0] for c in BAD_TABLES])
def test_bad_table_is_refused_and_state_kept(good, case, ddl, values, needles):
    con, rows, companies, snap = good
    name = f"bad_{case}"
    make_table(con, name, ddl, values)
    msg = expect_build_error(con, name, needles)
    assert name in msg, f"message does not name the source: {msg}"
    assert_state_unchanged(con, rows, companies, snap)


BAD_SOURCES = [
    ("no_such_table", ["'no_such_table'", "does not exist"]),
    ("main.no_such_table", ["'main.no_such_table'", "does not exist"]),
    ("nodb.main.src_good", ["'nodb.main.src_good'", "does not exist"]),
    ("/nonexistent/dir/orders.parquet", ["'/nonexistent/dir/orders.parquet'", "does not exist or cannot be read"]),
    ("/nonexistent/dir/orders.csv", ["'/nonexistent/dir/orders.csv'", "does not exist or cannot be read"]),
    ("/tmp/orders.txt", ["'/tmp/orders.txt'", "not usable"]),
    ("src_good; DROP TABLE fct_orders", ["'src_good; DROP TABLE fct_orders'", "not usable"]),
    ("src_good' --", ["'src_good' --'", "not usable"]),
    ("src_good --", ["'src_good --'", "not usable"]),
    ("(SELECT 1)", ["'(SELECT 1)'", "not usable"]),
    ("(SELECT * FROM src_good)", ["'(SELECT * FROM src_good)'", "not usable"]),
    ("src_good UNION ALL SELECT * FROM src_good", ["not usable"]),
    ("x' OR '1'='1", ["'x' OR '1'='1'", "not usable"]),
    ('"src_good"; DROP TABLE fct_orders; --', ["not usable"]),
    ("read_parquet('x.parquet')", ["not usable"]),
    ("a.b.c.d", ["'a.b.c.d'", "not usable"]),
    ("", ["not usable", "empty"]),
    ("   ", ["not usable", "empty"]),
    ("main.mart_daily", ["'main.mart_daily'", "no column 'order_id'"]),
]


@pytest.mark.parametrize("source,needles", BAD_SOURCES, ids=[f"src{i}" for i in range(len(BAD_SOURCES))])
def test_bad_source_string_is_refused_and_state_kept(good, source, needles):
    con, rows, companies, snap = good
    expect_build_error(con, source, needles)
    assert_state_unchanged(con, rows, companies, snap)


def test_smuggled_sql_did_not_run(good):
    con, rows, companies, snap = good
    for s in ["src_good; DROP TABLE src_good", "src_good; CREATE TABLE pwned(i INT)"]:
        with pytest.raises(duckdb.Error):
            con.execute(f"SELECT * FROM serving_build({sql_literal(s)})").fetchall()
    assert con.execute("SELECT count(*) FROM src_good").fetchone()[0] == len(rows)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'pwned'").fetchone()[0] == 0
    assert_state_unchanged(con, rows, companies, snap)


def test_null_argument(good):
    con, rows, companies, snap = good
    for fn, param in [
        ("serving_build", "source"),
        ("serving_dashboard", "company"),
        ("serving_olap", "company"),
        ("serving_explain", "company"),
    ]:
        with pytest.raises(duckdb.Error) as ei:
            con.execute(f"SELECT * FROM {fn}(NULL)").fetchall()
        msg = str(ei.value)
        assert f"{fn}: parameter '{param}' must not be NULL" in msg, msg
        assert_clean_message(msg)
    assert_state_unchanged(con, rows, companies, snap)


def test_temp_table_source_explains_own_connection(good):
    con, rows, companies, snap = good
    con.execute("CREATE TEMP TABLE tmp_orders AS SELECT * FROM src_good")
    msg = expect_build_error(con, "tmp_orders", ["'tmp_orders'", "TEMP tables", "own connection"])
    assert "does not exist" in msg
    assert_state_unchanged(con, rows, companies, snap)


def test_uncommitted_source_is_not_visible(good):
    con, rows, companies, snap = good
    con.execute("BEGIN TRANSACTION")
    con.execute("CREATE TABLE uncommitted_src AS SELECT * FROM src_good")
    try:
        expect_build_error(con, "uncommitted_src", ["'uncommitted_src'", "uncommitted rows"])
    finally:
        con.execute("ROLLBACK")
    assert_state_unchanged(con, rows, companies, snap)


def test_error_on_bad_row_after_many_good_rows(good, tmp_path):
    """The offending row is found even when it is one among thousands."""
    con, rows, companies, snap = good
    more, _ = gen_rows(52, 10_000, 5, 30)
    load_table(con, "big_text", more, tmp_path, day_type="VARCHAR")
    victim = more[7_777][0]
    con.execute("UPDATE big_text SET order_day = '2024-13-01' WHERE order_id = ?", [victim])
    expect_build_error(con, "big_text", ["'2024-13-01'", f"order_id {victim}"])
    assert_state_unchanged(con, rows, companies, snap)


def test_build_still_works_after_errors(good, tmp_path):
    con, _rows, _companies, _snap = good
    make_table(con, "dup", STD, [(1, "a", D, 1), (1, "a", D, 1)])
    expect_build_error(con, "dup", ["duplicate order_id 1"])
    expect_build_error(con, "nope", ["does not exist"])
    new_rows, new_companies = gen_rows(53, 3_000, 7, 20)
    load_table(con, "src_new", new_rows, tmp_path)
    summary = build(con, "src_new")
    assert summary["fct_rows"] == len(new_rows)
    per_company, _ = oracle(new_rows)
    for c in new_companies:
        assert dashboard(con, c) == per_company.get(c, [])
        assert dashboard(con, c, "serving_olap") == per_company.get(c, [])


@pytest.mark.parametrize("fn", ["serving_dashboard", "serving_olap", "serving_explain"])
def test_query_before_build_says_run_serving_build(con, fn):
    with pytest.raises(duckdb.Error) as ei:
        con.execute(f"SELECT * FROM {fn}('Acme')").fetchall()
    msg = str(ei.value)
    assert f"{fn}:" in msg and "run serving_build(source) first" in msg, msg
    assert_clean_message(msg)


def test_query_after_failed_first_build_says_run_serving_build(con):
    """A failed first build must not leave half-built serving tables behind."""
    make_table(con, "dup", STD, [(1, "a", D, 1), (1, "a", D, 2)])
    expect_build_error(con, "dup", ["duplicate order_id 1"])
    for t in ["fct_orders", "mart_daily", "serving_meta"]:
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [t]).fetchone()[0] == 0, t
    with pytest.raises(duckdb.Error) as ei:
        con.execute("SELECT * FROM serving_dashboard('a')").fetchall()
    assert "run serving_build(source) first" in str(ei.value)


def test_failed_build_in_file_database_survives_reopen(ext_path, tmp_path):
    db = str(tmp_path / "bad.duckdb")
    rows, _companies = gen_rows(54, 2_000, 6, 15)
    c = connect(db, ext_path)
    load_table(c, GOOD, rows, tmp_path)
    build(c, GOOD)
    snap = snapshot(c)
    make_table(c, "dup", STD, [(9, "a", D, 1), (9, "a", D, 2)])
    expect_build_error(c, "dup", ["duplicate order_id 9"])
    c.close()
    # Reopen without the extension so the file is really re-read. Closing is asynchronous with
    # streamhouse loaded (see test_lifecycle::test_same_process_reopen_with_other_settings), so
    # wait for the old instance to go away; this test is about the failed build, not that race.
    deadline = time.time() + 5
    while True:
        try:
            c = duckdb.connect(db)
            break
        except duckdb.ConnectionException as e:
            if "different configuration" not in str(e) or time.time() > deadline:
                raise
            time.sleep(0.01)
    try:
        assert snapshot(c) == snap
        assert c.execute("SELECT count(*) FROM dup").fetchone()[0] == 2
    finally:
        c.close()


I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _dup_case(kind: str, rng):
    if kind == "dense_sorted":
        ids = [*range(1, 20_001), 777]
    elif kind == "dense_shuffled":
        ids = [*range(1, 20_001), 15_000, 15_000, 9_000]
        rng.shuffle(ids)
    elif kind == "dense_negative":
        ids = [*range(-10_000, 0), -5_000]
        rng.shuffle(ids)
    elif kind == "sparse":
        ids = list({rng.randrange(I64_MIN, I64_MAX) for _ in range(20_000)})
        ids += [ids[123], ids[4567], ids[4567]]
        rng.shuffle(ids)
    elif kind == "extremes_min":
        ids = [I64_MIN, I64_MAX, 0, I64_MIN, *range(1, 1000)]
    elif kind == "extremes_max":
        ids = [I64_MAX, 5, I64_MIN, I64_MAX, I64_MAX]
    elif kind == "adjacent_at_end":
        ids = [*range(100, 5_100), 5_099]
    elif kind == "first_two_equal":
        ids = [1, 1, *range(2, 3_000)]
    else:
        raise AssertionError(kind)
    return ids


@pytest.mark.parametrize(
    "kind",
    [
        "dense_sorted",
        "dense_shuffled",
        "dense_negative",
        "sparse",
        "extremes_min",
        "extremes_max",
        "adjacent_at_end",
        "first_two_equal",
    ],
)
def test_duplicate_detection_matches_oracle(good, kind):
    """The message names the SMALLEST duplicated order_id and its exact count (Python oracle)."""
    import random
    from collections import Counter

    con, rows, companies, snap = good
    ids = _dup_case(kind, random.Random(kind))
    counts = Counter(ids)
    smallest = min(i for i, n in counts.items() if n > 1)
    con.execute(
        f"CREATE TABLE dup_{kind} AS SELECT unnest($1::BIGINT[]) AS order_id, 'a' AS company, "
        "DATE '2024-01-01' AS order_day, CAST(1 AS BIGINT) AS revenue",
        [ids],
    )
    expect_build_error(con, f"dup_{kind}", [f"duplicate order_id {smallest} ({counts[smallest]} rows)"])
    assert_state_unchanged(con, rows, companies, snap)


@pytest.mark.parametrize(
    "ids",
    [
        [I64_MIN, I64_MAX],
        [I64_MAX, I64_MIN, 0, -1, 1],
        list(range(5_000, 0, -1)),
        list(range(0, 640_000, 64)),
    ],
    ids=["extremes", "extremes_mixed", "descending", "strided"],
)
def test_distinct_ids_are_not_reported_as_duplicates(con, ids):
    con.execute(
        "CREATE TABLE src AS SELECT unnest($1::BIGINT[]) AS order_id, 'a' AS company, "
        "DATE '2024-01-01' AS order_day, unnest($2::BIGINT[]) AS revenue",
        [ids, [n % 7 - 3 for n in range(len(ids))]],
    )
    summary = build(con, "src")
    assert summary["fct_rows"] == len(ids)
    assert summary["total_revenue"] == sum(n % 7 - 3 for n in range(len(ids)))


def test_view_over_the_serving_tables_is_refused_or_idempotent(good):
    """A view that reads fct_orders as the source: the build must either refuse it or rebuild the
    same contents; it must never replace the serving tables with an empty (or partial) result."""
    con, rows, companies, snap = good
    con.execute("CREATE VIEW v_fct AS SELECT * FROM fct_orders")
    summary = build_or_error(con, "v_fct")
    if isinstance(summary, str):
        assert_clean_message(summary)
    else:
        assert summary["fct_rows"] == len(rows), (
            f"serving_build('v_fct') reported fct_rows {summary['fct_rows']}, expected {len(rows)}"
        )
        # A successful rebuild records its own source; the served data must be identical.
        snap = (*snap[:2], con.execute("SELECT source, lake_snapshot, refreshes FROM serving_meta").fetchall())
        assert snap[2] == [("v_fct", None, 0)]
    assert_state_unchanged(con, rows, companies, snap)


def build_or_error(con, source):
    try:
        return build(con, source)
    except duckdb.Error as e:
        return str(e)


def test_csv_file_with_impossible_date_names_the_value(good, tmp_path):
    con, rows, companies, snap = good
    path = tmp_path / "bad dates.csv"
    path.write_text("order_id,company,order_day,revenue\n1,a,2024-02-28,5\n2,b,2024-02-30,6\n3,a,2024-03-01,7\n")
    expect_build_error(con, str(path), ["'2024-02-30'", "order_id 2", "not a valid YYYY-MM-DD date"])
    assert_state_unchanged(con, rows, companies, snap)


@pytest.mark.parametrize(
    "dropped,fn",
    [("mart_daily", "serving_dashboard"), ("fct_orders", "serving_olap"), ("mart_daily", "serving_explain")],
)
def test_dropped_serving_table_says_run_serving_build(good, dropped, fn):
    con, rows, companies, snap = good
    con.execute(f"DROP TABLE {dropped}")
    with pytest.raises(duckdb.Error) as ei:
        con.execute(f"SELECT * FROM {fn}('Acme')").fetchall()
    assert "run serving_build(source) first" in str(ei.value), str(ei.value)
    build(con, GOOD)
    assert_state_unchanged(con, rows, companies, snap)


def test_a_fluss_table_is_not_a_change_set(good):
    """serving_refresh takes a change set; a Fluss table is followed (its changelog) or built (its
    state): refused naming both, before any network call (the address has no listener), the layer
    kept."""
    con, rows, companies, snap = good
    with pytest.raises(duckdb.Error) as failed:
        con.execute("SELECT * FROM serving_refresh('fluss://127.0.0.1:1/shop.orders')").fetchall()
    message = str(failed.value)
    assert "'fluss://127.0.0.1:1/shop.orders' is a Fluss table, which is followed, not refreshed" in message, message
    assert "serving_follow('fluss://127.0.0.1:1/shop.orders') applies its changelog" in message, message
    assert "serving_build('fluss://127.0.0.1:1/shop.orders') reads it anew" in message, message
    assert_state_unchanged(con, rows, companies, snap)
