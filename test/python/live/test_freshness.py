"""End-to-end freshness (issue 37, item 5): every publisher says, in the mart commit itself,
which fact state the mart is the mart of — the commit user
`streamhouse.<publisher>.fact_snapshot=<id>.fact_commit_ms=<ms>` (paimon-rust 0.4.0 cannot write
snapshot properties; docs/scaling-out.md) — and a replica serving that mart shows it
(`serving_status().fact_snapshot`, `fact_commit_time`), measures its `lag_ms` from that fact
commit time, and `serving_reconcile(fact := ...)` reads the fact as of that snapshot: a lagging
but correct replica reports no difference, a wrong one its differences.

Oracles: the fact's snapshots (ids, commit times) and the mart tables' snapshot files read by
pypaimon and as JSON; the marts of the rows written, in plain Python (support/lake_util)."""

from __future__ import annotations

import datetime
import json
import random
import time
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import connect
from support.lake_util import Warehouse, read_mart
from support.live_util import (
    create_orders,
    lake_source,
    merged_after,
    oracle_mart,
    random_lake_commits,
    served_mart,
    status_dict,
    wait_for,
)

ENGINE = "deduplicate"
BATCH = 2**63 - 1  # Paimon's batch commit identifier (Long.MAX_VALUE)


def fact_commit_ms(wh: Warehouse, name: str, snapshot: int) -> int:
    """The commit time pypaimon reads for snapshot `snapshot` of `db.<name>`."""
    return wh.catalog.get_table(f"db.{name}").snapshot_manager().get_snapshot_by_id(snapshot).time_millis


def mart_snapshot(wh: Warehouse, name: str, snapshot: int | None = None) -> dict:
    """A mart table's snapshot file as JSON (the latest when `snapshot` is None)."""
    d = Path(wh.path(name)) / "snapshot"
    # (a writer's temporary file, snapshot-N.tmp..., is not a snapshot yet)
    snapshot = snapshot or max(int(n) for p in d.glob("snapshot-*") if (n := p.name.split("-")[1]).isdigit())
    return json.loads((d / f"snapshot-{snapshot}").read_text())


def mark(publisher: str, snapshot: int | None, ms: int | None) -> str:
    parts = ["streamhouse", publisher]
    if snapshot is not None:
        parts.append(f"fact_snapshot={snapshot}")
    if ms is not None:
        parts.append(f"fact_commit_ms={ms}")
    return ".".join(parts)


def as_ms(t: datetime.datetime) -> int:
    return (t - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)


def published_and_replicated(wh: Warehouse):
    """A primary built from the fact and published to `mart_pub`, and a replica of that table."""
    source, target = lake_source(wh, "fct_orders"), lake_source(wh, "mart_pub")
    primary = connect()
    primary.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    primary.execute("SELECT * FROM serving_publish(?)", [target]).fetchall()
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [target]).fetchall()
    return source, target, primary, replica


@pytest.fixture
def lake(tmp_path):
    """A deduplicate fact: 12 seeded commits, the first 5 written (snapshots 1..5)."""
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "fct_orders", ENGINE)
    commits = random_lake_commits(random.Random(3705), ENGINE, 11, first=800)
    for c in commits[:5]:
        table.commit(c)
    return wh, table, commits


