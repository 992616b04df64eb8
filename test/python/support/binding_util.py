"""Shared by the binding tests (test_node_binding.py, test_cli.py's script flow): a small Paimon
orders table written by pypaimon, read back by pypaimon (the oracle the bindings' paimon_scan is
compared with), and a change set with its pure-Python application."""

from __future__ import annotations

import datetime
import random

import pyarrow as pa

from support.lake_util import Warehouse, canon, oracle_deduplicate

ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
COLUMNS = ["order_id", "company", "order_day", "revenue"]
LAKE_COMPANIES = ["acme", "O'Reilly", "東京商事", "globex"]


def write_orders_lake(root, seed: int = 5) -> tuple[str, list[tuple], int]:
    """A deduplicate primary-key orders table over 2 buckets, 3 commits: new orders, then corrected
    and moved ones plus late arrivals. Returns (table dir, pypaimon's read as sorted tuples, snapshots)."""
    rng = random.Random(seed)
    wh = Warehouse(root)
    t = wh.create("fct_orders", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "deduplicate"})
    base = datetime.date(2026, 10, 1)

    def order(oid):
        return {
            "order_id": oid,
            "company": rng.choice(LAKE_COMPANIES),
            "order_day": base + datetime.timedelta(days=rng.randrange(20)),
            "revenue": rng.randrange(-500, 5000),
        }

    t.commit([order(oid) for oid in range(1, 401)])
    t.commit([order(oid) for oid in rng.sample(range(1, 401), 80)] + [order(oid) for oid in range(401, 441)])
    t.commit([order(oid) for oid in rng.sample(range(1, 441), 30)])
    read = canon(t.read(), COLUMNS)
    # Two independent readers of the same commits must agree before either is an oracle.
    assert read == canon(oracle_deduplicate(t.commits, key="order_id"), COLUMNS)
    return wh.path("fct_orders"), read, len(t.commits)


def random_changes(
    rng: random.Random, state: dict, companies: list[str], days: list[datetime.date], next_id: int
) -> list[tuple]:
    """One change set (order_id, company, order_day, revenue, deleted), one row per key: corrections,
    moves to another day/company, deletions, new orders, and deletions of orders that never existed."""
    live = sorted(state)
    picked = rng.sample(live, min(len(live), 400))
    rows = []
    for i, oid in enumerate(picked):
        company, day, _rev = state[oid]
        kind = i % 4
        if kind == 0:  # revenue corrected
            rows.append((oid, company, day, rng.randrange(-(10**6), 10**9), False))
        elif kind == 1:  # moved to another day and maybe another company
            rows.append((oid, rng.choice(companies), rng.choice(days), rng.randrange(0, 10**9), False))
        elif kind == 2:  # cancelled
            rows.append((oid, None, None, None, True))
        else:  # corrected to 0: the group must stay
            rows.append((oid, company, day, 0, False))
    for k in range(60):  # late arrivals
        rows.append((next_id + k, rng.choice(companies), rng.choice(days), rng.randrange(1, 10**9), False))
    for k in range(15):  # deletes of unknown orders: ignored
        rows.append((next_id + 1_000_000 + k, None, None, None, True))
    rng.shuffle(rows)
    return rows


def apply_changes(state: dict, rows: list[tuple]) -> tuple[int, int, int, int]:
    """Applies a change set to {order_id: (company, day, revenue)}; returns the counts serving_refresh
    must report: (inserted, updated, deleted, ignored_deletes)."""
    counts = [0, 0, 0, 0]
    for oid, company, day, revenue, deleted in rows:
        if deleted:
            counts[2 if oid in state else 3] += 1
            state.pop(oid, None)
        else:
            counts[1 if oid in state else 0] += 1
            state[oid] = (company, day, revenue)
    return tuple(counts)
