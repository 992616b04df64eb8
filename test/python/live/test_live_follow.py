"""Live serving (issue 9): serving_follow on real Paimon tables.

Every answer is compared with an independent oracle: pure-Python merges of the commits written to
a Paimon table (support/live_util.py), and pypaimon's own batch read of the table.

- serving_follow on real Paimon tables under seeded random commits converges to pypaimon's
  read, every intermediate answer is the state of some snapshot, and answers never go back.
- A bad upstream commit stops nothing but itself: last_error, nothing applied, then catch-up.
- Two databases in one process follow two tables independently; manual refreshes and
  rebuilds serialize with the follower's applies; refusals of serving_follow.
- serving_status must not wait for a build while serving_follow replaces a follower (fails
  at the time of writing: docs/repro/repro_status_waits_for_follow_replace.py).
- `data_as_of` is the served snapshot's commit time as Paimon's snapshot file records it;
  `last_checked_at` moves with every look of the follower.
"""

from __future__ import annotations

import datetime
import json
import random
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import connect
from support.lake_util import Warehouse, canon
from support.live_util import (
    COMPANIES,
    FCT_COLUMNS,
    assert_serves,
    create_orders,
    dashboards_of,
    day,
    lake_source,
    mart_of,
    merged_after,
    random_lake_commits,
    status_dict,
    wait_for,
)

