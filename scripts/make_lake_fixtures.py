#!/usr/bin/env python3
"""Writes the small, deterministic Paimon tables the sqllogictest files read, with Apache
Paimon's own Python writer (pypaimon). Usage: make_lake_fixtures.py OUT_DIR"""
import datetime
import shutil
import sys
from pathlib import Path

import pyarrow as pa
from pypaimon import CatalogFactory, Schema


def commit(table, schema, rows):
    wb = table.new_batch_write_builder()
    w, c = wb.new_write(), wb.new_commit()
    w.write_arrow(pa.Table.from_pylist(rows, schema=schema))
    c.commit(w.prepare_commit())
    w.close()
    c.close()


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    catalog = CatalogFactory.create({"warehouse": str(out / "lake")})
    catalog.create_database("db", ignore_if_exists=True)

    # The Fluss tier table: exactly paimon_tier_ddl's options. Three commits of upserts.
    tier = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32())])
    catalog.create_table("db.accounts", Schema.from_pyarrow_schema(tier, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input"}), False)
    t = catalog.get_table("db.accounts")
    commit(t, tier, [{"id": 1, "bal": 100}, {"id": 2, "bal": 200}, {"id": 3, "bal": 300}])
    commit(t, tier, [{"id": 1, "bal": 110}, {"id": 4, "bal": 400}])
    commit(t, tier, [{"id": 1, "bal": 120}, {"id": 2, "bal": 210}])

    # fct_orders as the upstream keeps it: partial-update, revenue corrected in later commits.
    orders = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("company", pa.string()),
                        ("order_day", pa.date32()), ("revenue", pa.int64())])
    catalog.create_table("db.fct_orders", Schema.from_pyarrow_schema(orders, primary_keys=["order_id"], options={
        "bucket": "1", "merge-engine": "partial-update"}), False)
    o = catalog.get_table("db.fct_orders")
    d = datetime.date(2026, 11, 1)
    commit(o, orders, [
        {"order_id": 1, "company": "acme", "order_day": d, "revenue": 100},
        {"order_id": 2, "company": "acme", "order_day": d, "revenue": 50},
        {"order_id": 3, "company": "acme", "order_day": d + datetime.timedelta(days=1), "revenue": 70},
        {"order_id": 4, "company": "O'Reilly", "order_day": d, "revenue": 5},
    ])
    commit(o, orders, [{"order_id": 2, "company": None, "order_day": None, "revenue": 80}])
    commit(o, orders, [{"order_id": 3, "company": None, "order_day": None, "revenue": 200}])

    (out / "not_paimon").mkdir(parents=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
