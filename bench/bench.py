#!/usr/bin/env python3
"""make bench: streamhouse against native DuckDB baselines measured in the same process.

Every figure is a median over repeated runs (this machine is noisy); ratios are ours / native.
  build      serving_build(src)   vs  the same CTAS + GROUP BY as plain SQL, 3M orders
  dashboard  serving_dashboard(c) vs  the same query as a native prepared statement
  dash-month serving_dashboard(c, top := 10, from_day, to_day, grain := 'month') over a 3-year
             window, 200 companies x 3 years of days, vs the same question written natively
             against mart_daily, and vs today's way: serving_dashboard(c) wrapped in SQL
             WHERE/GROUP BY/LIMIT (which runs after the function produced the whole history)
  refresh    serving_refresh(k changed orders) vs serving_build of the same final state, 10M
             orders, k = 1k / 10k / 100k, changes among recent orders (a live stream) and
             uniform over all history (worst case). Correctness: the same changes are applied in
             plain SQL to a native copy of the original rows (the source of truth); the refreshed
             fct_orders must hold exactly those rows and mart_daily must equal their native
             aggregate (and the mart of the full build)

Each target's line ends in its verdict, PASS or MISSED (bench/summary.py gathers them); a wrong
answer stops the run with an AssertionError (exit 1).

usage: bench.py <extension> [--quick]   (--quick: correctness only, on tiny sizes in a few seconds;
no target is judged: `make test` runs it so the script cannot rot)
"""

import datetime
import statistics
import sys
import time

import duckdb

ROWS = 3_000_000
COMPANIES = 50
DAYS = 365
# --quick: correctness only; every figure is printed without a verdict.
QUICK = False
# The refresh target: this many changed orders among recent ones, at least this speed-up.
REFRESH_TARGET_N, REFRESH_TARGET_X = 10_000, 50


def verdict(ok: bool) -> str:
    """The verdict word bench/summary.py reads; none in a --quick run."""
    if QUICK:
        return "quick: not judged"
    return "PASS" if ok else "MISSED"