# --------------------------------------------------------------------------------------------
# Following a Paimon table
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine,seed", [("partial-update", 5), ("deduplicate", 6)])
def test_follow_random_commits_converges_to_pypaimon(tmp_path, engine, seed):
    """Seeded random commits while following every 50 ms. Deletes are exercised on the
    deduplicate table: pypaimon 2.1 refuses to write -D rows into a partial-update table
    (it does not implement partial-update.remove-record-on-delete)."""
    rng = random.Random(seed)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", engine)
    commits = random_lake_commits(rng, engine, 24)
    # The state at every snapshot (snapshot k = first k commits), computed before anything runs.
    states = {k: merged_after(engine, commits[:k]) for k in range(1, len(commits) + 1)}
    dash_at = {k: dashboards_of(rows) for k, rows in states.items()}
    size_at = {k: (len(rows), len(mart_of(rows))) for k, rows in states.items()}

    source = lake_source(wh, "orders")
    t.commit(commits[0])
    con = connect()
    assert con.execute("SELECT fct_rows, lake_snapshot FROM serving_build(?)", [source]).fetchone() == (
        size_at[1][0],
        1,
    )
    got = con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [source]).fetchall()
    assert got == [(source, 50, None, None)]

    stop = threading.Event()
    errors: list = []
    seen_snapshots: list = []
    reads = [0]
    committed = [1]  # snapshots committed so far (raised only after a commit returns)

    def reader(k: int) -> None:
        cur = con.cursor()
        floor = 1  # the oldest snapshot an answer may still come from (answers never go back)
        i = k
        try:
            while not stop.is_set():
                i += 1
                try:
                    if i % 12 == 5:
                        diffs = cur.execute("SELECT * FROM serving_reconcile()").fetchall()
                        if diffs:
                            errors.append(f"serving_reconcile() found differences while following: {diffs[:4]}")
                        continue
                    if i % 3 == 0:
                        s = status_dict(cur)
                        # one commit may be visible in the lake before its commit() returned
                        upper = committed[0] + 1
                        snap = s["lake_snapshot"]
                        if snap < floor:
                            errors.append(f"status went back from snapshot {floor} to {snap}")
                        elif (
                            not (snap <= s["lake_latest_snapshot"] <= upper)
                            or s["lag_snapshots"] != s["lake_latest_snapshot"] - snap
                            or (s["lag_snapshots"] == 0) != (s["lag_ms"] == 0)
                            or s["lag_ms"] < 0
                        ):
                            errors.append(f"lag columns: {s} (at most {upper} snapshots committed)")
                        elif s["last_reconcile_clean"] is False:
                            errors.append(f"a reconcile was recorded as unclean: {s}")
                        elif (s["fct_rows"], s["mart_rows"]) != size_at[snap]:
                            errors.append(
                                f"status at snapshot {snap} has {(s['fct_rows'], s['mart_rows'])}, "
                                f"that snapshot has {size_at[snap]}"
                            )
                        elif s["following"] != source or s["last_error"] is not None:
                            errors.append(f"follower state: {s}")
                        floor = max(floor, snap)
                        seen_snapshots.append(snap)
                        continue
                    company = COMPANIES[i % len(COMPANIES)]
                    fn = "serving_dashboard" if i % 3 == 1 else "serving_olap"
                    got = cur.execute(f"SELECT * FROM {fn}(?)", [company]).fetchall()
                except Exception as e:
                    errors.append(f"read raised {type(e).__name__}: {e}")
                    continue
                reads[0] += 1
                match = [k for k, d in dash_at.items() if d[company] == got]
                if not match or max(match) < floor:
                    errors.append(f"{fn}({company!r}) = {got[:4]}... is no snapshot's state at or after {floor}")
                else:
                    floor = max(floor, min(match))
        finally:
            cur.close()

    readers = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(2)]
    for r in readers:
        r.start()
    try:
        for k, rows in enumerate(commits[1:], start=2):
            t.commit(rows)
            committed[0] = k
            time.sleep(rng.choice([0, 0, 0.01, 0.03, 0.08, 0.15]))
        latest = len(commits)
        wait_for(lambda: status_dict(con)["lake_snapshot"] == latest, 30, f"the follower to reach snapshot {latest}")
    finally:
        stop.set()
        for r in readers:
            r.join(30)
    assert not any(r.is_alive() for r in readers), "a reader hung"
    assert not errors, f"{len(errors)} bad reads while following, e.g. {errors[:5]}"
    assert len(set(seen_snapshots)) >= 2, f"readers saw only snapshots {sorted(set(seen_snapshots))}"
    print(
        f"{engine}: {len(commits)} commits, readers saw snapshots {sorted(set(seen_snapshots))} "
        f"in {len(seen_snapshots)} status reads, {reads[0]} dashboard/olap reads"
    )

    s = status_dict(con)
    assert (s["lake_snapshot"], s["lake_latest_snapshot"], s["lag_snapshots"], s["lag_ms"]) == (latest, latest, 0, 0)
    assert s["following"] == source and s["follow_every_ms"] == 50 and s["last_error"] is None
    followed, snap, applies, last_error = con.execute("SELECT * FROM serving_unfollow()").fetchone()
    assert (followed, snap, last_error) == (source, latest, None)
    assert 1 <= applies <= len(commits) - 1
    print(f"{engine}: {applies} applies for {len(commits) - 1} commits")
    assert s["refreshes"] == applies
    assert status_dict(con)["following"] is None

    # The final state equals pypaimon's own batch read, and the pure-Python merge of the commits.
    theirs = [{c: r[c] for c in FCT_COLUMNS} for r in t.read()]
    assert canon(theirs, FCT_COLUMNS) == canon(states[latest], FCT_COLUMNS), "harness: pypaimon != oracle"
    assert_serves(con, theirs, "after following")
    assert con.execute("SELECT count(*) FROM paimon_snapshots(?)", [wh.path("orders")]).fetchone()[0] == latest
    con.close()


