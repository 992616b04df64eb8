"""Publishing the mart as a Paimon mart table (issue 19, items 1 and 5): `serving_publish(target)`
writes the layer's mart through paimon-rust's writer, creating the table on the first publish;
each publish is one commit carrying only the groups that changed (new and moved groups upserted,
emptied groups deleted); afterwards the table holds exactly the layer's mart, even over what
another publisher left there; `serving_follow(..., publish := ...)` publishes after every apply;
a replica built from the published table serves the same dashboards.

Oracles: the fact's merged rows in plain Python (support/live_util), their mart and the diff
between two marts computed here in Python; the published table read back by pypaimon (Apache
Paimon's own Python reader, not the extension) and its snapshot files read as JSON."""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import connect
from support.lake_util import Warehouse, read_mart
from support.live_util import (
    COMPANIES,
    create_orders,
    day,
    lake_source,
    merged_after,
    oracle_mart,
    random_lake_commits,
    served_mart,
    status_dict,
    wait_for,
)


def oracle_changes(old: dict, new: dict) -> tuple[int, int]:
    """(groups to upsert, groups to delete) that turn mart `old` into `new`."""
    upserts = sum(1 for k, v in new.items() if old.get(k) != v)
    return upserts, sum(1 for k in old if k not in new)


def published(wh: Warehouse, name: str) -> dict:
    """The mart table as pypaimon reads it."""
    return read_mart(wh.catalog, name)


def snapshot_file(wh: Warehouse, name: str, snapshot: int) -> dict:
    return json.loads((Path(wh.path(name)) / "snapshot" / f"snapshot-{snapshot}").read_text())


def latest_snapshot(wh: Warehouse, name: str) -> int:
    """The highest snapshot file's id (what the table holds, whatever its LATEST hint says)."""
    return max(int(p.name.split("-")[1]) for p in (Path(wh.path(name)) / "snapshot").glob("snapshot-*"))


def publish(con, target: str) -> dict:
    cur = con.execute("SELECT * FROM serving_publish(?)", [target])
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row, strict=True))


@pytest.fixture
def fact(tmp_path):
    """A deduplicate fact with row-kind deletes: 8 seeded commits; the layer is built after 5."""
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "fct_orders", "deduplicate")
    commits = random_lake_commits(random.Random(1919), "deduplicate", 7, first=1_500)
    for c in commits[:5]:
        table.commit(c)
    return wh, table, commits


def test_first_publish_creates_the_mart_table_and_a_replica_serves_it(fact):
    wh, _table, commits = fact
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "fct_orders")]).fetchall()
    want = oracle_mart(merged_after("deduplicate", commits[:5]))
    target = lake_source(wh, "mart_pub")
    got = publish(con, target)
    assert (got["target"], got["snapshot"], got["upserted"], got["deleted"]) == (target, 1, len(want), 0)
    assert published(wh, "mart_pub") == want
    t = wh.catalog.get_table("db.mart_pub")
    assert t.primary_keys == ["company", "order_day"]
    assert [(f.name, str(f.type)) for f in t.fields] == [
        ("company", "STRING NOT NULL"),
        ("order_day", "DATE NOT NULL"),
        ("revenue", "DECIMAL(38, 0)"),
        ("orders", "BIGINT"),
    ]
    options = json.loads((Path(wh.path("mart_pub")) / "schema" / "schema-0").read_text())["options"]
    assert options.get("merge-engine") == "deduplicate"
    s = status_dict(con)
    assert (s["published_to"], s["published_snapshot"]) == (target, 1)
    # Nothing changed: no commit, the same snapshot.
    again = publish(con, target)
    assert (again["snapshot"], again["upserted"], again["deleted"]) == (1, 0, 0)
    assert not (Path(wh.path("mart_pub")) / "snapshot" / "snapshot-2").exists()
    replica = connect()
    r = replica.execute("SELECT fct_rows, mart_rows, lake_snapshot FROM serving_build(?)", [target]).fetchone()
    assert r == (sum(n for _, n in want.values()), len(want), 1)
    for c in COMPANIES:
        q = "SELECT * FROM serving_dashboard(?, top := 1000)"
        assert replica.execute(q, [c]).fetchall() == con.execute(q, [c]).fetchall(), c


