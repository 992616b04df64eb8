"""serving_build / serving_dashboard / serving_olap against a pure-Python oracle."""

from __future__ import annotations

import datetime

import pytest
from conftest import (
    SEES_SEARCH_PATH,
    TRICKY_COMPANIES,
    build,
    connect,
    dashboard,
    gen_rows,
    load_table,
    oracle,
    oracle_summary,
    refuse_ambiguous_source,
    serving_table_places,
    sql_literal,
    write_csv,
)

# (seed, rows, companies, days)
CASES = [
    (1, 20_000, 30, 400),
    (2, 50_000, 5, 60),
    (3, 30_000, 17, 366),
    (4, 25_000, 11, 120),
]


def assert_summary(summary: dict, rows, source: str):
    want = oracle_summary(rows)
    got = {k: summary[k] for k in want}
    assert got == want
    assert summary["source"] == source
    assert summary["lake_snapshot"] is None
    assert summary["elapsed_ms"] >= 0


def assert_every_company(con, rows, companies):
    per_company, _ = oracle(rows)
    assert set(per_company) <= set(companies)
    for company in companies:
        want = per_company.get(company, [])
        got_dash = dashboard(con, company, "serving_dashboard")
        assert got_dash == want, f"serving_dashboard({company!r}) differs from the oracle"
        got_olap = dashboard(con, company, "serving_olap")
        assert got_olap == want, f"serving_olap({company!r}) differs from the oracle"


def assert_tables_match(con, rows):
    """fct_orders holds exactly the source rows, mart_daily exactly the oracle's cells."""
    _, cells = oracle(rows)
    fct = con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders ORDER BY order_id").fetchall()
    assert fct == sorted(rows)
    mart = con.execute("SELECT company, order_day, revenue FROM mart_daily").fetchall()
    assert sorted(mart) == sorted((c, d, r) for (c, d), r in cells.items())


@pytest.mark.parametrize("seed,n_rows,n_companies,n_days", CASES)
def test_randomized_build_matches_oracle(con, tmp_path, seed, n_rows, n_companies, n_days):
    rows, companies = gen_rows(seed, n_rows, n_companies, n_days)
    load_table(con, "src", rows, tmp_path)

    summary = build(con, "src")
    assert_summary(summary, rows, "src")
    assert_every_company(con, rows, companies)
    assert_tables_match(con, rows)

    # Realistic data: the rollup is strictly smaller than the fact.
    n_fct = con.execute("SELECT count(*) FROM fct_orders").fetchone()[0]
    n_mart = con.execute("SELECT count(*) FROM mart_daily").fetchone()[0]
    assert n_mart < n_fct

    # Unknown companies (including near misses of existing ones) return nothing.
    for unknown in ["no such company", "", "o'reilly", "x'", "Acme ", "%", "a?b", "東京"]:
        if unknown not in companies:
            assert dashboard(con, unknown) == []
            assert dashboard(con, unknown, "serving_olap") == []