@pytest.mark.timeout(90)
def test_follow_bad_commit_sets_last_error_then_catches_up(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "partial-update")
    source = lake_source(wh, "orders")
    t.commit(
        [{"order_id": i, "company": COMPANIES[i % 3], "order_day": day(i % 4), "revenue": 10 * i} for i in range(1, 40)]
    )
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    before = merged_after("partial-update", t.commits)
    assert_serves(con, before, "built")
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [source]).fetchall()

    # a new order arrives without its company (and a correction of another order with it)
    before_commit = time.time()
    t.commit(
        [
            {"order_id": 777, "company": None, "order_day": day(2), "revenue": 5},
            {"order_id": 3, "company": None, "order_day": None, "revenue": 12345},
        ]
    )
    after_commit = time.time()
    wait_for(lambda: status_dict(con)["last_error"], 20, "last_error")
    time.sleep(0.2)
    asked = time.time()
    s = status_dict(con)
    answered = time.time()
    # lag_ms is the age of snapshot 2 (the oldest not applied), committed between the two times
    assert (asked - after_commit) * 1000 - 50 <= s["lag_ms"] <= (answered - before_commit) * 1000 + 50, (
        s["lag_ms"],
        asked - after_commit,
        answered - before_commit,
    )
    assert "order_id 777" in s["last_error"] and "company is NULL" in s["last_error"], s["last_error"]
    assert s["last_error_at"] is not None
    # TIMESTAMPTZ: an aware datetime, comparable with now() in any time zone.
    assert s["last_error_at"].tzinfo is not None
    assert abs((s["last_error_at"] - datetime.datetime.now(datetime.UTC)).total_seconds()) < 60
    assert (s["lake_snapshot"], s["lake_latest_snapshot"], s["lag_snapshots"]) == (1, 2, 1)
    assert s["following"] == source
    assert_serves(con, before, "after the bad commit")  # nothing of it applied, not even order 3

    # a good commit on top does not help while order 777 still has no company: nothing partial
    t.commit([{"order_id": 900, "company": "acme", "order_day": day(1), "revenue": 1}])
    committed = datetime.datetime.now(datetime.UTC)
    # proof that the follower tried again after that commit (and failed), not a pause and hope
    s = wait_for(
        lambda: (lambda s: s if s["lake_latest_snapshot"] == 3 and s["last_error_at"] > committed else None)(
            status_dict(con)
        ),
        40,
        "the follower to retry after the good commit (backoff is capped at 30 s)",
    )
    assert (s["lake_snapshot"], s["lake_latest_snapshot"], s["lag_snapshots"], s["state"]) == (1, 3, 2, "failing")
    assert "order_id 777" in s["last_error"]
    assert_serves(con, before, "after a good commit on top of the bad one")

    # the upstream fixes order 777: everything is applied, in one go
    t.commit([{"order_id": 777, "company": "globex", "order_day": None, "revenue": None}])
    s = wait_for(
        lambda: (lambda s: s if s["lake_snapshot"] == 4 else None)(status_dict(con)),
        40,
        "the follower to catch up after the fix (backoff is capped at 30 s)",
    )
    assert (s["lake_latest_snapshot"], s["lag_snapshots"], s["lag_ms"]) == (4, 0, 0)
    after = merged_after("partial-update", t.commits)
    assert any(r["order_id"] == 777 and r["company"] == "globex" for r in after)
    assert_serves(con, after, "after the fix")
    assert canon([{c: r[c] for c in FCT_COLUMNS} for r in t.read()], FCT_COLUMNS) == canon(after, FCT_COLUMNS)
    followed, snap, applies, last_error = con.execute("SELECT * FROM serving_unfollow()").fetchone()
    assert (followed, snap, applies) == (source, 4, 1)
    assert "order_id 777" in last_error  # the last error seen, kept for the record
    con.close()


