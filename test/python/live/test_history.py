"""Rewritten lake history (issue 37, item 1): a layer that holds a Paimon snapshot notices when that
snapshot is no longer the table's — rolled back (`rollback_to`, ids reused by the next commits),
the table dropped and created again at the same path, snapshots expired behind it — and rebuilds
from the latest snapshot, saying why in `serving_status`. Never `following` or `built` with a
layer of another history.

Oracles: plain-Python merges of the rows written (support/lake_util.py) and pypaimon's own read
of the mart table; never the extension itself."""

from __future__ import annotations

import os
import random
import shutil

import pytest
from conftest import connect
from support.lake_util import Warehouse, read_mart
from support.live_util import (
    assert_serves,
    create_orders,
    lake_source,
    merged_after,
    random_lake_commits,
    status_dict,
    wait_for,
)

ENGINE = "deduplicate"


def write(t, commits) -> None:
    for rows in commits:
        t.commit(rows)


def fresh_ids(commits: list, offset: int) -> list:
    """The same commits with order ids moved past `offset` (new orders after a rollback)."""
    return [[{**r, "order_id": r["order_id"] + offset} for r in rows] for rows in commits]


def publisher_and_replica(wh, fact, first: list):
    """A layer built from the fact after its first commit, its mart published to `<wh>/db.db/mart`,
    and a replica built from that mart table: (writer, replica, the mart table's source)."""
    writer = connect()
    mart_src = "paimon:" + wh.path("mart")
    fact.commit(first)
    writer.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "orders")])
    writer.execute("SELECT * FROM serving_publish(?)", [mart_src])
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [mart_src])
    return writer, replica, mart_src


def publish_each(wh, fact, writer, commits: list, mart_src: str) -> None:
    """Each commit written to the fact, refreshed into the writer's layer and published."""
    for rows in commits:
        fact.commit(rows)
        writer.execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, "orders")])
        writer.execute("SELECT * FROM serving_publish(?)", [mart_src])


@pytest.mark.timeout(90)
def test_follower_heals_a_rollback_that_reuses_snapshot_ids(tmp_path):
    rng = random.Random(37)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(rng, ENGINE, 2, first=100)
    first = commits[:1]
    write(t, first)
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src])
    write(t, commits[1:])
    wait_for(lambda: status_dict(con)["lake_snapshot"] == 3, 30, "the follower to apply snapshot 3")
    assert_serves(con, merged_after(ENGINE, commits), "before the rollback")
    # The operator backs out snapshots 2 and 3; the next two commits take ids 2 and 3 again.
    t.table.rollback_to(1)
    again = fresh_ids(random_lake_commits(random.Random(38), ENGINE, 1, first=30), 500_000)
    write(t, again)
    want = merged_after(ENGINE, first + again)

    def healed():
        s = status_dict(con)
        return s if s["lake_snapshot"] == 3 and s["rebuilt_because"] and s["state"] == "following" else None

    s = wait_for(healed, 30, "the follower to rebuild from the rewritten history")
    assert "snapshot" in s["rebuilt_because"] and ("rolled back" in s["rebuilt_because"]), s
    assert s["history"] is None and s["lag_snapshots"] == 0, s
    assert_serves(con, want, "after the rollback")
    con.execute("SELECT * FROM serving_unfollow()")


def test_refresh_heals_a_table_recreated_at_the_same_path(tmp_path):
    rng = random.Random(7)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    old = random_lake_commits(rng, ENGINE, 2, first=100)
    write(t, old)
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    assert status_dict(con)["data_as_of"] is not None
    # Dropped and created again: snapshot ids start over at 1.
    shutil.rmtree(wh.path("orders"))
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    new = fresh_ids(random_lake_commits(random.Random(8), ENGINE, 0, first=50), 900_000)
    write(t, new)
    s = status_dict(con)
    assert s["state"] == "rewritten" and "snapshot 3" in s["history"], s
    row = con.execute("SELECT fct_rows, lake_snapshot, rebuilt_because FROM serving_refresh(?)", [src]).fetchone()
    assert row[1] == 1 and "snapshot 3" in row[2], row
    assert_serves(con, merged_after(ENGINE, new), "after the recreate")
    s = status_dict(con)
    assert s["state"] == "built" and s["history"] is None and s["rebuilt_because"] == row[2], s


def test_refresh_heals_expired_snapshots(tmp_path):
    """Paimon's expiry removes old snapshot files (data files still referenced stay): emulated by
    removing snapshot-1..3 and moving the EARLIEST hint, as `expire_snapshots` leaves them."""
    rng = random.Random(9)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(rng, ENGINE, 4, first=100)
    write(t, commits[:2])
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    write(t, commits[2:])
    snap = os.path.join(wh.path("orders"), "snapshot")
    for i in (1, 2, 3):
        os.remove(os.path.join(snap, f"snapshot-{i}"))
    with open(os.path.join(snap, "EARLIEST"), "w") as f:
        f.write("4")
    s = status_dict(con)
    assert s["state"] == "rewritten" and "no longer exists" in s["history"] and "4..5" in s["history"], s
    row = con.execute("SELECT lake_snapshot, rebuilt_because FROM serving_refresh(?)", [src]).fetchone()
    assert row[0] == 5 and "expired" in row[1], row
    assert_serves(con, merged_after(ENGINE, commits), "after the expiry")


