"""Shared by the live-serving tests (live/): the companies and orders schema they write, serving_status
as a dict, waiting for a condition, and following Paimon tables: seeded random commits for a
partial-update or deduplicate orders table, the merged rows after them (pure-Python oracles of
support/lake_util.py), and the check that the serving layer serves exactly those rows."""

from __future__ import annotations

import datetime
import random
import time
from collections import defaultdict

import pyarrow as pa
import pytest

from support.lake_util import ORDERS, Warehouse, canon, oracle_deduplicate, oracle_partial_update

COMPANIES = ["acme", "O'Reilly", "Café Zürich", "東京商事", "x' OR '1'='1", "globex", "a%b", "Acme"]
BASE_DAY = datetime.date(2024, 1, 1)

ORDERS_OP = pa.schema([*ORDERS, pa.field("op", pa.string())])


def status_dict(con) -> dict:
    cur = con.execute("SELECT * FROM serving_status()")
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1, rows
    return dict(zip(names, rows[0], strict=True))


def lake_source(wh: Warehouse, name: str) -> str:
    return "paimon:" + wh.path(name)


def dashboards_of(rows) -> dict:
    """{company: [(day, revenue), ...]} from merged rows (dicts), plain Python."""
    sums: dict = defaultdict(lambda: defaultdict(int))
    for r in rows:
        sums[r["company"]][r["order_day"]] += r["revenue"]
    return {c: sorted(sums[c].items(), key=lambda dr: (-dr[1], dr[0])) if c in sums else [] for c in COMPANIES}


def mart_of(rows) -> list:
    cells: dict = defaultdict(int)
    for r in rows:
        cells[(r["company"], r["order_day"])] += r["revenue"]
    return sorted((c, d, v) for (c, d), v in cells.items())


def oracle_mart(merged: list) -> dict:
    """{(company, order_day): (revenue, orders)} of merged fact rows, plain Python."""
    cells: dict = defaultdict(lambda: [0, 0])
    for r in merged:
        cell = cells[(r["company"], r["order_day"])]
        cell[0] += r["revenue"]
        cell[1] += 1
    return {k: tuple(v) for k, v in cells.items()}


def served_mart(con) -> dict:
    """The layer's mart_daily with its group counts, in oracle_mart's form."""
    rows = con.execute(
        "SELECT m.company, m.order_day, m.revenue, c.orders FROM mart_daily m JOIN "
        "(SELECT company, unnest(order_days) AS order_day, unnest(orders) AS orders FROM serving_mart_counts) c "
        "USING (company, order_day)"
    ).fetchall()
    return {(c, d): (int(r), n) for c, d, r, n in rows}


FCT_COLUMNS = ["order_id", "company", "order_day", "revenue"]


def assert_serves(con, merged: list, what: str = "") -> None:
    """fct_orders, mart_daily and every dashboard equal the merged rows' oracle."""
    assert con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders ORDER BY ALL").fetchall() == canon(
        merged, FCT_COLUMNS
    ), f"{what}: fct_orders"
    assert con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall() == mart_of(
        merged
    ), f"{what}: mart_daily"
    want = dashboards_of(merged)
    for c in COMPANIES:
        assert con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == want[c], f"{what}: dashboard {c!r}"
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == [], what


def wait_for(pred, timeout: float, what: str, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def day(n: int) -> datetime.date:
    return BASE_DAY + datetime.timedelta(days=n)


def random_lake_commits(rng: random.Random, engine: str, n_commits: int, first: int = 300) -> list:
    """Seeded commits for an orders table. partial-update: full inserts, then partial rows that
    correct revenue or move an order to another company or day (NULL = keep). deduplicate (with
    row kinds in `op`): full upserts, moves, corrections, deletes (-D, with or without the old
    values), re-inserts of deleted orders, and deletes of orders that never existed."""
    live: dict = {}
    deleted: list = []
    next_id = [1]
    pu = engine == "partial-update"

    def full(oid, op="+I"):
        row = {
            "order_id": oid,
            "company": rng.choice(COMPANIES),
            "order_day": day(rng.randrange(12)),
            "revenue": rng.randint(-500, 5000),
        }
        if not pu:
            row["op"] = op
        live[oid] = row
        return row

    def new():
        oid = next_id[0]
        next_id[0] += 1
        return full(oid)

    commits = [[new() for _ in range(first)]]
    for _ in range(n_commits):
        rows, used = [], set()
        for _ in range(rng.randint(1, 40)):
            op = rng.choice(
                ["insert", "correct", "correct", "move_company", "move_day", "zero", "delete", "reinsert", "ghost"]
            )
            cand = [k for k in live if k not in used]
            if op in ("correct", "move_company", "move_day", "zero", "delete") and cand:
                oid = rng.choice(cand)
                cur = dict(live[oid])
                if op == "delete":
                    if pu:
                        continue  # pypaimon cannot write -D rows into a partial-update table
                    keep_values = rng.random() < 0.5
                    rows.append(
                        {
                            "order_id": oid,
                            "company": cur["company"] if keep_values else None,
                            "order_day": cur["order_day"] if keep_values else None,
                            "revenue": cur["revenue"] if keep_values else None,
                            "op": "-D",
                        }
                    )
                    del live[oid]
                    deleted.append(oid)
                    used.add(oid)
                    continue
                change = {
                    "correct": {"revenue": rng.randint(-500, 5000)},
                    "zero": {"revenue": 0},
                    "move_company": {"company": rng.choice(COMPANIES)},
                    "move_day": {"order_day": day(rng.randrange(14))},
                }[op]
                cur.update(change)
                live[oid] = cur
                if pu:  # only the changed column; NULL never overwrites
                    rows.append({"order_id": oid, "company": None, "order_day": None, "revenue": None, **change})
                else:
                    rows.append({**cur, "op": "+U"})
                used.add(oid)
            elif op == "reinsert" and not pu and [k for k in deleted if k not in used and k not in live]:
                oid = rng.choice([k for k in deleted if k not in used and k not in live])
                rows.append(full(oid))
                used.add(oid)
            elif op == "ghost" and not pu:
                oid = 10_000_000 + next_id[0]
                next_id[0] += 1
                rows.append({"order_id": oid, "company": None, "order_day": None, "revenue": None, "op": "-D"})
                used.add(oid)
            else:
                row = new()
                rows.append(row)
                used.add(row["order_id"])
        if rows:
            commits.append(rows)
    return commits


def merged_after(engine: str, commits: list) -> list:
    if engine == "partial-update":
        rows = oracle_partial_update(commits, key="order_id")
    else:
        rows = oracle_deduplicate(commits, key="order_id", kind="op")
    return [{c: r[c] for c in FCT_COLUMNS} for r in rows]


def create_orders(wh: Warehouse, name: str, engine: str):
    if engine == "partial-update":
        return wh.create(name, ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    return wh.create(
        name,
        ORDERS_OP,
        ["order_id"],
        {"bucket": "2", "merge-engine": "deduplicate", "changelog-producer": "input", "rowkind.field": "op"},
    )
