#!/usr/bin/env python3
"""make demo-fluss: a dashboard following an Apache Fluss table while a writer writes.

Starts a local Fluss 0.9.1 cluster (scripts/fluss_cluster.py: ZooKeeper, a coordinator, a tablet
server and the lake tiering service into a Paimon warehouse, in build/fluss-demo), creates a
primary-key table with its own column names (id, customer, order_ts TIMESTAMP(3), amount
DECIMAL(10,2)) tiered into Paimon every second, and writes a first batch of orders with pyfluss.
DuckDB then builds the serving layer from it by union read (the lake snapshot Fluss tiered + the
changelog after it) through a column map, and follows the changelog every 100 ms while a writer
sends new orders, corrections and deletes for ~20 s; the dashboard and serving_status are printed
every few seconds. At the end the layer is checked against a plain-Python oracle (each order's
last value, then the rollup). Everything is stopped however the demo ends (Ctrl-C included).

usage: demo_fluss.py <extension> [--seconds N]
"""

from __future__ import annotations

import argparse
import datetime
import random
import sys
import threading
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import duckdb
import fluss
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fluss_cluster as cluster
from pyfluss_session import Fluss

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = ROOT / "build" / "fluss-demo"
DATABASE, TABLE, BUCKETS = "shop", "orders", 3
PATH = fluss.TablePath(DATABASE, TABLE)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("customer", pa.string()),
        ("order_ts", pa.timestamp("ms")),
        ("amount", pa.decimal128(10, 2)),
    ]
)
# The table's own columns seen as the serving columns (amount in cents).
COLUMNS = (
    "MAP {'order_id': 'id', 'company': 'customer', 'order_day': 'CAST(order_ts AS DATE)', "
    "'revenue': 'CAST(round(amount * 100) AS BIGINT)'}"
)
CUSTOMERS = ["Acme Corp", "O'Reilly Media", "Café Zürich", "東京商事", "Globex"]
SHOWN = "Café Zürich"
START = datetime.datetime(2026, 11, 1, 8, 0)
# Per writer tick (every 100 ms): new orders, corrections of live orders, deletes of live orders.
NEW, CORRECTED, DELETED, TICK = 5, 2, 1, 0.1


