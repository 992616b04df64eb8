#!/usr/bin/env python3
"""Lake benchmarks (part of make bench), medians:
  lake read     the merged read of a 1M-row, 5-commit Paimon primary-key table, to Arrow, by
                paimon_scan vs pypaimon_rust vs pypaimon
  lake refresh  serving_refresh('paimon:...') after one more commit of k changed orders, on a table
                fed like a stream (each commit adds new orders and corrects recent ones), vs
                serving_build of the same snapshot; marts checked identical"""
import shutil
import statistics
import sys
import time
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from bench import median_time as median

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from paimon_write import commit, create_table, open_warehouse  # noqa: E402

ROWS = 1_000_000
COMMITS = 5


def write_table(root):
    catalog = open_warehouse(root)
    schema = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("company", pa.string()),
                        ("order_day", pa.date32()), ("revenue", pa.int64())])
    table = create_table(catalog, "orders", schema, ["order_id"], {"bucket": "1", "merge-engine": "deduplicate"})
    con = duckdb.connect()
    for c in range(COMMITS):
        # commit 0 writes every order, later commits rewrite a fifth of them (same keys)
        where = "" if c == 0 else f"WHERE hash(i * {c}) % 5 = 0"
        batch = con.sql(f"""SELECT i AS order_id, 'company_' || (hash(i + {c}) % 50) AS company,
                   DATE '2026-01-01' + CAST(hash(i * 7 + {c}) % 365 AS INTEGER) AS order_day,
                   CAST(hash(i * 13 + {c}) % 100000 AS BIGINT) AS revenue
                   FROM range({ROWS}) t(i) {where}""").to_arrow_table().cast(schema)
        commit(table, schema, batch)
    return table, f"{root}/db.db/orders"


STREAM_COMMITS = 20
STREAM_BATCH = 50_000


def stream_commit(con, table, schema, c, new, corrected):
    """Commit `c` of a stream: `new` orders with the next ids, and `corrected` orders among the
    previous commit's ids get a new day and revenue."""
    first = c * STREAM_BATCH
    rows = con.sql(f"""
        SELECT i AS order_id, 'company_' || (hash(i) % 50) AS company,
               DATE '2026-01-01' + CAST(hash(i * 7 + {c}) % 365 AS INTEGER) AS order_day,
               CAST(hash(i * 13 + {c}) % 100000 AS BIGINT) AS revenue
        FROM range({first}, {first + new}) t(i)
        UNION ALL
        SELECT i, 'company_' || (hash(i) % 50), DATE '2026-01-01' + CAST(hash(i + {c}) % 365 AS INTEGER),
               CAST(hash(i * 17 + {c}) % 100000 AS BIGINT)
        FROM range({first - STREAM_BATCH}, {first - STREAM_BATCH + corrected}) t(i) WHERE {c} > 0
        """).to_arrow_table().cast(schema)
    commit(table, schema, rows)


def bench_lake_refresh(root, con):
    catalog = open_warehouse(root)
    schema = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("company", pa.string()),
                        ("order_day", pa.date32()), ("revenue", pa.int64())])
    table = create_table(catalog, "stream", schema, ["order_id"], {"bucket": "2", "merge-engine": "deduplicate"})
    dcon = duckdb.connect()
    for c in range(STREAM_COMMITS):
        stream_commit(dcon, table, schema, c, STREAM_BATCH, STREAM_BATCH // 10)
    path = "paimon:" + f"{root}/db.db/stream"
    con.execute("SELECT * FROM serving_build(?)", [path]).fetchall()
    c = STREAM_COMMITS
    for k in (1_000, 10_000):
        times = []
        for _ in range(3):
            stream_commit(dcon, table, schema, c, k // 2, k // 2)
            c += 1
            t = time.perf_counter()
            con.execute("SELECT * FROM serving_refresh(?)", [path]).fetchall()
            times.append(time.perf_counter() - t)
        con.execute("CREATE OR REPLACE TABLE mart_refreshed AS SELECT * FROM mart_daily")
        build = median(lambda: con.execute("SELECT * FROM serving_build(?)", [path]).fetchall(), 3)
        diff = con.execute("""SELECT count(*) FROM ((FROM mart_daily EXCEPT ALL FROM mart_refreshed)
                              UNION ALL (FROM mart_refreshed EXCEPT ALL FROM mart_daily))""").fetchone()[0]
        assert diff == 0, "lake refresh and lake build disagree"
        refresh = statistics.median(times)
        rows = con.execute("SELECT count(*) FROM fct_orders").fetchone()[0]
        print(f"lake refresh {k:>6,} changed orders on {rows:,} ({c} snapshots): refresh {refresh * 1e3:7.1f} ms   "
              f"full build {build * 1e3:7.1f} ms   speed-up {build / refresh:5.1f}x   marts identical")


def main():
    ext = sys.argv[1]
    root = tempfile.mkdtemp(prefix="sh-lake-bench-")
    try:
        table, path = write_table(root)
        con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
        con.execute(f"LOAD '{ext}'")
        from pypaimon_rust.datafusion import PaimonCatalog

        rust_table = PaimonCatalog({"warehouse": root}).get_table("db.orders")

        def ours():
            return con.sql("SELECT * FROM paimon_scan('" + path.replace("'", "''") + "')").to_arrow_table()

        def pypaimon_rust():
            rb = rust_table.new_read_builder()
            return pa.Table.from_batches(rb.new_read().read(rb.new_scan().plan().splits()))

        def pypaimon():
            rb = table.new_read_builder()
            return rb.new_read().to_arrow(rb.new_scan().plan().splits())

        n = ours().num_rows
        assert n == ROWS == pypaimon_rust().num_rows, "readers disagree on the merged row count"
        t_ours = median(ours, 5)
        t_rust = median(pypaimon_rust, 5)
        t_py = median(pypaimon, 1)
        print(f"lake read  {ROWS:,} rows / {COMMITS} commits: paimon_scan {t_ours * 1e3:8.1f} ms   "
              f"pypaimon_rust {t_rust * 1e3:8.1f} ms ({t_rust / t_ours:4.2f}x of ours, target >= 1.0x)   "
              f"pypaimon {t_py * 1e3:8.1f} ms ({t_py / t_ours:5.1f}x)")
        bench_lake_refresh(root, con)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
