#!/usr/bin/env python3
"""Writes the small, deterministic Paimon tables the sqllogictest files read, with Apache
Paimon's own Python writer (pypaimon). Usage: make_lake_fixtures.py OUT_DIR"""

import datetime
import shutil
import sys
from pathlib import Path

import pyarrow as pa
from paimon_write import commit, create_table, open_warehouse


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    catalog = open_warehouse(out / "lake")

    # The Fluss tier table: exactly paimon_tier_ddl's options. Three commits of upserts.
    tier = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32())])
    t = create_table(
        catalog, "accounts", tier, ["id"], {"bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input"}
    )
    commit(t, tier, [{"id": 1, "bal": 100}, {"id": 2, "bal": 200}, {"id": 3, "bal": 300}])
    commit(t, tier, [{"id": 1, "bal": 110}, {"id": 4, "bal": 400}])
    commit(t, tier, [{"id": 1, "bal": 120}, {"id": 2, "bal": 210}])

    # fct_orders as the upstream keeps it: partial-update, revenue corrected in later commits.
    orders = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    o = create_table(catalog, "fct_orders", orders, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
    d = datetime.date(2026, 11, 1)
    commit(
        o,
        orders,
        [
            {"order_id": 1, "company": "acme", "order_day": d, "revenue": 100},
            {"order_id": 2, "company": "acme", "order_day": d, "revenue": 50},
            {"order_id": 3, "company": "acme", "order_day": d + datetime.timedelta(days=1), "revenue": 70},
            {"order_id": 4, "company": "O'Reilly", "order_day": d, "revenue": 5},
        ],
    )
    commit(o, orders, [{"order_id": 2, "company": None, "order_day": None, "revenue": 80}])
    commit(o, orders, [{"order_id": 3, "company": None, "order_day": None, "revenue": 200}])

    # The same orders' merged state written once (one sorted run, no merge to do: how a compacted
    # table reads), in 2 buckets: FROM 'paimon:<dir>' hands it to DuckDB's Parquet reader.
    once = create_table(catalog, "orders_once", orders, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    commit(
        once,
        orders,
        [
            {"order_id": 1, "company": "acme", "order_day": d, "revenue": 100},
            {"order_id": 2, "company": "acme", "order_day": d, "revenue": 80},
            {"order_id": 3, "company": "acme", "order_day": d + datetime.timedelta(days=1), "revenue": 200},
            {"order_id": 4, "company": "O'Reilly", "order_day": d, "revenue": 5},
        ],
    )

    (out / "not_paimon").mkdir(parents=True)

    # DuckDB's sandbox (test/sql/sandbox.test): sandbox/ is the allowed directory. It holds a
    # copy of accounts, a symlink out to fct_orders, and a copy whose bucket-0 links outside.
    box = out / "sandbox"
    box.mkdir()
    accounts = out / "lake" / "db.db" / "accounts"
    shutil.copytree(accounts, box / "accounts")
    (box / "orders_link").symlink_to((out / "lake" / "db.db" / "fct_orders").resolve())
    shutil.copytree(accounts, box / "accounts_leaky")
    shutil.rmtree(box / "accounts_leaky" / "bucket-0")
    (box / "accounts_leaky" / "bucket-0").symlink_to((accounts / "bucket-0").resolve())


if __name__ == "__main__":
    main(Path(sys.argv[1]))