def test_schema_of_serving_tables(con, tmp_path):
    rows, _ = gen_rows(5, 2_000, 8, 30)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    fct = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'fct_orders' ORDER BY column_index"
    ).fetchall()
    assert fct == [("order_id", "BIGINT"), ("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "BIGINT")]
    mart = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'mart_daily' ORDER BY column_index"
    ).fetchall()
    assert mart == [("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "HUGEINT")]
    assert con.execute("SELECT count(*) FROM serving_meta").fetchone()[0] == 1
    assert con.execute("SELECT source FROM serving_meta").fetchone()[0] == "src"

    for fn in ["serving_dashboard", "serving_olap"]:
        cur = con.execute(f"SELECT * FROM {fn}('Acme')")
        assert [d[0] for d in cur.description] == ["order_day", "revenue"]
        types = con.execute(f"SELECT typeof(order_day), typeof(revenue) FROM {fn}('Acme') LIMIT 1").fetchall()
        assert types == [("DATE", "HUGEINT")]


def test_mart_daily_is_sorted_by_company(con, tmp_path):
    rows, _ = gen_rows(6, 20_000, 25, 200)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    physical = [r[0] for r in con.execute("SELECT company FROM mart_daily ORDER BY rowid").fetchall()]
    # DuckDB orders VARCHAR by UTF-8 bytes, which is Python's code point order.
    assert physical == sorted(physical)


def test_injection_company_matches_only_itself(con, tmp_path):
    rows, companies = gen_rows(7, 5_000, len(TRICKY_COMPANIES), 40)
    assert "x' OR '1'='1" in companies and "x" in companies
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    per_company, _ = oracle(rows)
    got = dashboard(con, "x' OR '1'='1")
    assert got == per_company["x' OR '1'='1"]
    assert len(got) < len(oracle(rows)[1])  # not every row of the mart
    # The same string inlined as a properly quoted literal behaves identically.
    inline_sql = "SELECT * FROM serving_dashboard(" + sql_literal("x' OR '1'='1") + ")"
    assert inline_sql.endswith("('x'' OR ''1''=''1')")
    inline = con.execute(inline_sql).fetchall()
    assert inline == got
    # Case and LIKE wildcards are not folded.
    assert dashboard(con, "Acme") == per_company["Acme"]
    assert dashboard(con, "ACME") == per_company["ACME"]
    assert dashboard(con, "a%b") == per_company["a%b"]
    assert dashboard(con, "a_b") == per_company["a_b"]
    assert dashboard(con, "Robert'); DROP TABLE fct_orders;--") == per_company["Robert'); DROP TABLE fct_orders;--"]
    assert con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == len(rows)


def test_build_from_parquet(con, tmp_path):
    rows, companies = gen_rows(11, 20_000, 12, 90)
    load_table(con, "src", rows, tmp_path)
    pq = tmp_path / "o.parquet"
    con.execute(f"COPY src TO {sql_literal(str(pq))} (FORMAT parquet)")
    con.execute("DROP TABLE src")
    summary = build(con, str(pq))
    assert_summary(summary, rows, str(pq))
    assert_every_company(con, rows, companies)
    assert_tables_match(con, rows)


def test_build_from_parquet_glob(con, tmp_path):
    rows, companies = gen_rows(12, 9_000, 9, 50)
    d = tmp_path / "parts"
    d.mkdir()
    for i in range(3):
        part = rows[i::3]
        load_table(con, f"part{i}", part, tmp_path)
        con.execute(f"COPY part{i} TO {sql_literal(str(d / f'p{i}.parquet'))} (FORMAT parquet)")
    glob = str(d / "*.parquet")
    summary = build(con, glob)
    assert_summary(summary, rows, glob)
    assert_every_company(con, rows, companies)


def test_build_from_csv_with_text_dates(con, tmp_path):
    rows, companies = gen_rows(13, 20_000, 15, 150)
    # A path with a space and an apostrophe: it must be quoted as a literal, not spliced.
    path = write_csv(tmp_path / "it's orders.csv", rows, day_as_text=True)
    header, first = path.read_text(encoding="utf-8").splitlines()[:2]
    assert header == "order_id,company,order_day,revenue" and "-" in first
    summary = build(con, str(path))
    assert_summary(summary, rows, str(path))
    assert_every_company(con, rows, companies)
    assert_tables_match(con, rows)


def test_build_from_varchar_day_column(con, tmp_path):
    rows, companies = gen_rows(14, 20_000, 10, 366)
    load_table(con, "src_text", rows, tmp_path, day_type="VARCHAR")
    assert con.execute("SELECT typeof(order_day) FROM src_text LIMIT 1").fetchone()[0] == "VARCHAR"
    summary = build(con, "src_text")
    assert_summary(summary, rows, "src_text")
    assert_every_company(con, rows, companies)
    assert_tables_match(con, rows)


def test_build_from_json(con, tmp_path):
    rows, companies = gen_rows(15, 3_000, 6, 30)
    load_table(con, "src", rows, tmp_path)
    path = tmp_path / "o.json"
    con.execute(f"COPY src TO {sql_literal(str(path))} (FORMAT json)")
    summary = build(con, str(path))
    assert_summary(summary, rows, str(path))
    assert_every_company(con, rows, companies)


def test_build_from_view(con, tmp_path):
    rows, companies = gen_rows(16, 20_000, 14, 100)
    load_table(con, "raw_orders", rows, tmp_path)
    # The view renames/reorders columns and adds noise columns; only the contract columns count.
    con.execute("CREATE VIEW v_orders AS SELECT revenue, 42.5 AS noise, order_day, company, order_id FROM raw_orders")
    summary = build(con, "v_orders")
    assert_summary(summary, rows, "v_orders")
    assert_every_company(con, rows, companies)


def test_build_from_filtering_view(con, tmp_path):
    rows, companies = gen_rows(17, 10_000, 10, 60)
    load_table(con, "raw_orders", rows, tmp_path)
    con.execute("CREATE VIEW v_pos AS SELECT * FROM raw_orders WHERE revenue > 0")
    kept = [r for r in rows if r[3] > 0]
    summary = build(con, "v_pos")
    assert_summary(summary, kept, "v_pos")
    assert_every_company(con, kept, companies)


def test_build_from_qualified_name(con, tmp_path):
    rows, companies = gen_rows(18, 20_000, 9, 80)
    load_table(con, "src", rows, tmp_path)
    summary = build(con, "main.src")
    assert_summary(summary, rows, "main.src")
    assert_every_company(con, rows, companies)

    con.execute("CREATE SCHEMA staging")
    other = rows[: len(rows) // 2]
    load_table(con, "staging.src", other, tmp_path)
    summary = build(con, "staging.src")
    assert_summary(summary, other, "staging.src")
    assert_every_company(con, other, companies)

    summary = build(con, "memory.main.src")
    assert_summary(summary, rows, "memory.main.src")


def test_build_from_quoted_identifier(con, tmp_path):
    rows, companies = gen_rows(19, 5_000, 7, 40)
    load_table(con, '"my ""odd"" src.tbl"', rows, tmp_path)
    source = '"my ""odd"" src.tbl"'
    summary = build(con, source)
    assert_summary(summary, rows, source)
    assert_every_company(con, rows, companies)


def test_build_from_attached_database(con, tmp_path):
    rows, companies = gen_rows(20, 20_000, 13, 120)
    other_db = tmp_path / "other.duckdb"
    con.execute(f"ATTACH {sql_literal(str(other_db))} AS other")
    load_table(con, "other.main.src", rows, tmp_path)
    # A same-named table in the default database with different data must not be used.
    decoy, _ = gen_rows(99, 500, 3, 5)
    load_table(con, "src", decoy, tmp_path)
    summary = build(con, "other.main.src")
    assert_summary(summary, rows, "other.main.src")
    assert_every_company(con, rows, companies)
    assert_tables_match(con, rows)


def test_empty_source(con):
    con.execute("CREATE TABLE empty_src (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    summary = build(con, "empty_src")
    assert summary["fct_rows"] == 0
    assert summary["mart_rows"] == 0
    assert summary["companies"] == 0
    assert summary["days"] == 0
    assert summary["total_revenue"] in (None, 0)
    assert con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM mart_daily").fetchone()[0] == 0
    assert dashboard(con, "Acme") == []
    assert dashboard(con, "Acme", "serving_olap") == []


def test_rebuild_replaces_previous_contents(con, tmp_path):
    rows_a, companies_a = gen_rows(21, 20_000, 12, 100)
    rows_b = [
        (oid, "B-" + c, d + datetime.timedelta(days=500), -r if r != -(2**63) else r)
        for oid, c, d, r in gen_rows(22, 15_000, 8, 70)[0]
    ]
    companies_b = sorted({r[1] for r in rows_b})
    load_table(con, "src_a", rows_a, tmp_path)
    load_table(con, "src_b", rows_b, tmp_path)

    assert_summary(build(con, "src_a"), rows_a, "src_a")
    assert_every_company(con, rows_a, companies_a)

    assert_summary(build(con, "src_b"), rows_b, "src_b")
    assert_every_company(con, rows_b, companies_b)
    assert_tables_match(con, rows_b)
    for company in companies_a:
        assert dashboard(con, company) == [], f"{company!r} from the previous build survived"
        assert dashboard(con, company, "serving_olap") == []
    assert con.execute("SELECT count(*), max(source) FROM serving_meta").fetchone() == (1, "src_b")

    # Build A again: back to exactly A.
    assert_summary(build(con, "src_a"), rows_a, "src_a")
    assert_every_company(con, rows_a, companies_a)
    assert_tables_match(con, rows_a)


def test_source_changes_are_picked_up_by_rebuild(con, tmp_path):
    rows, companies = gen_rows(23, 5_000, 6, 30)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    # Mutate the source (committed); dashboards keep serving the old build until rebuilt.
    victim = rows[0]
    con.execute("UPDATE src SET revenue = revenue + 1000 WHERE order_id = ?", [victim[0]])
    assert_every_company(con, rows, companies)
    changed = [(o, c, d, r + 1000 if o == victim[0] else r) for o, c, d, r in rows]
    assert_summary(build(con, "src"), changed, "src")
    assert_every_company(con, changed, companies)


def test_huge_revenue_sums_are_exact(con):
    """Sums beyond BIGINT must be exact HUGEINT values, never wrapped or rounded."""
    big = 2**63 - 1
    rows = [(i + 1, "Big", datetime.date(2024, 3, 1), big) for i in range(10)]
    rows += [(100 + i, "Big", datetime.date(2024, 3, 2), -(2**63)) for i in range(10)]
    rows += [(200, "Big", datetime.date(2024, 3, 3), 1)]
    con.execute("CREATE TABLE src (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", rows)
    summary = build(con, "src")
    assert_summary(summary, rows, "src")
    want = oracle(rows)[0]["Big"]
    assert want[0] == (datetime.date(2024, 3, 1), 10 * big)
    assert dashboard(con, "Big") == want
    assert dashboard(con, "Big", "serving_olap") == want


def test_ties_order_by_day_ascending(con):
    rows = [(i, "T", datetime.date(2024, 1, 1) + datetime.timedelta(days=(i * 7) % 31), 5) for i in range(1, 32)]
    rows += [(100, "T", datetime.date(2024, 1, 1), -5), (101, "T", datetime.date(2024, 1, 1), 8)]
    con.execute("CREATE TABLE src (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", rows)
    build(con, "src")
    want = oracle(rows)[0]["T"]
    assert dashboard(con, "T") == want
    assert dashboard(con, "T", "serving_olap") == want
    days_with_5 = [d for d, r in want if r == 5]
    assert days_with_5 == sorted(days_with_5) and len(days_with_5) == 30
    assert want[0] == (datetime.date(2024, 1, 1), 8)


def test_other_integer_and_case_variants_are_accepted(con):
    con.execute('CREATE TABLE src ("ORDER_ID" INTEGER, "Company" VARCHAR, "Order_Day" DATE, "REVENUE" DECIMAL(18,0))')
    rows = [
        (1, "a", datetime.date(2024, 1, 1), 10),
        (2, "a", datetime.date(2024, 1, 1), -3),
        (3, "b", datetime.date(2024, 1, 2), 7),
    ]
    con.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", rows)
    assert_summary(build(con, "src"), rows, "src")
    assert_every_company(con, rows, ["a", "b"])


def test_two_databases_in_one_process_are_independent(ext_path, tmp_path):
    rows1, comps1 = gen_rows(31, 3_000, 5, 20)
    rows2, comps2 = gen_rows(32, 4_000, 6, 25)
    c1 = connect(":memory:", ext_path)
    c2 = connect(str(tmp_path / "second.duckdb"), ext_path)
    try:
        load_table(c1, "src", rows1, tmp_path)
        load_table(c2, "src", rows2, tmp_path)
        assert_summary(build(c1, "src"), rows1, "src")
        assert_summary(build(c2, "src"), rows2, "src")
        assert_every_company(c1, rows1, comps1)
        assert_every_company(c2, rows2, comps2)
    finally:
        c1.close()
        c2.close()


def test_concurrent_dashboards_from_several_connections(con, tmp_path):
    """Several connections (cursors) of one database query at once; every answer is exact."""
    import threading

    rows, companies = gen_rows(33, 20_000, 16, 90)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    per_company, _ = oracle(rows)
    errors = []

    def worker(k):
        cur = con.cursor()
        try:
            for rep in range(3):
                for i, company in enumerate(companies):
                    fn = "serving_dashboard" if (i + k + rep) % 2 else "serving_olap"
                    got = cur.execute(f"SELECT * FROM {fn}(?)", [company]).fetchall()
                    if got != per_company.get(company, []):
                        errors.append((k, fn, company))
        except Exception as e:  # reported below
            errors.append((k, repr(e)))
        finally:
            cur.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "dashboard queries deadlocked"
    assert errors == []


def test_build_from_second_connection_is_visible_to_first(con, tmp_path):
    rows, companies = gen_rows(34, 5_000, 8, 30)
    load_table(con, "src", rows, tmp_path)
    other = con.cursor()
    try:
        assert_summary(build(other, "src"), rows, "src")
    finally:
        other.close()
    assert_every_company(con, rows, companies)


@pytest.mark.parametrize("n_days", [2047, 2048, 2049, 5000])
def test_company_with_more_days_than_one_vector(con, n_days):
    """A dashboard answer longer than DuckDB's vector size (2048) is emitted over several
    chunks; every row must arrive exactly once, in order."""
    start = datetime.date(2000, 1, 1)
    rows = []
    oid = 1
    for d in range(n_days):
        day = start + datetime.timedelta(days=d)
        for k in range(1 + d % 2):
            rows.append((oid, "Long", day, (d * 7919) % 100_003 - 50_000 + k))
            oid += 1
    rows.append((oid, "Short", start, 1))
    con.execute(
        "CREATE TABLE src AS SELECT unnest($1::BIGINT[]) AS order_id, unnest($2::VARCHAR[]) AS company, "
        "unnest($3::DATE[]) AS order_day, unnest($4::BIGINT[]) AS revenue",
        [list(col) for col in zip(*rows, strict=True)],
    )
    assert_summary(build(con, "src"), rows, "src")
    want = oracle(rows)[0]["Long"]
    assert len(want) == n_days
    for fn in ["serving_dashboard", "serving_olap"]:
        got = dashboard(con, "Long", fn)
        assert len(got) == n_days, fn
        assert got == want, fn
        # Consumed through SQL too (aggregates over all chunks).
        agg = con.execute(f"SELECT count(*), count(DISTINCT order_day), sum(revenue) FROM {fn}('Long')").fetchone()
        assert agg == (n_days, n_days, sum(r for _, r in want)), fn
    assert dashboard(con, "Short") == [(start, 1)]


SERVING_TABLES = ["fct_orders", "mart_daily", "serving_mart_counts", "serving_meta"]


@pytest.mark.parametrize("how", ["search_path", "use"])
def test_unqualified_source_resolves_like_the_callers_session(con, tmp_path, how):
    """README (lifecycle): unqualified names resolve through the caller's search_path, so `USE other`
    or `SET search_path = 'staging'` apply to sources and to where the serving tables live; a build
    puts every serving table in the caller's current schema. serving_build('src') must read the
    table the caller's own `SELECT * FROM src` reads (never the same-named decoy in memory.main)
    and create the layer there."""
    decoy, _ = gen_rows(35, 1_000, 4, 10)
    real, real_companies = gen_rows(36, 3_000, 6, 20)
    load_table(con, "memory.main.src", decoy, tmp_path)
    if how == "search_path":
        con.execute("CREATE SCHEMA staging")
        load_table(con, "staging.src", real, tmp_path)
        con.execute("SET search_path = 'staging'")
        home = ("memory", "staging")
    else:
        con.execute(f"ATTACH {sql_literal(str(tmp_path / 'other.duckdb'))} AS other")
        load_table(con, "other.main.src", real, tmp_path)
        con.execute("USE other")
        home = ("other", "main")
    # What the caller means by "src":
    assert con.execute("SELECT count(*) FROM src").fetchone()[0] == len(real)
    if not SEES_SEARCH_PATH:
        refuse_ambiguous_source(con, "src", ["memory.main", ".".join(home)])
        qualified = ".".join([*home, "src"])
        assert_summary(build(con, qualified), real, qualified)
        fct = con.execute("SELECT order_id, company, order_day, revenue FROM memory.main.fct_orders ORDER BY order_id")
        assert fct.fetchall() == sorted(real), "DuckDB 1.4: the layer lives in the default schema"
        return
    assert_summary(build(con, "src"), real, "src")
    assert serving_table_places(con) == {(*home, t) for t in SERVING_TABLES}, (
        "the serving tables must all live in the caller's current schema and nowhere else"
    )
    q = ".".join(f'"{p}"' for p in home)
    fct = con.execute(f"SELECT order_id, company, order_day, revenue FROM {q}.fct_orders ORDER BY order_id").fetchall()
    assert fct == sorted(real)
    assert_tables_match(con, real)  # unqualified, through the caller's session
    assert_every_company(con, real, real_companies)
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0


def test_a_second_layer_under_another_search_path_leaves_the_first_intact(con, tmp_path):
    """Build + refresh in `main`, then in schema `staging` (SET search_path): each layer lives
    wholly in its own schema. A build must never drop `main.fct_orders` because the new layer's
    schema lacks one, and a refresh must write every table where its serving_meta lives."""
    first, first_companies = gen_rows(51, 2_000, 5, 30)
    second, second_companies = gen_rows(52, 1_500, 4, 20)
    load_table(con, "memory.main.src", first, tmp_path)
    build(con, "src")
    con.execute("CREATE SCHEMA staging")
    load_table(con, "staging.src", second, tmp_path)
    con.execute("SET search_path = 'staging'")
    if not SEES_SEARCH_PATH:
        refuse_ambiguous_source(con, "src", ["memory.main", "memory.staging"])
        con.execute("RESET search_path")
        assert_tables_match(con, first)
        return
    assert build(con, "src")["fct_rows"] == len(second)
    # A refresh in staging: one order of the second source gets a new revenue.
    oid, company, day, _ = second[0]
    con.execute(
        "CREATE TABLE staging.changes AS SELECT $1::BIGINT AS order_id, $2 AS company, $3::DATE AS order_day, "
        "7::BIGINT AS revenue",
        [oid, company, day],
    )
    assert con.execute("SELECT updated FROM serving_refresh('changes')").fetchone()[0] == 1
    second = [(oid, company, day, 7), *second[1:]]
    assert_tables_match(con, second)
    assert_every_company(con, second, second_companies)
    con.execute("RESET search_path")
    assert_tables_match(con, first)
    assert_every_company(con, first, first_companies)
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0


def test_refreshes_rewrite_fct_orders_once_dead_versions_pass_an_eighth(con):
    """Each refresh leaves the changed orders' old versions as dead rows; once they reach 1/8 of
    the live rows (at least 50k) that refresh rewrites fct_orders with its live rows (README,
    Refresh vs rebuild). 400k orders: a first refresh of 30k corrections leaves the table (new
    versions appended after the old rows), a second one (60k dead) rewrites it: a new table whose
    rows are numbered from 0 again. The content is checked against the same rows in Python."""
    n, companies, days = 400_000, 7, 30
    con.execute(
        f"CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % {companies}) AS company, "
        f"DATE '2024-01-01' + (i % {days})::INT AS order_day, i::BIGINT AS revenue FROM range({n}) t(i)"
    )
    build(con, "src")
    revenue = list(range(n))

    def table_oid() -> int:
        return con.execute("SELECT table_oid FROM duckdb_tables() WHERE table_name = 'fct_orders'").fetchone()[0]

    def refresh(lo: int, hi: int) -> None:
        con.execute(
            f"CREATE OR REPLACE TABLE changes AS SELECT order_id, company, order_day, -revenue AS revenue, "
            f"false AS deleted FROM src WHERE order_id >= {lo} AND order_id < {hi}"
        )
        got = con.execute("SELECT inserted, updated, deleted FROM serving_refresh('changes')").fetchone()
        assert got == (0, hi - lo, 0), got
        for i in range(lo, hi):
            revenue[i] = -i

    def check(what: str) -> None:
        assert con.execute("SELECT count(*), sum(revenue), sum(order_id * revenue) FROM fct_orders").fetchone() == (
            n,
            sum(revenue),
            sum(i * r for i, r in enumerate(revenue)),
        ), what
        mart: dict = {}
        for i, r in enumerate(revenue):
            key = (f"c{i % companies}", datetime.date(2024, 1, 1) + datetime.timedelta(days=i % days))
            mart[key] = mart.get(key, 0) + r
        assert con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall() == sorted(
            (c, d, r) for (c, d), r in mart.items()
        ), what

    built = table_oid()
    refresh(0, 30_000)  # 30k dead versions: under max(50k, 400k / 8)
    check("after 30k changes")
    assert table_oid() == built, "fct_orders was rewritten with 30k dead versions"
    assert con.execute("SELECT max(rowid) FROM fct_orders").fetchone()[0] >= n, "the new versions were not appended"
    refresh(30_000, 60_000)  # 60k dead versions: rewritten
    check("after 60k changes")
    assert table_oid() != built, "fct_orders was not rewritten with 60k dead versions"
    assert con.execute("SELECT max(rowid), count(*) FROM fct_orders").fetchone() == (n - 1, n)
    assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone() == (0,)