def test_each_publish_commits_only_the_changed_groups(fact):
    wh, table, commits = fact
    source = lake_source(wh, "fct_orders")
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    target = lake_source(wh, "mart_pub")
    publish(con, target)
    before = oracle_mart(merged_after("deduplicate", commits[:5]))
    # Empty one group for sure: delete every order of the (company, day) with the fewest orders.
    merged = merged_after("deduplicate", commits)
    per_group = defaultdict(list)
    for r in merged:
        per_group[(r["company"], r["order_day"])].append(r)
    smallest = min((k for k in per_group if k in before), key=lambda k: (len(per_group[k]), k))
    emptied = [{**r, "op": "-D"} for r in per_group[smallest]]
    for c in [*commits[5:], emptied]:
        table.commit(c)
    after = oracle_mart(merged_after("deduplicate", [*commits, emptied]))
    assert smallest in before and smallest not in after
    con.execute("SELECT * FROM serving_refresh(?)", [source]).fetchall()
    assert served_mart(con) == after
    got = publish(con, target)
    upserts, deletes = oracle_changes(before, after)
    assert deletes >= 1 and upserts >= 1
    assert (got["snapshot"], got["upserted"], got["deleted"]) == (2, upserts, deletes)
    assert upserts + deletes < len(after), "some groups must be unchanged for this to mean anything"
    # The commit carries exactly the changed groups (Paimon's own count of the rows it holds).
    assert snapshot_file(wh, "mart_pub", 2)["deltaRecordCount"] == upserts + deletes
    assert published(wh, "mart_pub") == after


def test_a_first_publish_replaces_what_another_publisher_left(fact, tmp_path):
    wh, _table, commits = fact
    target = lake_source(wh, "mart_pub")
    other = connect()
    other.execute(
        "CREATE TABLE src AS SELECT i AS order_id, 'other' || (i % 3) AS company, "
        "DATE '2020-01-01' + (i % 5)::INT AS order_day, i::BIGINT AS revenue FROM range(40) t(i)"
    )
    other.execute("SELECT * FROM serving_build('src')").fetchall()
    publish(other, target)
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "fct_orders")]).fetchall()
    want = oracle_mart(merged_after("deduplicate", commits[:5]))
    got = publish(con, target)
    assert (got["upserted"], got["deleted"]) == (len(want), 15)
    assert published(wh, "mart_pub") == want
    # The other layer publishes again: it read the table back (it moved), so it restores its own.
    back = publish(other, target)
    assert (back["upserted"], back["deleted"]) == (15, len(want))
    # The other layer's mart, from its 40 source rows in plain Python (3 companies x 5 days).
    others = [
        {"company": f"other{i % 3}", "order_day": datetime.date(2020, 1, 1 + i % 5), "revenue": i} for i in range(40)
    ]
    assert published(wh, "mart_pub") == oracle_mart(others)


def test_follow_publishes_after_every_apply_and_replicas_follow_the_mart(fact):
    wh, table, commits = fact
    source, target = lake_source(wh, "fct_orders"), lake_source(wh, "mart_pub")
    primary = connect()
    primary.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    row = primary.execute(
        "SELECT * FROM serving_follow(?, every := INTERVAL '50 ms', publish := ?)", [source, target]
    ).fetchone()
    assert row[-1] == target
    want = oracle_mart(merged_after("deduplicate", commits[:5]))
    wait_for(lambda: (Path(wh.path("mart_pub")) / "snapshot").is_dir(), 30, "the first publish")
    wait_for(lambda: published(wh, "mart_pub") == want, 30, "the first publish's content")
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [target]).fetchall()
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [target]).fetchall()
    try:
        for k in range(5, len(commits)):
            table.commit(commits[k])
            want = oracle_mart(merged_after("deduplicate", commits[: k + 1]))
            wait_for(lambda w=want: published(wh, "mart_pub") == w, 30, f"commit {k} published")
            wait_for(lambda w=want: served_mart(replica) == w, 30, f"commit {k} on the replica")
        # The replica applied the publishes' changed groups, not whole snapshots: rows were
        # deleted and inserted in place (a whole-snapshot apply recreates the table: rowids 0..n-1).
        rowids, n = replica.execute("SELECT max(rowid), count(*) FROM mart_daily").fetchone()
        assert rowids >= n, "the replica reloaded the whole mart instead of applying the changed groups"
        assert status_dict(replica)["last_error"] is None
        s = status_dict(primary)
        assert s["published_to"] == target and s["last_error"] is None, s
        assert s["published_snapshot"] == max(
            int(p.name.split("-")[1]) for p in (Path(wh.path("mart_pub")) / "snapshot").glob("snapshot-*")
        )
    finally:
        replica.execute("SELECT * FROM serving_unfollow()").fetchall()
        primary.execute("SELECT * FROM serving_unfollow()").fetchall()