class Orders:
    """The writer's side: a seeded stream of order changes and the plain-Python oracle (the last
    value of every live order)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.live: dict[int, tuple] = {}
        self.next_id = 1

    def _order(self, oid: int) -> tuple:
        ts = START + datetime.timedelta(minutes=self.rng.randrange(14 * 24 * 60), milliseconds=self.rng.randrange(1000))
        return (oid, self.rng.choice(CUSTOMERS), ts, Decimal(self.rng.randrange(100, 500_000)) / 100)

    def changes(self, new: int, corrected: int, deleted: int) -> list:
        out = []
        for _ in range(new):
            row = self._order(self.next_id)
            self.next_id += 1
            self.live[row[0]] = row
            out.append(("upsert", row))
        for oid in self.rng.sample(sorted(self.live), min(corrected, len(self.live))):
            old, fresh = self.live[oid], self._order(oid)
            # a corrected amount, or the order moved to another day or customer
            field = self.rng.choice([1, 2, 3])
            row = tuple(fresh[i] if i == field else old[i] for i in range(4))
            self.live[oid] = row
            out.append(("upsert", row))
        touched = {v[0] if kind == "upsert" else v for kind, v in out}
        for oid in self.rng.sample(sorted(set(self.live) - touched), min(deleted, len(self.live) - len(touched))):
            del self.live[oid]
            out.append(("delete", oid))
        return out

    def fact(self) -> list:
        return sorted(
            (oid, c, ts.date(), int((amount * 100).to_integral_value())) for oid, c, ts, amount in self.live.values()
        )

    def mart(self) -> list:
        cells: dict = defaultdict(int)
        for _oid, company, day, revenue in self.fact():
            cells[(company, day)] += revenue
        return sorted((c, d, r) for (c, d), r in cells.items())


class Writer(threading.Thread):
    """Writes a batch of changes every TICK seconds for `seconds`, each acknowledged (flushed), with
    a connection of its own."""

    def __init__(self, bootstrap: str, orders: Orders, seconds: float):
        super().__init__(daemon=True)
        self.bootstrap, self.orders, self.seconds = bootstrap, orders, seconds
        self.acked, self.error, self.stop = 0, None, threading.Event()

    def run(self) -> None:
        try:
            with Fluss(self.bootstrap) as client:
                upserter = client.upserter(PATH)
                began = time.monotonic()
                tick = 0
                while time.monotonic() - began < self.seconds and not self.stop.is_set():
                    changes = self.orders.changes(NEW, CORRECTED, DELETED)
                    client.write(upserter, changes)
                    self.acked += len(changes)
                    tick += 1
                    time.sleep(max(0.0, began + tick * TICK - time.monotonic()))
        except BaseException as e:  # reported by the main thread
            self.error = e


def show_status(con) -> tuple:
    row = con.execute(
        "SELECT state, fluss_offset, lag_records, refreshes, lake_snapshot, fct_rows FROM serving_status()"
    ).fetchall()[0]
    print(
        f"  serving_status(): state {row[0]}, fluss_offset {row[1]}, lag_records {row[2]}, refreshes {row[3]}, "
        f"lake_snapshot {row[4]}, fct_rows {row[5]}"
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extension")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()

    print(f"starting a local Fluss cluster in {CLUSTER_DIR} (ZooKeeper, coordinator, tablet server, tiering) ...")
    try:
        with cluster.running(CLUSTER_DIR, say=lambda m: print("  " + m)) as state:
            return demo(args.extension, state, args.seconds)
    except KeyboardInterrupt:
        print("interrupted: the follower and the cluster are stopped", file=sys.stderr)
        return 130


def demo(ext: str, state: dict, seconds: float) -> int:
    bootstrap, warehouse = state["bootstrap"], state["warehouse"]
    source = f"fluss://{bootstrap}/{DATABASE}.{TABLE}"
    orders = Orders(40)
    with Fluss(bootstrap) as client:
        path = client.create_table(DATABASE, TABLE, SCHEMA, ["id"], BUCKETS, lake=True)
        assert path == PATH
        print(
            f"\nFluss table {DATABASE}.{TABLE}: id BIGINT (primary key), customer STRING, order_ts TIMESTAMP(3), "
            f"amount DECIMAL(10,2); {BUCKETS} buckets, tiered into Paimon every second"
        )
        client.write(client.upserter(path), orders.changes(2000, 0, 0))
        print("pyfluss wrote 2,000 orders; waiting for Fluss's tiering to commit them to the lake ...")
        snapshot = client.wait_tiered(path, BUCKETS)
        print(f"  lake snapshot {snapshot} holds them")
        client.write(client.upserter(path), orders.changes(100, 200, 50))
        print("then 100 new orders, 200 corrections and 50 deletes (in the changelog, after the lake snapshot)\n")

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{Path(ext).resolve()}'")
    try:
        print(f"SELECT * FROM serving_build('{source}',\n    lake := '{warehouse}',\n    columns := {COLUMNS});")
        print(
            con.sql(
                f"SELECT fct_rows, mart_rows, lake_snapshot, elapsed_ms FROM serving_build(?, lake := ?, "
                f"columns := {COLUMNS})",
                params=[source, warehouse],
            )
        )
        print(f"SELECT * FROM serving_follow('{source}', every := INTERVAL '100 ms');\n")
        con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source])
        reader = con.cursor()  # the dashboard's own connection
        writer = Writer(bootstrap, orders, seconds)
        print(
            f"writer: {seconds:.0f} s of {NEW * 10} new orders, {CORRECTED * 10} corrections and {DELETED * 10} "
            "deletes per second, each batch acknowledged by Fluss"
        )
        writer.start()
        began = time.monotonic()
        try:
            while writer.is_alive():
                writer.join(timeout=4)
                print(f"\n[{time.monotonic() - began:4.1f} s] writer: {writer.acked:,} changes acknowledged")
                show_status(reader)
                print(f"  SELECT * FROM serving_dashboard('{SHOWN}', top := 3);")
                print(reader.sql("SELECT * FROM serving_dashboard(?, top := 3)", params=[SHOWN]))
        finally:
            writer.stop.set()
            writer.join()
        if writer.error is not None:
            raise RuntimeError(f"the writer failed: {writer.error!r}") from writer.error
        return check(con, reader, client_ends(bootstrap), orders)
    finally:
        try:
            con.execute("SELECT * FROM serving_unfollow()")
        finally:
            con.close()


def client_ends(bootstrap: str) -> int:
    with Fluss(bootstrap) as client:
        return sum(client.end_offsets(PATH, BUCKETS).values())


def check(con, reader, end: int, orders: Orders) -> int:
    print(f"\nwriter done; waiting for the follower to reach the log end ({end:,} records) ...")
    deadline = time.monotonic() + 60
    while reader.execute("SELECT fluss_offset FROM serving_status()").fetchall()[0][0] != end:
        if time.monotonic() > deadline:
            print("the follower did not reach the log end within 60 s", file=sys.stderr)
            show_status(reader)
            return 1
        time.sleep(0.1)
    show_status(reader)
    fact = con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall()
    mart = con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
    wrong = []
    if fact != orders.fact():
        wrong.append("fct_orders")
    if mart != orders.mart():
        wrong.append("mart_daily")
    for c in CUSTOMERS:
        want = sorted(((d, r) for cc, d, r in orders.mart() if cc == c), key=lambda dr: (-dr[1], dr[0]))
        if con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() != want:
            wrong.append(f"serving_dashboard({c!r})")
    if wrong:
        print(f"WRONG: {', '.join(wrong)} differ from the plain-Python oracle", file=sys.stderr)
        return 1
    print(
        f"checked: fct_orders ({len(fact):,} orders), mart_daily ({len(mart):,} rows) and every customer's "
        "dashboard equal the plain-Python oracle (each order's last value, then the rollup)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