@pytest.mark.timeout(90)
def test_two_databases_follow_two_tables(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    engines = {"one": "partial-update", "two": "deduplicate"}
    tables = {n: create_orders(wh, n, e) for n, e in engines.items()}
    plans = {
        n: random_lake_commits(random.Random(40 + i), e, 10, first=150) for i, (n, e) in enumerate(engines.items())
    }
    cons = {"one": connect(), "two": connect(str(tmp_path / "two.duckdb"))}
    for n, t in tables.items():
        t.commit(plans[n][0])
        cons[n].execute("SELECT * FROM serving_build(?)", [lake_source(wh, n)]).fetchall()
        cons[n].execute("SELECT * FROM serving_follow(?, every := INTERVAL '40 ms')", [lake_source(wh, n)]).fetchall()
    for step in range(1, 11):
        for n, t in tables.items():
            if step < len(plans[n]):
                t.commit(plans[n][step])
        time.sleep(0.02)
    for n, t in tables.items():
        latest = len(t.commits)
        wait_for(
            lambda n=n, latest=latest: status_dict(cons[n])["lake_snapshot"] == latest, 30, f"database {n} to catch up"
        )
        s = status_dict(cons[n])
        assert (s["following"], s["lag_snapshots"], s["last_error"]) == (lake_source(wh, n), 0, None)
        theirs = [{c: r[c] for c in FCT_COLUMNS} for r in t.read()]
        assert canon(theirs, FCT_COLUMNS) == canon(merged_after(engines[n], t.commits), FCT_COLUMNS), "harness"
        assert_serves(cons[n], theirs, n)

    # Unfollowing one database leaves the other following.
    assert cons["one"].execute("SELECT followed FROM serving_unfollow()").fetchone()[0] == lake_source(wh, "one")
    for n, t in tables.items():
        t.commit(
            [
                {
                    "order_id": 5_000_000,
                    "company": "acme",
                    "order_day": day(3),
                    "revenue": 42,
                    **({"op": "+I"} if engines[n] == "deduplicate" else {}),
                }
            ]
        )
    two_latest = len(tables["two"].commits)
    wait_for(lambda: status_dict(cons["two"])["lake_snapshot"] == two_latest, 30, "database two to apply")
    time.sleep(0.3)
    s = status_dict(cons["one"])
    assert s["following"] is None
    assert (s["lake_snapshot"], s["lag_snapshots"]) == (len(tables["one"].commits) - 1, 1)
    assert_serves(cons["one"], merged_after("partial-update", tables["one"].commits[:-1]), "one, unfollowed")
    assert_serves(cons["two"], merged_after("deduplicate", tables["two"].commits), "two, still following")
    for c in cons.values():
        c.execute("SELECT * FROM serving_unfollow()").fetchall()
        c.close()


# --------------------------------------------------------------------------------------------
# serving_follow refusals, replacing a follower, and a build underneath a follower
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_follow_refusals_and_replacing(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "partial-update")
    u = create_orders(wh, "other", "partial-update")
    rows = [{"order_id": i, "company": COMPANIES[i % 4], "order_day": day(i % 3), "revenue": i} for i in range(1, 30)]
    t.commit(rows)
    u.commit(rows)
    src, other = lake_source(wh, "orders"), lake_source(wh, "other")
    plain = tmp_path / "plain_dir"
    plain.mkdir()
    con = connect()

    def refused(sql, params, *needles):
        with pytest.raises(duckdb.Error) as err:
            con.execute(sql, params).fetchall()
        for needle in needles:
            assert needle in str(err.value), (sql, params, str(err.value))

    follow = "SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')"
    refused(follow, [src], "serving_follow", "run serving_build(source) first")  # nothing built yet
    assert con.execute("SELECT * FROM serving_unfollow()").fetchall() == []

    con.execute(
        "CREATE TABLE src AS SELECT * FROM (VALUES (1, 'acme', DATE '2026-01-01', 5)) "
        "v(order_id, company, order_day, revenue)"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    # not a Paimon table at all
    for bad in ["src", "main.src", str(tmp_path / "x.parquet"), "", "paimon:" + str(plain)]:
        refused(follow, [bad], "serving_follow")
    refused(follow, ["src"], "'src' is not a Paimon table")
    refused(follow, ["paimon:" + str(plain)], "not a Paimon table", str(plain))
    refused(follow, ["paimon:" + str(tmp_path / "missing")], "no such directory")
    refused("SELECT * FROM serving_follow(NULL)", [], "must not be NULL")
    # a Paimon table, but the layer was not built from it
    refused(follow, [src], "built from 'src', not from", src)
    con.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
    refused(follow, [other], f"built from '{src}', not from '{other}'")
    # too short an interval
    for every in ["1 ms", "9 ms", "0 seconds", "-1 second"]:
        refused(f"SELECT * FROM serving_follow(?, every := INTERVAL '{every}')", [src], "too short", "10 ms")
    assert status_dict(con)["following"] is None  # refusals start nothing

    assert con.execute(follow, [src]).fetchall() == [(src, 100, None, None)]
    # a refused call leaves the running follower alone
    refused(follow, [other], "not from")
    refused("SELECT * FROM serving_follow(?, every := INTERVAL '1 ms')", [src], "too short")
    s = status_dict(con)
    assert (s["following"], s["follow_every_ms"]) == (src, 100)
    # replacing: the old source comes back in `replaced`
    assert con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '30 ms')", [src]).fetchall() == [
        (src, 30, src, None)
    ]
    dir_form = wh.path("orders")  # a directory with schema/ is a Paimon source too
    assert con.execute("SELECT * FROM serving_follow(?)", [dir_form]).fetchall() == [(dir_form, 1000, src, None)]
    assert con.execute(follow, [src]).fetchall() == [(src, 100, dir_form, None)]
    s = status_dict(con)
    assert (
        s["following"],
        s["follow_every_ms"],
        s["lake_snapshot"],
        s["lake_latest_snapshot"],
        s["lag_snapshots"],
        s["lag_ms"],
        s["last_error"],
        s["last_error_at"],
    ) == (src, 100, 1, 1, 0, 0, None, None)

    # a rebuild from the same table underneath the follower: it keeps following
    con.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
    t.commit([{"order_id": 500, "company": "acme", "order_day": day(1), "revenue": 7}])
    committed = time.monotonic()
    wait_for(lambda: status_dict(con)["lake_snapshot"] == 2, 20, "the follower to apply after a rebuild")
    assert_serves(con, merged_after("partial-update", t.commits), "rebuilt while following")
    # How long "never applied" must be watched below: several times what this follower took
    # from a commit to its apply, and at least ten of its 100 ms ticks.
    watch = max(1.0, 4 * (time.monotonic() - committed))

    # a build from another source stops the follower once it commits, and says so: lake changes
    # are never applied onto it, and nothing is left following a table the layer is not from
    assert con.execute("SELECT stopped_following FROM serving_build('src')").fetchone() == (src,)
    s = status_dict(con)
    assert (s["source"], s["lake_snapshot"], s["following"], s["state"]) == ("src", None, None, "built"), s
    t.commit([{"order_id": 501, "company": "acme", "order_day": day(1), "revenue": 9}])
    time.sleep(watch)  # a follower still running would have applied the commit by now
    assert_serves(
        con,
        [{"order_id": 1, "company": "acme", "order_day": datetime.date(2026, 1, 1), "revenue": 5}],
        "built from src after following",
    )
    refused("SELECT * FROM serving_follow(?)", [src], "the serving layer was built from 'src'")
    # ... and so does a build from another Paimon table
    con.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
    con.execute(follow, [src]).fetchall()
    assert con.execute("SELECT stopped_following FROM serving_build(?)", [other]).fetchone() == (src,)
    t.commit([{"order_id": 502, "company": "acme", "order_day": day(1), "revenue": 11}])
    time.sleep(watch)
    assert_serves(con, merged_after("partial-update", u.commits), "built from another table after following")
    s = status_dict(con)
    assert (s["source"], s["lake_snapshot"], s["following"]) == (other, 1, None), s

    # nothing followed: no row
    assert con.execute("SELECT * FROM serving_unfollow()").fetchall() == []
    assert status_dict(con)["following"] is None
    con.close()


