#!/usr/bin/env python3
"""make bench: streamhouse against native DuckDB baselines measured in the same process.

Every figure is a median over repeated runs (this machine is noisy); ratios are ours / native.
  build      serving_build(src)   vs  the same CTAS + GROUP BY as plain SQL, 3M orders
  dashboard  serving_dashboard(c) vs  the same query as a native prepared statement
  refresh    serving_refresh(k changed orders) vs serving_build of the same final state, 10M
             orders, k = 1k / 10k / 100k, changes among recent orders (a live stream) and
             uniform over all history (worst case); the marts are checked identical afterwards
"""
import statistics
import sys
import time

import duckdb

ROWS = 3_000_000
COMPANIES = 50
DAYS = 365


def median_time(fn, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def make_source(con, rows):
    con.execute(f"""
        CREATE OR REPLACE TABLE src AS
        SELECT i AS order_id,
               'company_' || (hash(i) % {COMPANIES}) AS company,
               DATE '2024-01-01' + CAST(hash(i * 31) % {DAYS} AS INTEGER) AS order_day,
               CAST(hash(i * 17) % 100000 AS BIGINT) - 5000 AS revenue
        FROM range({rows}) t(i)""")


def native_build_sql(fct: str, mart: str) -> str:
    """The native baseline of a build: the same fact and rollup in plain SQL, one transaction."""
    return f"""
BEGIN;
CREATE OR REPLACE TABLE {fct} AS
  SELECT CAST(order_id AS BIGINT) AS order_id, company, CAST(order_day AS DATE) AS order_day,
         CAST(revenue AS BIGINT) AS revenue FROM src;
CREATE OR REPLACE TABLE {mart} AS
  SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM {fct}
  GROUP BY company, order_day ORDER BY company, order_day;
COMMIT;
"""


NATIVE_BUILD = native_build_sql("fct_native", "mart_native")

DASHBOARD = "SELECT order_day, revenue FROM mart_daily WHERE company = $1 ORDER BY revenue DESC, order_day ASC"


def report(name, ours, native, target):
    ratio = ours / native
    verdict = "ok" if ratio <= target else "OVER TARGET"
    print(f"{name:<10} streamhouse {ours * 1e3:9.3f} ms   native {native * 1e3:9.3f} ms   "
          f"ratio {ratio:5.2f}x  (target <= {target}x: {verdict})")
    return ratio


def bench_build(con, runs):
    make_source(con, ROWS)
    con.execute(NATIVE_BUILD)
    con.execute("SELECT * FROM serving_build('src')").fetchall()  # warm-up both paths
    ours, native = [], []
    for _ in range(runs):  # interleaved so drift hits both sides alike
        native.append(median_time(lambda: con.execute(NATIVE_BUILD), 1))
        ours.append(median_time(lambda: con.execute("SELECT * FROM serving_build('src')").fetchall(), 1))
    same = con.execute("""SELECT count(*) FROM ((SELECT * FROM mart_daily EXCEPT ALL SELECT * FROM mart_native)
                          UNION ALL (SELECT * FROM mart_native EXCEPT ALL SELECT * FROM mart_daily))""").fetchone()[0]
    assert same == 0, "serving_build and the native SQL built different marts"
    return report("build", statistics.median(ours), statistics.median(native), 1.10)


def bench_dashboard(con, runs):
    companies = [f"company_{i}" for i in range(COMPANIES)]
    native_stmt = lambda c: con.execute(DASHBOARD, [c]).fetchall()
    ours_stmt = lambda c: con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall()
    for c in companies[:5]:
        assert native_stmt(c) == ours_stmt(c)
    ours, native = [], []
    for i in range(runs):
        c = companies[i % COMPANIES]
        native.append(median_time(lambda: native_stmt(c), 1))
        ours.append(median_time(lambda: ours_stmt(c), 1))
    return report("dashboard", statistics.median(ours), statistics.median(native), 1.2)


REFRESH_ORDERS = 10_000_000


def make_changes(con, n, seed, recent):
    """n changed orders: 70% corrections/moves of existing orders, 10% cancellations, 20% new
    orders. `recent`: the existing ones are among the latest 2% of orders, as in a live stream
    (late corrections); otherwise uniformly over all history (the worst case)."""
    pool = f"(SELECT order_id FROM fct_orders WHERE order_id >= (SELECT max(order_id) FROM fct_orders) - {REFRESH_ORDERS // 50})" \
        if recent else "fct_orders"
    con.execute(changes_sql(pool, n, seed, "(SELECT max(order_id) FROM fct_orders) + 1"))


def changes_sql(pool: str, n: int, seed: int, first_new_id: str) -> str:
    """`changes`: 80% of n picked from `pool` (a relation with order_id) — every 8th of them
    cancelled, the rest corrected or moved — and 20% new orders numbered from `first_new_id`."""
    picked = int(n * 0.8)
    return f"""
        CREATE OR REPLACE TABLE changes AS
        WITH picked AS (
            SELECT order_id, row_number() OVER () AS k FROM {pool} USING SAMPLE {picked} ROWS (reservoir, {seed}))
        SELECT order_id,
               CASE WHEN k % 8 = 0 THEN NULL ELSE 'company_' || (hash(order_id + {seed}) % {COMPANIES}) END AS company,
               CASE WHEN k % 8 = 0 THEN NULL ELSE DATE '2024-01-01' + CAST(hash(order_id * {seed}) % {DAYS} AS INTEGER) END AS order_day,
               CASE WHEN k % 8 = 0 THEN NULL ELSE CAST(hash(order_id + 7 * {seed}) % 100000 AS BIGINT) - 5000 END AS revenue,
               k % 8 = 0 AS deleted
        FROM picked
        UNION ALL
        SELECT {first_new_id} + i, 'company_' || (hash(i + {seed}) % {COMPANIES}),
               DATE '2024-01-01' + CAST(hash(i * 3 + {seed}) % {DAYS} AS INTEGER),
               CAST(hash(i + 11 * {seed}) % 100000 AS BIGINT) - 5000, false
        FROM range({n - picked}) t(i)"""


def bench_refresh(con, runs):
    make_source(con, REFRESH_ORDERS)
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    seed = 0
    for recent in (True, False):
        for n in (1_000, 10_000, 100_000):
            refresh_times = []
            for _ in range(runs):
                seed += 1
                make_changes(con, n, seed, recent)
                t = time.perf_counter()
                con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
                refresh_times.append(time.perf_counter() - t)
            assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
            con.execute("CREATE OR REPLACE TABLE mart_refreshed AS SELECT * FROM mart_daily")
            con.execute("CREATE OR REPLACE TABLE final_state AS SELECT * FROM fct_orders")
            build = median_time(lambda: con.execute("SELECT * FROM serving_build('final_state')").fetchall(), runs)
            diff = con.execute("""SELECT count(*) FROM ((SELECT * FROM mart_daily EXCEPT ALL SELECT * FROM mart_refreshed)
                                  UNION ALL (SELECT * FROM mart_refreshed EXCEPT ALL SELECT * FROM mart_daily))""").fetchone()[0]
            assert diff == 0, "refreshed mart differs from a full build of the same final state"
            refresh = statistics.median(refresh_times)
            print(f"refresh    {n:>7,} {'recent' if recent else 'uniform':>7} changes on {REFRESH_ORDERS:,}: "
                  f"refresh {refresh * 1e3:8.1f} ms   full build {build * 1e3:8.1f} ms   "
                  f"speed-up {build / refresh:6.1f}x  (target >= 50x at 10k)   marts identical")


def main():
    ext = sys.argv[1]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    print(f"duckdb {duckdb.__version__}, {ROWS:,} orders, {COMPANIES} companies, {DAYS} days; medians")
    bench_build(con, runs=7)
    bench_dashboard(con, runs=400)
    bench_refresh(con, runs=5)


if __name__ == "__main__":
    main()
