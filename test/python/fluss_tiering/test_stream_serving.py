"""The stream tier (issue 40, items 2-4 and 6): serving straight from a real Apache Fluss cluster.

A Fluss primary-key table receives a seeded random stream of new orders, corrections (company, day
or revenue moved) and deletes from an independent client (pyfluss). Checked against a plain-Python
oracle (the last value per key, then the rollup):
- `serving_build('fluss://...')` — the union read of the lake snapshot Fluss's tiering committed
  and the changelog after it;
- `serving_follow('fluss://...')` — the changelog tailed, each batch one refresh;
- once tiering caught up, a batch `serving_build('paimon:<the tiered table>')` of the lake table
  Fluss wrote. One copy, two latencies, the same answer.
Bad input and faults: a log table, an unknown table, an unreachable cluster (bounded), a sandbox
without network access."""

from __future__ import annotations

import asyncio
import datetime
import json
import pathlib
import random
import re
import time
from collections import defaultdict

import duckdb
import fluss
import pyarrow as pa
import pytest
from conftest import connect
from support.live_util import status_dict, wait_for

pytestmark = pytest.mark.xdist_group("jvm")  # the session's Fluss cluster: one worker (conftest.py)

COMPANIES = ["acme", "O'Reilly", "Café Zürich", "globex", "東京商事"]
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
DAY0 = datetime.date(2026, 11, 1)


def run(coro):
    return asyncio.run(coro)


async def _connect(bootstrap: str):
    return await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))


async def _create(bootstrap: str, name: str, schema: pa.Schema, keys, buckets: int, lake: bool) -> None:
    conn = await _connect(bootstrap)
    admin = conn.get_admin()
    await admin.create_database("shop", ignore_if_exists=True)
    props = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"} if lake else {}
    descriptor = fluss.TableDescriptor(fluss.Schema(schema, primary_keys=keys), bucket_count=buckets, properties=props)
    await admin.create_table(fluss.TablePath("shop", name), descriptor, ignore_if_exists=False)
    await conn.close()


async def _write(bootstrap: str, name: str, ops: list) -> None:
    """`ops`: ("upsert", row) or ("delete", order_id), acknowledged by the cluster on flush."""
    conn = await _connect(bootstrap)
    table = await conn.get_table(fluss.TablePath("shop", name))
    writer = table.new_upsert().create_writer()
    for op, value in ops:
        if op == "upsert":
            writer.upsert(value)
        else:
            writer.delete({"order_id": value})
    await writer.flush()
    await conn.close()


async def _offsets(bootstrap: str, name: str, buckets: int) -> tuple[dict, dict]:
    """(log end offsets, tiered offsets) per bucket."""
    conn = await _connect(bootstrap)
    admin = conn.get_admin()
    path = fluss.TablePath("shop", name)
    end = await admin.list_offsets(path, list(range(buckets)), fluss.OffsetSpec.latest())
    try:
        snap = await admin.get_latest_lake_snapshot(path)
        tiered = {b.bucket_id: o for b, o in snap.table_buckets_offset.items()}
    except fluss.FlussError as e:
        if e.error_code != fluss.ErrorCode.LAKE_SNAPSHOT_NOT_EXIST:
            raise
        tiered = {}
    await conn.close()
    return dict(end), tiered


def wait_tiered(bootstrap: str, name: str, buckets: int, what: str) -> dict:
    """Fluss's latest lake snapshot once it holds every bucket up to its log end (all tiered)."""

    def tiered():
        end, lake = run(_offsets(bootstrap, name, buckets))
        return lake if lake and all(lake.get(b, 0) == end[b] for b in end) else None

    return wait_for(tiered, 180, what, poll=1)


