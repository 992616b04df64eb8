#!/usr/bin/env python3
"""make demo: sample merged orders -> serving_build -> the dashboard for one company.

Writes 500k already-merged orders (one row per order, as a Paimon partial-update table would
hold them) to Parquet, loads the extension into an in-memory DuckDB, builds the serving
layer from the file and shows the dashboard, its plan, and the reconciliation with the fact.
"""

import sys
import tempfile
from pathlib import Path

import duckdb

COMPANIES = ["Acme Corp", "O'Reilly Media", "Café Zürich", "東京商事", "Globex", "Initech"]


def main(ext: str) -> None:
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{Path(ext).resolve()}'")
    with tempfile.TemporaryDirectory() as tmp:
        orders = Path(tmp) / "fct_orders_merged.parquet"
        names = ", ".join("'" + c.replace("'", "''") + "'" for c in COMPANIES)
        con.execute(f"""
            COPY (SELECT i AS order_id,
                         list_extract([{names}], 1 + CAST(hash(i) % {len(COMPANIES)} AS INTEGER)) AS company,
                         DATE '2026-09-01' + CAST(hash(i * 7) % 90 AS INTEGER) AS order_day,
                         CAST(hash(i * 13) % 20000 AS BIGINT) - 1000 AS revenue
                  FROM range(500000) t(i)) TO '{orders}' (FORMAT parquet)""")
        print(f"sample: 500,000 merged orders in {orders.name}\n")
        print("SELECT * FROM serving_build('<file>');")
        print(con.sql(f"SELECT * EXCLUDE (source) FROM serving_build('{orders}')"))

    company = "O'Reilly Media"
    for params in ("top := 5", "grain := 'month'"):
        print(f"SELECT * FROM serving_dashboard('O''Reilly Media', {params});")
        print(con.sql(f"SELECT * FROM serving_dashboard('O''Reilly Media', {params})"))

    plan = "\n".join(
        v for (v,) in con.execute("SELECT explain_value FROM serving_explain($1) ORDER BY line", [company]).fetchall()
    )
    scan = [line.strip("│ ").rstrip() for line in plan.splitlines() if "Table:" in line or "Filters:" in line]
    print("dashboard plan (serving_explain):", "; ".join(scan))

    for c in COMPANIES:
        mart = con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall()
        fact = con.execute("SELECT * FROM serving_olap($1)", [c]).fetchall()
        assert mart == fact, f"dashboard and fact disagree for {c}"
    print(f"reconciled: serving_dashboard == serving_olap for all {len(COMPANIES)} companies\n")

    print("Paimon lake table for the Fluss tier:")
    print(con.execute("SELECT paimon_tier_ddl('lake.fct_orders')").fetchall()[0][0])
    lake_demo(con)


def lake_demo(con) -> None:
    """The same serving layer fed straight from a Paimon partial-update table (written here with
    Apache Paimon's pypaimon), then refreshed after a revenue correction lands in the lake."""
    import datetime

    import pyarrow as pa
    from paimon_write import commit as paimon_commit
    from paimon_write import create_table, open_warehouse

    with tempfile.TemporaryDirectory() as tmp:
        catalog = open_warehouse(tmp)
        schema = pa.schema(
            [
                pa.field("order_id", pa.int64(), nullable=False),
                ("company", pa.string()),
                ("order_day", pa.date32()),
                ("revenue", pa.int64()),
            ]
        )
        options = {"bucket": "1", "merge-engine": "partial-update", "changelog-producer": "input"}
        table = create_table(catalog, "fct_orders", schema, ["order_id"], options)

        def commit(rows):
            paimon_commit(table, schema, rows)

        day = datetime.date(2026, 11, 30)
        commit(
            [
                {
                    "order_id": i,
                    "company": COMPANIES[i % 3],
                    "order_day": day - datetime.timedelta(days=i % 4),
                    "revenue": 100 * i,
                }
                for i in range(1, 13)
            ]
        )
        path = f"{tmp}/db.db/fct_orders"
        print("\nLake: a Paimon partial-update table (written by pypaimon), built straight into the serving layer")
        print(con.sql(f"SELECT fct_rows, mart_rows, lake_snapshot FROM serving_build('paimon:{path}')"))
        commit([{"order_id": 3, "company": None, "order_day": None, "revenue": 5}])  # a revenue correction
        print("a revenue correction lands (snapshot 2); SELECT ... FROM serving_refresh('paimon:<dir>')")
        print(con.sql(f"SELECT inserted, updated, deleted, lake_snapshot FROM serving_refresh('paimon:{path}')"))
        print(con.sql("SELECT lake_snapshot, refreshes, round(age_seconds, 3) AS age_seconds FROM serving_status()"))
        clean = con.execute("SELECT count(*) FROM serving_reconcile()").fetchall()[0][0] == 0
        print("serving_reconcile(): empty, mart == fact" if clean else "serving_reconcile(): DIFFERENCES")


if __name__ == "__main__":
    main(sys.argv[1])