@pytest.mark.timeout(90)
def test_manual_refreshes_and_builds_beside_the_follower(tmp_path):
    """The follower is one writer among others: manual lake refreshes and rebuilds of the same
    table serialize with its applies, nothing is applied twice or lost."""
    rng = random.Random(77)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "deduplicate")
    commits = random_lake_commits(rng, "deduplicate", 16, first=200)
    source = lake_source(wh, "orders")
    t.commit(commits[0])
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '20 ms')", [source]).fetchall()
    manual = con.cursor()
    for k, rows in enumerate(commits[1:], start=2):
        t.commit(rows)
        if k % 5 == 0:
            got = manual.execute("SELECT fct_rows, lake_snapshot FROM serving_build(?)", [source]).fetchone()
            assert got == (len(merged_after("deduplicate", commits[:k])), k)
        elif k % 2 == 0:
            snap = manual.execute("SELECT lake_snapshot FROM serving_refresh(?)", [source]).fetchone()[0]
            assert snap == k  # the latest, whoever applied what before
        time.sleep(rng.choice([0, 0.01, 0.03]))
    latest = len(commits)
    wait_for(lambda: status_dict(con)["lake_snapshot"] == latest, 30, "the follower to catch up")
    s = status_dict(con)
    assert (s["lag_snapshots"], s["last_error"], s["following"]) == (0, None, source)
    assert con.execute("SELECT followed, lake_snapshot, last_error FROM serving_unfollow()").fetchone() == (
        source,
        latest,
        None,
    )
    theirs = [{c: r[c] for c in FCT_COLUMNS} for r in t.read()]
    assert canon(theirs, FCT_COLUMNS) == canon(merged_after("deduplicate", commits), FCT_COLUMNS), "harness"
    assert_serves(con, theirs, "manual writers beside the follower")
    manual.close()
    con.close()


