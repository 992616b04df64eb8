#!/usr/bin/env python3
"""Lake benchmarks (part of make bench), medians:
lake read     the merged read of a 1M-row, 5-commit Paimon primary-key table, to Arrow, by
              paimon_scan vs pypaimon_rust vs pypaimon
lake refresh  serving_refresh('paimon:...') after one more commit of k changed orders, on a table
              fed like a stream (each commit adds new orders and corrects recent ones), vs
              serving_build of the same snapshot
Checked: the three readers return the same rows (all columns, order-independent, compared
by native DuckDB), and every refreshed layer equals the source of truth (the generator's
rows upserted in plain SQL: fct_orders content, mart_daily == its native aggregate).

Target: paimon_scan at least as fast as pypaimon_rust (>= 1.0x), its line ending in PASS or MISSED
(bench/summary.py gathers them); a wrong answer stops the run with an AssertionError (exit 1).

usage: bench_lake.py <extension> [--quick]   (--quick: correctness only, 2k rows and 3 stream commits
of 500 orders, no target judged: `make test` runs it so the script cannot rot)"""

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from bench import median_time as median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from paimon_write import commit, create_table, open_warehouse

ROWS = 1_000_000
COMMITS = 5
QUICK = False
# paimon_scan's speed as a multiple of pypaimon_rust's, at least.
READ_TARGET_X = 1.0
REFRESH_SIZES = (1_000, 10_000)


def write_table(root):
    catalog = open_warehouse(root)
    schema = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    table = create_table(catalog, "orders", schema, ["order_id"], {"bucket": "1", "merge-engine": "deduplicate"})
    con = duckdb.connect()
    for c in range(COMMITS):
        # commit 0 writes every order, later commits rewrite a fifth of them (same keys)
        where = "" if c == 0 else f"WHERE hash(i * {c}) % 5 = 0"
        batch = (
            con.sql(f"""SELECT i AS order_id, 'company_' || (hash(i + {c}) % 50) AS company,
                   DATE '2026-01-01' + CAST(hash(i * 7 + {c}) % 365 AS INTEGER) AS order_day,
                   CAST(hash(i * 13 + {c}) % 100000 AS BIGINT) AS revenue
                   FROM range({ROWS}) t(i) {where}""")
            .to_arrow_table()
            .cast(schema)
        )
        commit(table, schema, batch)
    return table, f"{root}/db.db/orders"


STREAM_COMMITS = 20
STREAM_BATCH = 50_000


def stream_commit(con, table, schema, c, new, corrected):
    """Commit `c` of a stream: `new` orders with the next ids, and `corrected` orders among the
    previous commit's ids get a new day and revenue."""
    first = c * STREAM_BATCH
    rows = (
        con.sql(f"""
        SELECT i AS order_id, 'company_' || (hash(i) % 50) AS company,
               DATE '2026-01-01' + CAST(hash(i * 7 + {c}) % 365 AS INTEGER) AS order_day,
               CAST(hash(i * 13 + {c}) % 100000 AS BIGINT) AS revenue
        FROM range({first}, {first + new}) t(i)
        UNION ALL
        SELECT i, 'company_' || (hash(i) % 50), DATE '2026-01-01' + CAST(hash(i + {c}) % 365 AS INTEGER),
               CAST(hash(i * 17 + {c}) % 100000 AS BIGINT)
        FROM range({first - STREAM_BATCH}, {first - STREAM_BATCH + corrected}) t(i) WHERE {c} > 0
        """)
        .to_arrow_table()
        .cast(schema)
    )
    commit(table, schema, rows)
    return rows


# Differences between two relations with the same columns, both ways (0 = identical multisets).
DIFF = """SELECT count(*) FROM ((SELECT * FROM {a} EXCEPT ALL SELECT * FROM {b})
                      UNION ALL (SELECT * FROM {b} EXCEPT ALL SELECT * FROM {a}))"""
COLUMNS = "order_id, company, order_day, revenue"


def same_rows(tables: dict) -> dict:
    """Rows of each Arrow table that the first one does not have, and vice versa, by native
    DuckDB over all four columns (order-independent)."""
    plain = duckdb.connect()
    names = list(tables)
    for name, t in tables.items():
        plain.register(f"r_{name}", t)
        plain.execute(f"CREATE TABLE {name} AS SELECT {COLUMNS} FROM r_{name}")
    return {n: plain.execute(DIFF.format(a=names[0], b=n)).fetchall()[0][0] for n in names[1:]}


def upsert_truth(dcon, rows):
    """The source of truth of the stream: each commit's rows replace those orders."""
    dcon.register("batch", rows)
    dcon.execute("DELETE FROM truth WHERE order_id IN (SELECT order_id FROM batch)")
    dcon.execute(f"INSERT INTO truth SELECT {COLUMNS} FROM batch")
    dcon.unregister("batch")


