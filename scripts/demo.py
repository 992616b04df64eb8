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
    print(f"SELECT * FROM serving_dashboard('{company}') LIMIT 5;")
    print(con.sql("SELECT * FROM serving_dashboard('O''Reilly Media') LIMIT 5"))

    plan = "\n".join(v for _, v in con.execute("SELECT * FROM serving_explain($1)", [company]).fetchall())
    scan = [line.strip("│ ").rstrip() for line in plan.splitlines() if "Table:" in line or "Filters:" in line]
    print("dashboard plan (serving_explain):", "; ".join(scan))

    for c in COMPANIES:
        mart = con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall()
        fact = con.execute("SELECT * FROM serving_olap($1)", [c]).fetchall()
        assert mart == fact, f"dashboard and fact disagree for {c}"
    print(f"reconciled: serving_dashboard == serving_olap for all {len(COMPANIES)} companies\n")

    print("Paimon lake table for the Fluss tier:")
    print(con.execute("SELECT paimon_tier_ddl('lake.fct_orders')").fetchone()[0])


if __name__ == "__main__":
    main(sys.argv[1])