# --- bad targets: refused by name, nothing changes on either side ------------------------------


def built(con, wh) -> dict:
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "fct_orders")]).fetchall()
    return served_mart(con)


def tree(path: Path) -> list:
    return sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*")) if path.exists() else []


@pytest.mark.parametrize(
    "case",
    ["its own fact table", "a fact table", "another shape", "aggregation engine", "not empty", "a file"],
)
def test_a_target_that_is_not_a_mart_table_is_refused_and_untouched(fact, case):
    wh, _table, _commits = fact
    con = connect()
    mart = built(con, wh)
    if case == "its own fact table":
        name, problem = "fct_orders", "is the table the serving layer is built from"
    elif case == "a fact table":
        name, problem = "other_fact", "holds a table keyed by (order_id), not a mart table"
        create_orders(wh, name, "deduplicate")
    elif case == "another shape":
        name, problem = (
            "bigint_mart",
            "holds a table of another shape (columns company STRING, order_day DATE, revenue BIGINT, orders BIGINT)",
        )
        schema = pa.schema(
            [
                pa.field("company", pa.string(), nullable=False),
                pa.field("order_day", pa.date32(), nullable=False),
                ("revenue", pa.int64()),
                ("orders", pa.int64()),
            ]
        )
        wh.create(name, schema, ["company", "order_day"], {"bucket": "1"}).commit(
            [{"company": "a", "order_day": day(1), "revenue": 1, "orders": 1}]
        )
    elif case == "aggregation engine":
        name, problem = "agg_mart", "holds a table with the 'aggregation' merge engine"
        schema = pa.schema(
            [
                pa.field("company", pa.string(), nullable=False),
                pa.field("order_day", pa.date32(), nullable=False),
                ("revenue", pa.decimal128(38, 0)),
                ("orders", pa.int64()),
            ]
        )
        wh.create(name, schema, ["company", "order_day"], {"bucket": "1", "merge-engine": "aggregation"})
    elif case == "not empty":
        name, problem = "junk", "the directory is not empty and is not a Paimon table"
        Path(wh.path(name)).mkdir(parents=True)
        (Path(wh.path(name)) / "notes.txt").write_text("mine")
    else:
        name, problem = "a_file", "there is a file at that path, not a directory"
        Path(wh.path(name)).write_text("mine")
    before = tree(Path(wh.path(name)))
    target = lake_source(wh, name)
    with pytest.raises(Exception) as e:
        publish(con, target)
    msg = str(e.value)
    assert "serving_publish: " in msg and problem in msg, msg
    assert wh.path(name) in msg, msg
    assert tree(Path(wh.path(name))) == before, "the target changed"
    assert served_mart(con) == mart
    assert status_dict(con)["published_to"] is None


def test_a_target_outside_the_sandbox_is_refused_and_nothing_created(fact, tmp_path):
    wh, _table, _commits = fact
    con = connect()
    mart = built(con, wh)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    con.execute(f"SET allowed_directories = ['{wh.root}', '{allowed}']")
    con.execute("SET enable_external_access = false")
    outside = tmp_path / "outside" / "mart"
    with pytest.raises(Exception) as e:
        publish(con, f"paimon:{outside}")
    msg = str(e.value)
    assert "Permission Error" in msg and "enable_external_access = false" in msg and str(outside) in msg, msg
    assert not (tmp_path / "outside").exists()
    # Inside an allowed directory the same call works.
    got = publish(con, f"paimon:{allowed / 'mart'}")
    assert got["upserted"] == len(mart) and (allowed / "mart" / "snapshot" / "snapshot-1").is_file()