def check_against_truth(con, dcon, what):
    fingerprint = f"SELECT count(*), sum(hash({COLUMNS})::HUGEINT) FROM {{}}"
    fct = con.execute(fingerprint.format("fct_orders")).fetchall()[0]
    truth = dcon.execute(fingerprint.format("truth")).fetchall()[0]
    assert fct == truth, f"{what}: fct_orders differs from the source of truth ({fct} vs {truth})"
    dcon.register("served", con.sql("SELECT company, order_day, revenue FROM mart_daily").to_arrow_table())
    dcon.execute("CREATE OR REPLACE TABLE served_mart AS FROM served")
    dcon.unregister("served")
    dcon.execute(
        "CREATE OR REPLACE TABLE truth_mart AS SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue "
        "FROM truth GROUP BY company, order_day"
    )
    diff = dcon.execute(DIFF.format(a="served_mart", b="truth_mart")).fetchall()[0][0]
    assert diff == 0, f"{what}: mart_daily differs from the source of truth aggregated natively ({diff} rows)"


def bench_lake_refresh(root, con):
    catalog = open_warehouse(root)
    schema = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    table = create_table(catalog, "stream", schema, ["order_id"], {"bucket": "2", "merge-engine": "deduplicate"})
    dcon = duckdb.connect()
    dcon.execute("CREATE TABLE truth (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    for c in range(STREAM_COMMITS):
        upsert_truth(dcon, stream_commit(dcon, table, schema, c, STREAM_BATCH, STREAM_BATCH // 10))
    path = "paimon:" + f"{root}/db.db/stream"
    con.execute("SELECT * FROM serving_build(?)", [path]).fetchall()
    check_against_truth(con, dcon, "lake build")
    c = STREAM_COMMITS
    for k in REFRESH_SIZES:
        times = []
        for _ in range(3):
            upsert_truth(dcon, stream_commit(dcon, table, schema, c, k // 2, k // 2))
            c += 1
            t = time.perf_counter()
            con.execute("SELECT * FROM serving_refresh(?)", [path]).fetchall()
            times.append(time.perf_counter() - t)
        check_against_truth(con, dcon, f"after 3 lake refreshes of {k:,} changed orders")
        con.execute("CREATE OR REPLACE TABLE mart_refreshed AS SELECT * FROM mart_daily")
        build = median(lambda: con.execute("SELECT * FROM serving_build(?)", [path]).fetchall(), 3)
        diff = con.execute(DIFF.format(a="mart_daily", b="mart_refreshed")).fetchone()[0]
        assert diff == 0, "lake refresh and lake build disagree"
        refresh = statistics.median(times)
        rows = con.execute("SELECT count(*) FROM fct_orders").fetchone()[0]
        print(
            f"lake refresh {k:>6,} changed orders on {rows:,} ({c} snapshots): refresh {refresh * 1e3:7.1f} ms   "
            f"full build {build * 1e3:7.1f} ms   speed-up {build / refresh:5.1f}x   == source of truth"
        )


def main():
    global ROWS, STREAM_BATCH, STREAM_COMMITS, REFRESH_SIZES, QUICK
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    args = [a for a in sys.argv[1:] if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    QUICK = "--quick" in sys.argv[1:]
    if QUICK:
        ROWS, STREAM_BATCH, STREAM_COMMITS, REFRESH_SIZES = 2_000, 500, 3, (100,)
    ext = args[0]
    root = tempfile.mkdtemp(prefix="sh-lake-bench-")
    try:
        table, path = write_table(root)
        con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
        con.execute(f"LOAD '{ext}'")
        from pypaimon_rust.datafusion import PaimonCatalog

        rust_table = PaimonCatalog({"warehouse": root}).get_table("db.orders")
        last = {}

        def ours():
            scan = "SELECT * FROM paimon_scan('" + path.replace("'", "''") + "')"
            last["paimon_scan"] = con.sql(scan).to_arrow_table()

        def pypaimon_rust():
            rb = rust_table.new_read_builder()
            last["pypaimon_rust"] = pa.Table.from_batches(rb.new_read().read(rb.new_scan().plan().splits()))

        def pypaimon():
            rb = table.new_read_builder()
            last["pypaimon"] = rb.new_read().to_arrow(rb.new_scan().plan().splits())

        runs = 1 if QUICK else 5
        t_ours = median(ours, runs)
        t_rust = median(pypaimon_rust, runs)
        t_py = median(pypaimon, 1)
        counts = {name: t.num_rows for name, t in last.items()}
        assert set(counts.values()) == {ROWS}, f"readers disagree on the merged row count: {counts}"
        diffs = same_rows(
            {"paimon_scan": last["paimon_scan"], "pypaimon": last["pypaimon"], "pypaimon_rust": last["pypaimon_rust"]}
        )
        assert diffs == {"pypaimon": 0, "pypaimon_rust": 0}, f"paimon_scan's rows differ from the others': {diffs}"
        speed = t_rust / t_ours
        judged = "quick: not judged" if QUICK else ("PASS" if speed >= READ_TARGET_X else "MISSED")
        print(
            f"lake read  {ROWS:,} rows / {COMMITS} commits: paimon_scan {t_ours * 1e3:8.1f} ms   "
            f"pypaimon_rust {t_rust * 1e3:8.1f} ms ({speed:4.2f}x of ours, target >= {READ_TARGET_X}x: {judged})   "
            f"pypaimon {t_py * 1e3:8.1f} ms ({t_py / t_ours:5.1f}x)   same rows as pypaimon and pypaimon_rust"
        )
        bench_lake_refresh(root, con)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