def test_publishers_carry_the_fact_snapshot_in_every_mart_commit(lake):
    """serving_publish and a following publisher: each mart commit's commit user names the
    fact snapshot applied and its commit time; a fact commit that moves no group still gets a
    commit (an empty APPEND) saying the mart is of that newer snapshot."""
    wh, table, commits = lake
    source, target = lake_source(wh, "fct_orders"), lake_source(wh, "mart_pub")
    primary = connect()
    primary.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    assert primary.execute("SELECT snapshot FROM serving_publish(?)", [target]).fetchone() == (1,)
    snap = mart_snapshot(wh, "mart_pub", 1)
    assert snap["commitUser"] == mark("serving_publish", 5, fact_commit_ms(wh, "fct_orders", 5)), snap
    assert snap["commitIdentifier"] == BATCH
    s = status_dict(primary)  # a fact layer shows its own fact state: the lake snapshot it serves
    assert (s["fact_snapshot"], as_ms(s["fact_commit_time"])) == (5, fact_commit_ms(wh, "fct_orders", 5)), s

    primary.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms', publish := ?)", [source, target])
    try:
        for k in (5, 6):
            table.commit(commits[k])
            want = mark("serving_follow", k + 1, fact_commit_ms(wh, "fct_orders", k + 1))
            wait_for(lambda w=want: mart_snapshot(wh, "mart_pub")["commitUser"] == w, 30, f"fact {k + 1} published")
            assert read_mart(wh.catalog, "mart_pub") == oracle_mart(merged_after(ENGINE, commits[: k + 1]))
        before = mart_snapshot(wh, "mart_pub")
        # An order written again exactly as it is: fact snapshot 8 moves no group.
        merged = merged_after(ENGINE, commits[:7])
        table.commit([{**merged[0], "op": "+U"}])
        want = mark("serving_follow", 8, fact_commit_ms(wh, "fct_orders", 8))
        wait_for(lambda: mart_snapshot(wh, "mart_pub")["commitUser"] == want, 30, "the no-change fact commit said")
        after = mart_snapshot(wh, "mart_pub")
        assert after["id"] == before["id"] + 1 and after["commitKind"] == "APPEND", after
        assert after["deltaRecordCount"] == 0 and after["totalRecordCount"] == before["totalRecordCount"], after
        assert read_mart(wh.catalog, "mart_pub") == oracle_mart(merged)
    finally:
        primary.execute("SELECT * FROM serving_unfollow()").fetchall()
    # Nothing new: a publish says nothing again (no commit).
    again = primary.execute("SELECT snapshot, upserted, deleted FROM serving_publish(?)", [target]).fetchone()
    assert again == (after["id"], 0, 0)
    assert mart_snapshot(wh, "mart_pub")["id"] == after["id"]


@pytest.mark.timeout(120)
def test_a_lagging_replica_reports_its_fact_lag_and_reconciles_clean(lake):
    """The issue's replica: its mart 6 fact snapshots behind (the publisher stopped). Its status
    names the fact snapshot and commit time its mart reflects and lag_ms counts from that time
    (not 0); serving_reconcile(fact := ...) reads the fact at that snapshot: no difference,
    although the fact's latest mart differs (the old behaviour reported that lag as
    differences)."""
    wh, table, commits = lake
    source, target, _primary, replica = published_and_replicated(wh)
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [target]).fetchall()
    try:
        at5 = fact_commit_ms(wh, "fct_orders", 5)
        s = status_dict(replica)
        assert (s["mode"], s["fact_snapshot"], as_ms(s["fact_commit_time"])) == ("mart", 5, at5), s
        for c in commits[5:11]:  # 6 fact snapshots the publisher never applies
            table.commit(c)
        time.sleep(0.3)  # several follower looks: the replica is caught up with its mart table
        looked = time.time()
        s = status_dict(replica)
        assert (s["state"], s["lag_snapshots"], s["fact_snapshot"]) == ("following", 0, 5), s
        assert s["lag_ms"] >= int(looked * 1000) - at5 > 0, s
        at5_mart = oracle_mart(merged_after(ENGINE, commits[:5]))
        latest_mart = oracle_mart(merged_after(ENGINE, commits[:11]))
        assert served_mart(replica) == at5_mart
        assert at5_mart != latest_mart, "the fact must have moved for the check to mean anything"
        assert replica.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall() == []
        assert status_dict(replica)["last_reconcile_clean"] is True
    finally:
        replica.execute("SELECT * FROM serving_unfollow()").fetchall()


def test_a_wrong_replica_still_reports_its_differences(lake):
    """A mart table written by another writer (pypaimon) with the documented mark of fact
    snapshot 5 but one wrong group: the replica reconciles against the fact at snapshot 5 and
    reports exactly that group, even after the fact moved on."""
    wh, table, commits = lake
    at5 = oracle_mart(merged_after(ENGINE, commits[:5]))
    (company, day), (revenue, orders) = sorted(at5.items())[0]
    wrong = {**at5, (company, day): (revenue + 7, orders)}
    schema = pa.schema(
        [
            pa.field("company", pa.string(), nullable=False),
            pa.field("order_day", pa.date32(), nullable=False),
            ("revenue", pa.decimal128(38, 0)),
            ("orders", pa.int64()),
        ]
    )
    mart_table = wh.create("mart_w", schema, ["company", "order_day"], {"bucket": "2"}).table
    write = mart_table.new_batch_write_builder()
    write.commit_user = mark("other_writer", 5, fact_commit_ms(wh, "fct_orders", 5))
    w, c = write.new_write(), write.new_commit()
    rows = [{"company": k[0], "order_day": k[1], "revenue": Decimal(v[0]), "orders": v[1]} for k, v in wrong.items()]
    w.write_arrow(pa.Table.from_pylist(rows, schema=schema))
    c.commit(w.prepare_commit())
    w.close()
    c.close()
    for rows in commits[5:8]:
        table.commit(rows)
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_w")]).fetchall()
    assert status_dict(replica)["fact_snapshot"] == 5
    got = replica.execute(
        "SELECT side, company, order_day, revenue, orders FROM serving_reconcile(fact := ?) ORDER BY side",
        [lake_source(wh, "fct_orders")],
    ).fetchall()
    assert got == [("fact_only", company, day, revenue, orders), ("mart_only", company, day, revenue + 7, orders)]
    assert status_dict(replica)["last_reconcile_clean"] is False