@pytest.mark.timeout(90)
def test_replica_follower_heals_a_rolled_back_mart_table(tmp_path):
    """A mart table published three times, a replica following it, the mart table rolled back to
    its first snapshot: the replica serves what pypaimon reads from the table now."""
    rng = random.Random(11)
    wh = Warehouse(tmp_path / "wh")
    fact = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(rng, ENGINE, 2, first=100)
    writer, replica, mart_src = publisher_and_replica(wh, fact, commits[0])
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [mart_src])
    publish_each(wh, fact, writer, commits[1:], mart_src)
    wait_for(lambda: status_dict(replica)["lake_snapshot"] == 3, 30, "the replica to apply the third publish")
    mart_table = wh.catalog.get_table("db.mart")
    mart_table.rollback_to(1)
    want = read_mart(wh.catalog, "mart")

    def healed():
        s = status_dict(replica)
        return s if s["lake_snapshot"] == 1 and s["rebuilt_because"] else None

    s = wait_for(healed, 30, "the replica to rebuild from the rolled-back mart table")
    assert s["state"] == "following" and "snapshot 3" in s["rebuilt_because"], s
    got = replica.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
    assert got == sorted((c, d, v) for (c, d), (v, _) in want.items())
    replica.execute("SELECT * FROM serving_unfollow()")


def test_local_change_set_on_a_lake_layer_is_refused(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(random.Random(3), ENGINE, 0, first=20)
    write(t, commits)
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    con.execute(
        "CREATE TABLE changes AS SELECT 1::BIGINT AS order_id, NULL::VARCHAR AS company, NULL::DATE AS order_day, "
        "NULL::BIGINT AS revenue, true AS deleted"
    )
    with pytest.raises(Exception, match=r"served from the Paimon table '.*orders'.*retract in the lake") as e:
        con.execute("SELECT * FROM serving_refresh('changes')")
    assert "serving_refresh" in str(e.value)
    assert_serves(con, merged_after(ENGINE, commits), "after the refusal")


def expire(table_dir: str, ids, earliest: int) -> None:
    """Paimon's expiry as `expire_snapshots` leaves a table: the snapshot files gone, EARLIEST moved."""
    snap = os.path.join(table_dir, "snapshot")
    for i in ids:
        os.remove(os.path.join(snap, f"snapshot-{i}"))
    with open(os.path.join(snap, "EARLIEST"), "w") as f:
        f.write(str(earliest))


def healed_at(con, snapshot: int):
    def look():
        s = status_dict(con)
        return s if s["lake_snapshot"] == snapshot and s["rebuilt_because"] and s["state"] == "following" else None

    return look


@pytest.mark.timeout(90)
def test_follower_heals_a_table_recreated_at_the_same_path(tmp_path):
    """Issue 51: recreate, tested on serving_refresh only, now under a follower too."""
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    write(t, random_lake_commits(random.Random(71), ENGINE, 2, first=100))
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src])
    shutil.rmtree(wh.path("orders"))
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    new = fresh_ids(random_lake_commits(random.Random(72), ENGINE, 1, first=50), 900_000)
    write(t, new)
    s = wait_for(healed_at(con, 2), 30, "the follower to rebuild from the recreated table")
    assert "snapshot 3" in s["rebuilt_because"] and s["history"] is None, s
    assert_serves(con, merged_after(ENGINE, new), "followed after the recreate")
    con.execute("SELECT * FROM serving_unfollow()")


@pytest.mark.timeout(90)
def test_follower_heals_expired_snapshots(tmp_path):
    """Issue 51: expiry, tested on serving_refresh only, now under a follower: the snapshot the layer
    holds expired before the follower's first look."""
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(random.Random(73), ENGINE, 4, first=100)
    write(t, commits[:2])
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    write(t, commits[2:])
    expire(wh.path("orders"), (1, 2, 3), 4)
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src])
    s = wait_for(healed_at(con, 5), 30, "the follower to rebuild past the expired snapshots")
    assert "expired" in s["rebuilt_because"], s
    assert_serves(con, merged_after(ENGINE, commits), "followed after the expiry")
    con.execute("SELECT * FROM serving_unfollow()")


@pytest.mark.timeout(90)
def test_replica_follower_heals_expired_mart_snapshots(tmp_path):
    """Issue 51: expiry on a replica: the mart snapshot the replica holds expired before its follower's
    first look; it serves what pypaimon reads from the mart table now."""
    wh = Warehouse(tmp_path / "wh")
    fact = create_orders(wh, "orders", ENGINE)
    commits = random_lake_commits(random.Random(74), ENGINE, 3, first=100)
    writer, replica, mart_src = publisher_and_replica(wh, fact, commits[0])
    publish_each(wh, fact, writer, commits[1:], mart_src)
    expire(wh.path("mart"), (1, 2, 3), 4)
    want = read_mart(wh.catalog, "mart")
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [mart_src])
    s = wait_for(healed_at(replica, 4), 30, "the replica to rebuild past the expired mart snapshots")
    assert "expired" in s["rebuilt_because"], s
    got = replica.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
    assert got == sorted((c, d, v) for (c, d), (v, _) in want.items())
    replica.execute("SELECT * FROM serving_unfollow()")