def median_time(fn, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def make_source(con, rows, companies=COMPANIES, days=DAYS, first_day="2024-01-01"):
    con.execute(f"""
        CREATE OR REPLACE TABLE src AS
        SELECT i AS order_id,
               'company_' || (hash(i) % {companies}) AS company,
               DATE '{first_day}' + CAST(hash(i * 31) % {days} AS INTEGER) AS order_day,
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
    print(
        f"{name:<10} streamhouse {ours * 1e3:9.3f} ms   native {native * 1e3:9.3f} ms   "
        f"ratio {ratio:5.2f}x  (target <= {target}x: {verdict(ratio <= target)})"
    )
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

    def native_stmt(c):
        return con.execute(DASHBOARD, [c]).fetchall()

    def ours_stmt(c):
        return con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall()

    for c in companies[:5]:
        assert native_stmt(c) == ours_stmt(c)
    ours, native = [], []
    for i in range(runs):
        c = companies[i % COMPANIES]
        native.append(median_time(lambda c=c: native_stmt(c), 1))
        ours.append(median_time(lambda c=c: ours_stmt(c), 1))
    return report("dashboard", statistics.median(ours), statistics.median(native), 1.2)


# The dashboard with parameters: every day of three years for each of 200 companies.
WINDOW_ORDERS = 2_000_000
WINDOW_COMPANIES = 200
WINDOW_FROM, WINDOW_TO = "2024-01-01", "2026-12-31"
WINDOW_DAYS = 1096
WINDOWED = (
    f"SELECT * FROM serving_dashboard($1, top := 10, from_day := DATE '{WINDOW_FROM}', "
    f"to_day := DATE '{WINDOW_TO}', grain := 'month')"
)
NATIVE_WINDOWED = (
    "SELECT CAST(date_trunc('month', order_day) AS DATE) AS month, SUM(revenue) AS revenue FROM mart_daily "
    "WHERE company = $1 AND order_day BETWEEN $2 AND $3 GROUP BY 1 ORDER BY revenue DESC, month LIMIT 10"
)
WRAPPED_WINDOWED = (
    "SELECT CAST(date_trunc('month', order_day) AS DATE) AS month, SUM(revenue) AS revenue "
    f"FROM serving_dashboard($1) WHERE order_day BETWEEN DATE '{WINDOW_FROM}' AND DATE '{WINDOW_TO}' "
    "GROUP BY 1 ORDER BY revenue DESC, month LIMIT 10"
)


def bench_dashboard_window(con, runs):
    make_source(con, WINDOW_ORDERS, WINDOW_COMPANIES, WINDOW_DAYS, WINDOW_FROM)
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    companies, days = con.execute(
        "SELECT count(DISTINCT company), count(DISTINCT order_day) FROM mart_daily"
    ).fetchone()
    assert (companies, days) == (WINDOW_COMPANIES, WINDOW_DAYS), (companies, days)
    bounds = [datetime.date.fromisoformat(WINDOW_FROM), datetime.date.fromisoformat(WINDOW_TO)]

    def ours(c):
        return con.execute(WINDOWED, [c]).fetchall()

    def native(c):
        return con.execute(NATIVE_WINDOWED, [c, *bounds]).fetchall()

    def wrapped(c):
        return con.execute(WRAPPED_WINDOWED, [c]).fetchall()

    names = [f"company_{i}" for i in range(WINDOW_COMPANIES)]
    for c in names[:5]:
        assert ours(c) == native(c) == wrapped(c) and len(native(c)) == 10
    t_ours, t_native, t_wrapped = [], [], []
    for i in range(runs):  # interleaved so drift hits all three alike
        c = names[i % WINDOW_COMPANIES]
        t_native.append(median_time(lambda c=c: native(c), 1))
        t_ours.append(median_time(lambda c=c: ours(c), 1))
        t_wrapped.append(median_time(lambda c=c: wrapped(c), 1))
    ours_median, wrapped_median = statistics.median(t_ours), statistics.median(t_wrapped)
    report("dash-month", ours_median, statistics.median(t_native), 1.2)
    print(
        f"{'':<10} serving_dashboard(c) wrapped in SQL WHERE/GROUP BY/LIMIT {wrapped_median * 1e3:9.3f} ms: "
        f"the parameters answer {wrapped_median / ours_median:5.2f}x faster"
    )


REFRESH_ORDERS = 10_000_000


def make_changes(con, n, seed, recent):
    """n changed orders: 70% corrections/moves of existing orders, 10% cancellations, 20% new
    orders. `recent`: the existing ones are among the latest 2% of orders, as in a live stream
    (late corrections); otherwise uniformly over all history (the worst case). Picked from
    `truth`, the source of truth, never from the tables under test."""
    pool = (
        f"(SELECT order_id FROM truth WHERE order_id >= (SELECT max(order_id) FROM truth) - {REFRESH_ORDERS // 50})"
        if recent
        else "truth"
    )
    con.execute(changes_sql(pool, n, seed, "(SELECT max(order_id) FROM truth) + 1"))


# The source of truth moves by plain SQL: every changed order's old row out, its new row in.
APPLY_TO_TRUTH = """
BEGIN;
DELETE FROM truth WHERE order_id IN (SELECT order_id FROM changes);
INSERT INTO truth SELECT order_id, company, order_day, revenue FROM changes WHERE NOT deleted;
COMMIT;
"""

# Differences between two relations with the same columns, both ways (0 = identical multisets).
DIFF = """SELECT count(*) FROM ((SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})
                      UNION ALL (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a}))"""

# An order-independent fingerprint of a fact table's content (count + sum of row hashes).
FINGERPRINT = "SELECT count(*), sum(hash(order_id, company, order_day, revenue)::HUGEINT) FROM {t}"


def check_against_truth(con, what):
    """The refreshed layer vs the source of truth: fct_orders holds exactly truth's rows, and
    mart_daily equals truth aggregated by native DuckDB."""
    fct, truth = (con.execute(FINGERPRINT.format(t=t)).fetchone() for t in ("fct_orders", "truth"))
    assert fct == truth, f"{what}: refreshed fct_orders differs from the source of truth ({fct} vs {truth})"
    con.execute(
        "CREATE OR REPLACE TABLE truth_mart AS SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue "
        "FROM truth GROUP BY company, order_day"
    )
    diff = con.execute(DIFF.format(a="mart_daily", b="truth_mart")).fetchone()[0]
    assert diff == 0, f"{what}: refreshed mart_daily differs from the source of truth aggregated natively ({diff} rows)"


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
               CASE WHEN k % 8 = 0 THEN NULL
                    ELSE DATE '2024-01-01' + CAST(hash(order_id * {seed}) % {DAYS} AS INTEGER) END AS order_day,
               CASE WHEN k % 8 = 0 THEN NULL
                    ELSE CAST(hash(order_id + 7 * {seed}) % 100000 AS BIGINT) - 5000 END AS revenue,
               k % 8 = 0 AS deleted
        FROM picked
        UNION ALL
        SELECT {first_new_id} + i, 'company_' || (hash(i + {seed}) % {COMPANIES}),
               DATE '2024-01-01' + CAST(hash(i * 3 + {seed}) % {DAYS} AS INTEGER),
               CAST(hash(i + 11 * {seed}) % 100000 AS BIGINT) - 5000, false
        FROM range({n - picked}) t(i)"""