def test_a_read_only_location_fails_clearly(fact):
    wh, _table, _commits = fact
    con = connect()
    mart = built(con, wh)
    # /proc refuses every new entry, even to root (a chmod cannot make a root-run test read-only).
    target = "paimon:/proc/streamhouse-mart"
    with pytest.raises(Exception) as e:
        publish(con, target)
    msg = str(e.value)
    assert msg.startswith(
        "Invalid Input Error: serving_publish: Paimon table '/proc/streamhouse-mart': cannot create the table "
        "directory: No such file or directory"
    ), msg
    assert not os.path.exists("/proc/streamhouse-mart")
    assert served_mart(con) == mart and status_dict(con)["published_to"] is None


@pytest.mark.parametrize("case", ["the fact table itself", "a fact table", "an uncreatable path", "empty"])
def test_follow_checks_its_publish_target_at_the_call_and_keeps_the_running_follower(fact, case):
    """serving_follow(..., publish := ...) makes its first publish before it returns, so a target
    serving_publish refuses is refused by the call with serving_publish's words (named
    serving_follow), and the follower already running — its source, interval and publish target
    — is kept and goes on publishing."""
    wh, table, commits = fact
    source, target = lake_source(wh, "fct_orders"), lake_source(wh, "mart_pub")
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms', publish := ?)", [source, target])
    try:
        # Made before the call returned: no waiting.
        assert published(wh, "mart_pub") == oracle_mart(merged_after("deduplicate", commits[:5]))
        if case == "the fact table itself":
            bad, problem = source, f"'{source}' is the table the serving layer is built from"
        elif case == "a fact table":
            create_orders(wh, "other_fact", "deduplicate")
            bad, problem = lake_source(wh, "other_fact"), "holds a table keyed by (order_id), not a mart table"
        elif case == "an uncreatable path":
            bad, problem = "paimon:/proc/streamhouse-mart", "cannot create the table directory"
        else:
            bad, problem = "paimon:", "names no table"
        with pytest.raises(Exception) as e:
            con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '70 ms', publish := ?)", [source, bad])
        msg = str(e.value)
        assert msg.startswith("Invalid Input Error: serving_follow: ") and problem in msg, msg
        s = status_dict(con)
        assert (s["following"], s["follow_every_ms"], s["published_to"], s["state"]) == (
            source,
            50,
            target,
            "following",
        ), s
        table.commit(commits[5])
        want = oracle_mart(merged_after("deduplicate", commits[:6]))
        wait_for(lambda: published(wh, "mart_pub") == want, 30, "the kept follower to publish")
    finally:
        con.execute("SELECT * FROM serving_unfollow()").fetchall()


@pytest.mark.parametrize("target", ["", "paimon:", "  paimon:  "])
def test_an_empty_target_is_refused(target):
    con = connect()
    with pytest.raises(Exception) as e:
        publish(con, target)
    assert "names no table: give paimon:<table directory> or s3://" in str(e.value), str(e.value)


def test_publish_before_a_build_says_run_serving_build(tmp_path):
    con = connect()
    with pytest.raises(Exception) as e:
        publish(con, f"paimon:{tmp_path / 'mart'}")
    assert "serving_publish" in str(e.value) and "serving_build" in str(e.value), str(e.value)
    assert not (tmp_path / "mart").exists()


def test_a_replica_republishes_its_mart(fact, tmp_path):
    """A mart-only replica publishes too (a fan-out tier): the copy equals the original."""
    wh, _table, commits = fact
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "fct_orders")]).fetchall()
    publish(con, lake_source(wh, "mart_pub"))
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_pub")]).fetchall()
    got = publish(replica, lake_source(wh, "mart_copy"))
    want = oracle_mart(merged_after("deduplicate", commits[:5]))
    assert got["upserted"] == len(want) and published(wh, "mart_copy") == want