@pytest.mark.timeout(90)
def test_status_does_not_wait_while_a_follower_is_being_replaced(tmp_path):
    """serving_status is a reader: it must answer while a build runs even when, at that moment,
    serving_follow is replacing a follower whose next apply is queued behind that build.
    (serving_follow holds the follower slot while it stops the old follower, and status reads
    that slot.)"""
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "partial-update")
    t.commit([{"order_id": i, "company": "acme", "order_day": day(0), "revenue": 1} for i in range(1, 100)])
    source = lake_source(wh, "orders")
    con = connect()
    con.execute(
        "CREATE VIEW slow AS SELECT i AS order_id, 'c' AS company, DATE '2024-01-01' AS order_day, "
        "(hash(md5(md5(md5(i::VARCHAR)))) % 1000)::BIGINT AS revenue FROM range(5000000) t(i)"
    )
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '20 ms')", [source]).fetchall()
    t.commit([{"order_id": 500, "company": "acme", "order_day": day(0), "revenue": 1}])  # work for the follower
    wait_for(lambda: status_dict(con)["lake_snapshot"] == 2, 20, "the first apply")
    t.commit([{"order_id": 501, "company": "acme", "order_day": day(0), "revenue": 1}])

    ended: dict = {}

    def run(name: str, sql: str, params: list) -> None:
        c = con.cursor()
        try:
            c.execute(sql, params).fetchall()
        except Exception as e:
            ended[name + " error"] = str(e)
        finally:
            ended[name] = time.perf_counter()
            c.close()

    build = threading.Thread(target=run, args=("build", "SELECT * FROM serving_build('slow')", []), daemon=True)
    build.start()
    time.sleep(0.3)  # the build holds the writer; the follower's next apply waits for it
    replace = threading.Thread(
        target=run,
        args=("follow", "SELECT * FROM serving_follow(?, every := INTERVAL '1 second')", [source]),
        daemon=True,
    )
    replace.start()
    time.sleep(0.2)
    started = time.perf_counter()
    status_dict(con.cursor())
    status_done = time.perf_counter()
    build.join(60)
    replace.join(60)
    assert "build error" not in ended and "follow error" not in ended, ended
    build_left = ended["build"] - started
    assert build_left > 0.5, f"inconclusive: the build ended {build_left:.2f} s after status was asked"
    assert status_done - started < build_left / 2, (
        f"serving_status took {status_done - started:.2f} s: it waited for the build "
        f"(which ended {build_left:.2f} s after status was asked)"
    )
    con.execute("SELECT * FROM serving_unfollow()").fetchall()
    con.close()


def snapshot_commit_time(table_dir: str, snapshot: int) -> datetime.datetime:
    """The commit time Paimon wrote in the snapshot file itself (`timeMillis`), read as plain JSON."""
    millis = json.loads((Path(table_dir) / "snapshot" / f"snapshot-{snapshot}").read_text())["timeMillis"]
    return datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.UTC)


@pytest.mark.timeout(90)
def test_data_as_of_is_the_served_snapshots_commit_time_and_last_checked_at_moves(tmp_path):
    """Issue 51: `data_as_of` equals the commit time of the snapshot served, as Paimon's own snapshot
    file records it, after the build and after each apply; `last_checked_at` moves with every look of
    the follower, also while nothing new arrives."""
    rng = random.Random(51)
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "deduplicate")
    commits = random_lake_commits(rng, "deduplicate", 4)
    t.commit(commits[0])
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "orders")])
    s = status_dict(con)
    assert s["lake_snapshot"] == 1 and s["data_as_of"] == snapshot_commit_time(wh.path("orders"), 1), s
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [lake_source(wh, "orders")])
    try:
        for k, rows in enumerate(commits[1:], start=2):
            t.commit(rows)
            s = wait_for(lambda k=k: (s := status_dict(con))["lake_snapshot"] == k and s, 30, f"snapshot {k}")
            assert s["data_as_of"] == snapshot_commit_time(wh.path("orders"), k), s
        first = wait_for(lambda: status_dict(con)["last_checked_at"], 10, "a look of the follower")
        later = wait_for(
            lambda: (at := status_dict(con)["last_checked_at"]) > first and at, 10, "last_checked_at to move"
        )
        assert later > first and status_dict(con)["lake_snapshot"] == len(commits)
    finally:
        con.execute("SELECT * FROM serving_unfollow()")
