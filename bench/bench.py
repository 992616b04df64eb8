#!/usr/bin/env python3
"""make bench: streamhouse against native DuckDB baselines measured in the same process.

Every figure is a median over repeated runs (this machine is noisy); ratios are ours / native.
  build      serving_build(src)   vs  the same CTAS + GROUP BY as plain SQL, 3M orders
  dashboard  serving_dashboard(c) vs  the same query as a native prepared statement
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


NATIVE_BUILD = """
BEGIN;
CREATE OR REPLACE TABLE fct_native AS
  SELECT CAST(order_id AS BIGINT) AS order_id, company, CAST(order_day AS DATE) AS order_day,
         CAST(revenue AS BIGINT) AS revenue FROM src;
CREATE OR REPLACE TABLE mart_native AS
  SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM fct_native
  GROUP BY company, order_day ORDER BY company, order_day;
COMMIT;
"""

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


def main():
    ext = sys.argv[1]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    print(f"duckdb {duckdb.__version__}, {ROWS:,} orders, {COMPANIES} companies, {DAYS} days; medians")
    bench_build(con, runs=7)
    bench_dashboard(con, runs=400)


if __name__ == "__main__":
    main()