def bench_refresh(con, runs, sizes=(1_000, 10_000, 100_000)):
    make_source(con, REFRESH_ORDERS)
    con.execute("CREATE OR REPLACE TABLE truth AS SELECT * FROM src")
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    seed = 0
    for recent in (True, False):
        for n in sizes:
            refresh_times = []
            for _ in range(runs):
                seed += 1
                make_changes(con, n, seed, recent)
                t = time.perf_counter()
                con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
                refresh_times.append(time.perf_counter() - t)
                con.execute(APPLY_TO_TRUTH)
            kind = "recent" if recent else "uniform"
            check_against_truth(con, f"after {runs} refreshes of {n:,} {kind} changes")
            assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
            con.execute("CREATE OR REPLACE TABLE mart_refreshed AS SELECT * FROM mart_daily")
            # the baseline: a full build of the same final state, from the source of truth
            build = median_time(lambda: con.execute("SELECT * FROM serving_build('truth')").fetchall(), runs)
            diff = con.execute(DIFF.format(a="mart_daily", b="mart_refreshed")).fetchone()[0]
            assert diff == 0, "refreshed mart differs from a full build of the source of truth"
            refresh = statistics.median(refresh_times)
            speedup = build / refresh
            judged = recent and n == REFRESH_TARGET_N
            target = (
                f"(target >= {REFRESH_TARGET_X}x: {verdict(speedup >= REFRESH_TARGET_X)})" if judged else "(no target)"
            )
            print(
                f"refresh    {n:>7,} {kind:>7} changes on {REFRESH_ORDERS:,}: "
                f"refresh {refresh * 1e3:8.1f} ms   full build {build * 1e3:8.1f} ms   "
                f"speed-up {speedup:6.1f}x  {target}   == source of truth"
            )


def main():
    global ROWS, REFRESH_ORDERS, WINDOW_ORDERS, QUICK
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    args = [a for a in sys.argv[1:] if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    quick = QUICK = "--quick" in sys.argv[1:]
    if quick:
        ROWS, REFRESH_ORDERS, WINDOW_ORDERS = 20_000, 50_000, 50_000
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{args[0]}'")
    print(
        f"duckdb {duckdb.__version__}, {ROWS:,} orders, {COMPANIES} companies, {DAYS} days; medians"
        + ("; QUICK: correctness only, no target judged" if quick else "")
    )
    bench_build(con, runs=1 if quick else 7)
    bench_dashboard(con, runs=10 if quick else 400)
    bench_dashboard_window(con, runs=10 if quick else 400)
    bench_refresh(
        con, runs=1 if quick else 5, sizes=(REFRESH_TARGET_N,) if quick else (1_000, REFRESH_TARGET_N, 100_000)
    )


if __name__ == "__main__":
    main()