def test_the_publish_after_32_incremental_commits_rewrites_the_whole_mart(tmp_path):
    """paimon-rust's writer does not compact, so after 32 incremental commits a publish rewrites
    the whole mart as one OVERWRITE commit (README, Scaling out), then counts again; a table read
    back (another connection's first publish there) is due for that rewrite at its first change.
    Oracles: the snapshot files as Paimon wrote them, and pypaimon's read against the mart of the
    source rows computed here."""
    wh = Warehouse(tmp_path / "wh")
    target = lake_source(wh, "mart_rw")
    rows = [{"order_id": i, "company": f"c{i % 4}", "order_day": datetime.date(2026, 1, 1 + i % 5), "revenue": i}
            for i in range(48)]  # fmt: skip
    groups = len(oracle_mart(rows))  # 4 companies x 5 days
    con = connect()
    con.execute("CREATE TABLE src (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", [tuple(r.values()) for r in rows])
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    con.execute("CREATE TABLE changes (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")

    def change_one_group(k: int) -> None:
        rows[k]["revenue"] += 1000  # one order of one group
        con.execute("DELETE FROM changes")
        con.execute("INSERT INTO changes VALUES (?, ?, ?, ?)", list(rows[k].values()))
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()

    kinds = []
    for k in range(34):  # the first publish creates the table; then one changed group each time
        if k:
            change_one_group(k)
        got = publish(con, target)
        snap = snapshot_file(wh, "mart_rw", got["snapshot"])
        kinds.append(snap["commitKind"])
        assert got["snapshot"] == k + 1 and got["upserted"] == (groups if k == 0 else 1), (k, got)
        if snap["commitKind"] == "OVERWRITE":  # the table is the whole mart again, one row a group
            assert snap["totalRecordCount"] == groups, snap
    assert kinds == ["APPEND"] * 32 + ["OVERWRITE", "APPEND"], kinds
    assert published(wh, "mart_rw") == oracle_mart(rows)

    other = connect()  # another layer of the same rows publishes there: it reads the table back
    other.execute("CREATE TABLE src (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    other.executemany("INSERT INTO src VALUES (?, ?, ?, ?)", [tuple(r.values()) for r in rows])
    other.execute("SELECT * FROM serving_build('src')").fetchall()
    # No group differs, but `other` read the rows later than `con` last did: an empty commit says
    # the table is the mart of that later read (test_freshness.py), nothing else changes.
    assert publish(other, target)["upserted"] == 0
    assert latest_snapshot(wh, "mart_rw") == 35
    said = snapshot_file(wh, "mart_rw", 35)
    assert (said["commitKind"], said["deltaRecordCount"], said["totalRecordCount"]) == ("APPEND", 0, 1 + groups)
    change_one_group(40)  # `con` moves one group; `other` publishes its own (older) mart back
    got = publish(con, target)  # the table moved under `con` (other's commit): read back, rewritten
    assert (got["snapshot"], snapshot_file(wh, "mart_rw", 36)["commitKind"]) == (36, "OVERWRITE")
    rows[40]["revenue"] -= 1000
    back = publish(other, target)  # the table moved under `other`: read back, due for a rewrite
    assert back["upserted"] == 1 and snapshot_file(wh, "mart_rw", back["snapshot"])["commitKind"] == "OVERWRITE"
    assert published(wh, "mart_rw") == oracle_mart(rows)


def test_a_failed_publish_while_following_is_a_failed_tick_never_an_undone_apply(fact):
    """serving_follow(..., publish := ...) whose target turns into a table of another key: the
    apply still happens (the layer equals the merged fact), the publish is refused — last_error
    names the target, the state is 'failing' — and once the target is free again the next tick
    publishes the mart (pypaimon's read equals the oracle) and the state is back to 'following'."""
    wh, table, commits = fact
    source, target = lake_source(wh, "fct_orders"), lake_source(wh, "mart_pub")
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms', publish := ?)", [source, target]).fetchall()
    try:
        want = oracle_mart(merged_after("deduplicate", commits[:5]))
        wait_for(lambda: (Path(wh.path("mart_pub")) / "snapshot").is_dir(), 30, "the first publish")
        wait_for(lambda: published(wh, "mart_pub") == want, 30, "the first publish's content")
        shutil.rmtree(wh.path("mart_pub"))
        other_key = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
        wh.create("mart_pub", other_key, ["id"], {"bucket": "1"})
        table.commit(commits[5])
        s = wait_for(lambda: (st := status_dict(con))["last_error"] and st, 30, "the refused publish")
        assert s["state"] == "failing" and wh.path("mart_pub") in s["last_error"], s
        assert s["lake_snapshot"] == 6, s  # the apply happened
        assert served_mart(con) == oracle_mart(merged_after("deduplicate", commits[:6]))
        shutil.rmtree(wh.path("mart_pub"))  # the target is free again: created on the next tick
        want = oracle_mart(merged_after("deduplicate", commits[:6]))
        wait_for(lambda: status_dict(con)["state"] == "following", 60, "the follower to publish again")
        assert published(wh, "mart_pub") == want
    finally:
        con.execute("SELECT * FROM serving_unfollow()").fetchall()