@pytest.mark.timeout(120)
def test_after_a_fact_rollback_the_publisher_commits_the_lower_snapshot_and_the_replica_follows(lake):
    """The fact rolled back below the snapshot the mart reflects: the replica's reconcile says
    so (the fact's snapshot of that id is gone) instead of reporting differences; the publisher
    rebuilds from the rewritten history and its next commit — a lower fact id, a later commit
    time — is valid: the replica applies it and is clean again."""
    wh, table, commits = lake
    source, target, primary, replica = published_and_replicated(wh)
    table.table.rollback_to(2)
    kept = commits[:2]
    again = [[{**r, "order_id": r["order_id"] + 900_000} for r in rows] for rows in commits[5:6]]
    for rows in again:
        table.commit(rows)  # takes snapshot id 3
    with pytest.raises(Exception) as e:
        replica.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall()
    msg = str(e.value)
    assert "serving_reconcile: the replica's mart reflects snapshot 5 of its fact" in msg, msg
    assert "rolled back" in msg and "1..3" in msg, msg
    primary.execute("SELECT * FROM serving_refresh(?)", [source]).fetchall()
    assert status_dict(primary)["rebuilt_because"], "the publisher must have rebuilt"
    primary.execute("SELECT * FROM serving_publish(?)", [target]).fetchall()
    snap = mart_snapshot(wh, "mart_pub")
    assert snap["commitUser"] == mark("serving_publish", 3, fact_commit_ms(wh, "fct_orders", 3)), snap
    assert fact_commit_ms(wh, "fct_orders", 3) > mart_snapshot(wh, "mart_pub", 1)["timeMillis"]
    want = oracle_mart(merged_after(ENGINE, kept + again))
    assert read_mart(wh.catalog, "mart_pub") == want
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [target]).fetchall()
    try:
        wait_for(lambda: status_dict(replica)["fact_snapshot"] == 3, 30, "the replica to apply the new publish")
        assert served_mart(replica) == want
        assert replica.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall() == []
    finally:
        replica.execute("SELECT * FROM serving_unfollow()").fetchall()


def test_a_fact_without_snapshots_carries_when_the_layer_read_it(tmp_path):
    """A layer built from a DuckDB table has no fact snapshot: its publish carries the time the
    layer last read its source (its build, then its refreshes), and a replica shows that."""
    wh = Warehouse(tmp_path / "wh")
    target = lake_source(wh, "mart_t")
    con = connect()
    con.execute(
        "CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, DATE '2026-01-01' + (i % 4)::INT "
        "AS order_day, i::BIGINT AS revenue FROM range(30) t(i)"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    built_at = status_dict(con)["built_at"]
    con.execute("SELECT * FROM serving_publish(?)", [target]).fetchall()
    assert mart_snapshot(wh, "mart_t")["commitUser"] == mark("serving_publish", None, as_ms(built_at))
    con.execute("CREATE TABLE changes AS SELECT 1::BIGINT AS order_id, 'c9' AS company, DATE '2026-02-01' AS "
                "order_day, 5::BIGINT AS revenue")  # fmt: skip
    con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
    refreshed_at = status_dict(con)["refreshed_at"]
    con.execute("SELECT * FROM serving_publish(?)", [target]).fetchall()
    assert mart_snapshot(wh, "mart_t")["commitUser"] == mark("serving_publish", None, as_ms(refreshed_at))
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [target]).fetchall()
    s = status_dict(replica)
    assert s["fact_snapshot"] is None and as_ms(s["fact_commit_time"]) == as_ms(refreshed_at), s