class Stream:
    """A seeded random stream of order changes and its plain-Python oracle (last value per key)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.live: dict[int, dict] = {}
        self.next_id = 1

    def _row(self, oid: int) -> dict:
        return {
            "order_id": oid,
            "company": self.rng.choice(COMPANIES),
            "order_day": DAY0 + datetime.timedelta(days=self.rng.randrange(10)),
            "revenue": self.rng.randint(-500, 50_000),
        }

    def batch(self, new: int, corrected: int, deleted: int) -> list:
        ops = []
        for _ in range(new):
            row = self._row(self.next_id)
            self.next_id += 1
            self.live[row["order_id"]] = row
            ops.append(("upsert", row))
        for oid in self.rng.sample(sorted(self.live), min(corrected, len(self.live))):
            row = {**self.live[oid]}
            change = self.rng.choice(["company", "order_day", "revenue"])
            row[change] = self._row(oid)[change]
            self.live[oid] = row
            ops.append(("upsert", row))
        touched = {v["order_id"] if op == "upsert" else v for op, v in ops}
        for oid in self.rng.sample(sorted(set(self.live) - touched), min(deleted, len(self.live) - len(touched))):
            del self.live[oid]
            ops.append(("delete", oid))
        return ops

    def mart(self) -> list:
        cells: dict = defaultdict(int)
        for r in self.live.values():
            cells[(r["company"], r["order_day"])] += r["revenue"]
        return sorted((c, d, v) for (c, d), v in cells.items())

    def fact(self) -> list:
        return sorted((r["order_id"], r["company"], r["order_day"], r["revenue"]) for r in self.live.values())


def assert_serves(con, stream: Stream, what: str) -> None:
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == stream.fact(), f"{what}: fct_orders"
    mart = stream.mart()
    assert con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == mart, f"{what}: mart_daily"
    for c in COMPANIES:
        want = sorted(((d, v) for cc, d, v in mart if cc == c), key=lambda dv: (-dv[1], dv[0]))
        assert con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == want, f"{what}: {c!r}"
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == [], what


@pytest.mark.timeout(300)
def test_union_read_follow_and_the_tiered_lake_give_the_same_answer(fluss_cluster):
    bootstrap, warehouse = fluss_cluster["bootstrap"], fluss_cluster["warehouse"]
    name, buckets = "orders_union", 3
    run(_create(bootstrap, name, ORDERS, ["order_id"], buckets, lake=True))
    stream = Stream(40)
    run(_write(bootstrap, name, stream.batch(new=400, corrected=0, deleted=0)))
    run(_write(bootstrap, name, stream.batch(new=100, corrected=80, deleted=20)))

    wait_tiered(bootstrap, name, buckets, "Fluss's tiering to commit every bucket to the lake")
    # Written after the tiering caught up: the build reads them from the log, past the lake snapshot.
    run(_write(bootstrap, name, stream.batch(new=50, corrected=60, deleted=15)))
    source = f"fluss://{bootstrap}/shop.{name}"
    con = connect()
    row = con.execute("SELECT fct_rows, lake_snapshot FROM serving_build(?, lake := ?)", [source, warehouse]).fetchone()
    assert row[0] == len(stream.live) and row[1] is not None, row
    assert_serves(con, stream, "union-read build")
    s = status_dict(con)
    end, _ = run(_offsets(bootstrap, name, buckets))
    assert s["fluss_offset"] == sum(end.values()) and s["lag_records"] == 0, s
    # Spot-checked against Fluss's lookups and found in agreement: the lake part was kept.
    assert s["stream_read"] in ("readable", "latest"), s
    # The same through a column map whose expressions the spot check applies to Fluss's answers too.
    doubled = connect()
    revenue_twice = (
        "MAP {'order_id': 'order_id', 'company': 'company', 'order_day': 'order_day', 'revenue': 'revenue * 2'}"
    )
    row = doubled.execute(
        f"SELECT fct_rows, lake_snapshot FROM serving_build(?, lake := ?, columns := {revenue_twice})",
        [source, warehouse],
    ).fetchone()
    assert row == (len(stream.live), s["lake_snapshot"]), (row, s)
    assert status_dict(doubled)["stream_read"] in ("readable", "latest")
    assert doubled.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == [
        (k, c, d, 2 * v) for k, c, d, v in stream.fact()
    ]
    doubled.close()

    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source])
    for _ in range(3):
        run(_write(bootstrap, name, stream.batch(new=30, corrected=40, deleted=10)))
    end, _ = run(_offsets(bootstrap, name, buckets))
    wait_for(lambda: status_dict(con)["fluss_offset"] == sum(end.values()), 60, "the follower to apply the log")
    s = status_dict(con)
    assert s["state"] == "following" and s["lag_records"] == 0, s
    assert_serves(con, stream, "followed")
    con.execute("SELECT * FROM serving_unfollow()")

    # The lake table Fluss wrote, once tiering caught up, read as a batch Paimon table.
    wait_tiered(bootstrap, name, buckets, "Fluss's tiering to catch up with the follower's writes")
    lake = connect()
    lake.execute("SELECT * FROM serving_build(?)", [f"paimon:{warehouse}/shop.db/{name}"])
    assert_serves(lake, stream, "batch build of the tiered Paimon table")


@pytest.mark.timeout(120)
def test_a_table_without_tiering_is_read_from_its_log(fluss_cluster):
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_log_only"
    run(_create(bootstrap, name, ORDERS, ["order_id"], 2, lake=False))
    stream = Stream(41)
    run(_write(bootstrap, name, stream.batch(new=200, corrected=0, deleted=0)))
    run(_write(bootstrap, name, stream.batch(new=20, corrected=50, deleted=30)))
    con = connect()
    row = con.execute("SELECT lake_snapshot FROM serving_build(?)", [f"fluss://{bootstrap}/shop.{name}"]).fetchone()
    assert row == (None,)
    assert_serves(con, stream, "log-only build")


def test_bad_fluss_sources_are_refused_by_name(fluss_cluster):
    bootstrap = fluss_cluster["bootstrap"]
    run(_create(bootstrap, "events", ORDERS, None, 1, lake=False))
    con = connect()
    with pytest.raises(duckdb.Error, match=r"Fluss table 'fluss://.*/shop\.events'.*log table without a primary key"):
        con.execute("SELECT * FROM serving_build(?)", [f"fluss://{bootstrap}/shop.events"])
    with pytest.raises(duckdb.Error, match=r"shop\.no_such_table"):
        con.execute("SELECT * FROM serving_build(?)", [f"fluss://{bootstrap}/shop.no_such_table"])
    with pytest.raises(duckdb.Error, match=r"is not <database>\.<table>"):
        con.execute("SELECT * FROM serving_build(?)", [f"fluss://{bootstrap}/orders"])
    # Nothing built by any of them.
    assert con.execute("SELECT state FROM serving_status()").fetchone() == ("not built",)


def test_an_unreachable_cluster_is_a_bounded_error(fluss_cluster):
    con = connect()
    started = time.monotonic()
    with pytest.raises(duckdb.Error, match=r"(cannot reach|did not answer).*127\.0\.0\.1:1"):
        con.execute("SELECT * FROM serving_build('fluss://127.0.0.1:1/shop.orders')")
    assert time.monotonic() - started < 30


def test_network_access_off_is_refused(fluss_cluster):
    con = connect()
    con.execute("SET enable_external_access = false")
    with pytest.raises(duckdb.Error, match=r"network access, and enable_external_access is false"):
        con.execute("SELECT * FROM serving_build(?)", [f"fluss://{fluss_cluster['bootstrap']}/shop.orders_union"])


@pytest.mark.timeout(240)
def test_fluss_scan_and_from_fluss_read_the_current_state(fluss_cluster):
    bootstrap, warehouse = fluss_cluster["bootstrap"], fluss_cluster["warehouse"]
    name, buckets = "orders_scan", 2
    run(_create(bootstrap, name, ORDERS, ["order_id"], buckets, lake=True))
    stream = Stream(42)
    run(_write(bootstrap, name, stream.batch(new=300, corrected=0, deleted=0)))

    wait_tiered(bootstrap, name, buckets, "Fluss's tiering to commit every bucket to the lake")
    run(_write(bootstrap, name, stream.batch(new=40, corrected=70, deleted=25)))
    source = f"fluss://{bootstrap}/shop.{name}"
    con = connect()
    got = con.execute("SELECT * FROM fluss_scan(?, lake := ?) ORDER BY order_id", [source, warehouse]).fetchall()
    assert got == stream.fact()
    cols = con.execute(
        "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM fluss_scan(?))", [source]
    ).fetchall()
    assert cols == [("order_id", "BIGINT"), ("company", "VARCHAR"), ("order_day", "DATE"), ("revenue", "BIGINT")]
    # The same read named as a table (the warehouse from the cluster's configuration).
    got = con.execute(f"SELECT * FROM '{source}' ORDER BY order_id").fetchall()
    assert got == stream.fact()


def log_only_layer(bootstrap: str, name: str, seed: int, **batch: int) -> tuple:
    """A table without lake tiering (2 buckets) holding one batch of a seeded stream, and a layer built
    from it: (connection, source, stream)."""
    run(_create(bootstrap, name, ORDERS, ["order_id"], 2, lake=False))
    stream = Stream(seed)
    run(_write(bootstrap, name, stream.batch(**batch)))
    source = f"fluss://{bootstrap}/shop.{name}"
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source])
    return con, source, stream


@pytest.mark.timeout(180)
def test_a_fluss_follower_publishes_for_mart_only_replicas(fluss_cluster, tmp_path):
    """`serving_follow('fluss://...', publish := ...)`: the mart a Fluss follower keeps is written to a
    Paimon mart table after its applies; a mart-only replica of that table serves the oracle's rollup."""
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_publish"
    con, source, stream = log_only_layer(bootstrap, name, 43, new=150, corrected=0, deleted=0)
    mart = f"paimon:{tmp_path}/marts/db.db/mart_daily"
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms', publish := ?)", [source, mart])
    run(_write(bootstrap, name, stream.batch(new=20, corrected=40, deleted=15)))
    end, _ = run(_offsets(bootstrap, name, 2))
    wait_for(lambda: status_dict(con)["fluss_offset"] == sum(end.values()), 60, "the follower to apply the log")
    assert_serves(con, stream, "the publishing follower")

    def replica_serves():
        replica = connect()
        replica.execute("SELECT * FROM serving_build(?)", [mart])
        return replica if replica.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == stream.mart() else None

    replica = wait_for(replica_serves, 30, "the published mart table to hold the follower's mart", poll=0.5)
    assert status_dict(replica)["mode"] == "mart"
    # Freshness (issue 37 item 5): a Fluss fact has no snapshot; the mart commit carries when the
    # follower last applied the log (its last refresh), and the replica shows that.
    applied = status_dict(con)["refreshed_at"]
    applied_ms = (applied - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)
    snapshots = pathlib.Path(f"{tmp_path}/marts/db.db/mart_daily/snapshot")
    latest = max(int(p.name.split("-")[1]) for p in snapshots.glob("snapshot-*"))
    user = json.loads((snapshots / f"snapshot-{latest}").read_text())["commitUser"]
    assert user == f"streamhouse.serving_follow.fact_commit_ms={applied_ms}", (user, applied)
    fact = replica.execute("SELECT fact_snapshot, fact_commit_time FROM serving_status()").fetchone()
    assert fact == (None, applied.replace(microsecond=applied.microsecond // 1000 * 1000)), (fact, applied)
    for c in COMPANIES:
        want = sorted(((d, v) for cc, d, v in stream.mart() if cc == c), key=lambda dv: (-dv[1], dv[0]))
        assert replica.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == want, c
    con.execute("SELECT * FROM serving_unfollow()")


def test_a_fluss_layer_is_followed_not_refreshed(fluss_cluster):
    """serving_refresh of a Fluss table is refused naming serving_follow (it once went down the Paimon
    path: "storage scheme 'fluss://' is not supported"), and a local change set onto a layer served
    from a Fluss table is refused naming that table (it once called it a Paimon table); the layer is
    left as it was."""
    con, source, stream = log_only_layer(
        fluss_cluster["bootstrap"], "orders_not_refreshed", 44, new=100, corrected=20, deleted=10
    )
    con.execute("CREATE TABLE local_changes AS SELECT * FROM fct_orders LIMIT 3")
    with pytest.raises(duckdb.Error, match=r"is a Fluss table, which is followed, not refreshed: serving_follow\("):
        con.execute("SELECT * FROM serving_refresh(?)", [source])
    with pytest.raises(duckdb.Error, match=rf"served from the Fluss table '{re.escape(source)}'.*local change set"):
        con.execute("SELECT * FROM serving_refresh('local_changes')")
    assert_serves(con, stream, "after the refused refreshes")
    assert con.execute("SELECT refreshes FROM serving_status()").fetchone() == (0,)
