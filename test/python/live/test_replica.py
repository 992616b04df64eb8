"""Mart-only replicas (issue 19, item 2): `serving_build` of a Paimon *mart* table (columns
company, order_day, revenue, orders; key (company, order_day); written here by pypaimon, from a
pure-Python oracle of a merged fact) loads mart_daily and the counts only — no fct_orders — and
serves the same dashboards as a fact build of that fact; `serving_status().mode` says 'mart';
functions that need the fact refuse by name; `serving_follow` replaces the mart with each new
snapshot atomically; bad mart tables are refused naming the problem, the previous layer kept."""

from __future__ import annotations

import datetime
import random
import shutil
import threading
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import connect
from support.dashboard_oracle import expected
from support.lake_util import Warehouse, move_data_files
from support.live_util import COMPANIES, create_orders, lake_source, merged_after, random_lake_commits, wait_for

MART = pa.schema(
    [
        pa.field("company", pa.string(), nullable=False),
        pa.field("order_day", pa.date32(), nullable=False),
        pa.field("revenue", pa.decimal128(38, 0)),
        pa.field("orders", pa.int64()),
    ]
)
MART_OPTIONS = {"bucket": "2", "merge-engine": "deduplicate"}


def mart_rows(merged: list) -> list[dict]:
    """The mart of merged fact rows, in plain Python: one row per (company, order_day)."""
    cells: dict = defaultdict(lambda: [0, 0])
    for r in merged:
        cell = cells[(r["company"], r["order_day"])]
        cell[0] += r["revenue"]
        cell[1] += 1
    return [
        {"company": c, "order_day": d, "revenue": Decimal(v), "orders": n} for (c, d), (v, n) in sorted(cells.items())
    ]


def dashboards(mart: list[dict]) -> dict:
    per: dict = defaultdict(list)
    for r in mart:
        per[r["company"]].append((r["order_day"], int(r["revenue"])))
    return {c: sorted(per.get(c, []), key=lambda dr: (-dr[1], dr[0])) for c in COMPANIES}


def overwrite(table, rows: list[dict]) -> None:
    """One commit that replaces the whole mart table (groups that vanished are gone)."""
    wb = table.table.new_batch_write_builder().overwrite()
    w, c = wb.new_write(), wb.new_commit()
    try:
        w.write_arrow(pa.Table.from_pylist(rows, schema=MART))
        c.commit(w.prepare_commit())
    finally:
        w.close()
        c.close()


def status(con) -> dict:
    cur = con.execute("SELECT * FROM serving_status()")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def assert_replica_serves(con, mart: list[dict], what: str) -> None:
    got = con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
    assert got == [(r["company"], r["order_day"], int(r["revenue"])) for r in mart], f"{what}: mart_daily"
    want = dashboards(mart)
    for c in COMPANIES:
        assert con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == want[c], f"{what}: {c!r}"


@pytest.fixture
def lake(tmp_path):
    """A partial-update fact written in several commits and its mart table, written from the
    oracle of the merged fact."""
    rng = random.Random(19)
    wh = Warehouse(tmp_path / "wh")
    fact = create_orders(wh, "fct_orders", "partial-update")
    commits = random_lake_commits(rng, "partial-update", 6, first=2_000)
    for c in commits:
        fact.commit(c)
    merged = merged_after("partial-update", commits)
    mart_table = wh.create("mart_daily", MART, ["company", "order_day"], MART_OPTIONS)
    mart = mart_rows(merged)
    mart_table.commit(mart)
    return wh, fact, mart_table, merged, mart


def test_replica_serves_the_fact_builds_dashboards_without_the_fact(lake):
    wh, _fact, _mart_table, merged, mart = lake
    primary = connect()
    primary.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "fct_orders")])
    replica = connect()
    got = replica.execute(
        "SELECT fct_rows, mart_rows, companies, lake_snapshot FROM serving_build(?)", [lake_source(wh, "mart_daily")]
    ).fetchone()
    assert got == (len(merged), len(mart), len({r["company"] for r in mart}), 1)
    tables = {r[0] for r in replica.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}
    assert "fct_orders" not in tables and {"mart_daily", "serving_mart_counts", "serving_meta"} <= tables, tables
    assert_replica_serves(replica, mart, "replica")
    for c in COMPANIES:
        assert (
            replica.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall()
            == primary.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall()
        ), c
    s = status(replica)
    assert (s["mode"], s["fct_rows"], s["mart_rows"], s["state"]) == ("mart", None, len(mart), "built")
    assert status(primary)["mode"] == "fact"
    plan = "\n".join(r[0] for r in replica.execute("SELECT explain_value FROM serving_explain('acme')").fetchall())
    assert "mart_daily" in plan and "fct_orders" not in plan


def test_replica_refuses_what_needs_the_fact_and_keeps_its_mart(lake):
    wh, _fact, _mart_table, _merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    replica.execute(
        "CREATE TABLE changes AS SELECT 1::BIGINT AS order_id, 'acme' AS company, "
        "DATE '2024-01-02' AS order_day, 5::BIGINT AS revenue"
    )
    for sql, function in [
        ("SELECT * FROM serving_olap('acme')", "serving_olap"),
        ("SELECT * FROM serving_reconcile()", "serving_reconcile"),
        ("SELECT * FROM serving_refresh('changes')", "serving_refresh"),
    ]:
        with pytest.raises(Exception) as e:
            replica.execute(sql).fetchall()
        msg = str(e.value)
        assert msg.startswith(f"Invalid Input Error: {function}: this serving layer is a mart-only replica"), msg
        assert "no fct_orders" in msg, msg
    assert_replica_serves(replica, mart, "after the refusals")


def test_follow_replaces_the_mart_with_each_new_snapshot_atomically(lake):
    wh, _fact, mart_table, _merged, mart = lake
    replica = connect()
    source = lake_source(wh, "mart_daily")
    replica.execute("SELECT * FROM serving_build(?)", [source])
    replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [source]).fetchall()
    states = [mart]
    rng = random.Random(7)
    stop = threading.Event()
    seen_bad: list = []
    # What the reader did: a reader that died (its exception) or never read proves nothing.
    reader_errors: list = []
    seen_states: list = []

    def reader():
        # Every read of the whole mart is one of the committed states, never a mix.
        try:
            cur = replica.cursor()
            while not stop.is_set():
                got = cur.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
                which = [
                    n
                    for n, s in enumerate(list(states))
                    if got == [(r["company"], r["order_day"], int(r["revenue"])) for r in s]
                ]
                if which:
                    seen_states.append(which[0])
                else:
                    seen_bad.append(got[:3])
        except Exception as e:  # collected and asserted below
            reader_errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for k in range(4):
            # groups move, vanish and appear: whole-table overwrite commits
            nxt = [dict(r) for r in states[-1] if rng.random() > 0.2]
            for r in nxt[:20]:
                r["revenue"] += 3
                r["orders"] += 1
            nxt.append(
                {"company": "globex", "order_day": datetime.date(2030, 1, k + 1), "revenue": Decimal(7), "orders": 1}
            )
            nxt.sort(key=lambda r: (r["company"], r["order_day"]))
            states.append(nxt)
            overwrite(mart_table, nxt)
            snapshot = k + 2
            wait_for(lambda s=snapshot: status(replica)["lake_snapshot"] == s, 20, f"snapshot {snapshot} applied")
            assert_replica_serves(replica, nxt, f"after snapshot {snapshot}")
    finally:
        stop.set()
        t.join()
        replica.execute("SELECT * FROM serving_unfollow()").fetchall()
    assert not reader_errors, f"the reader thread failed: {reader_errors!r}"
    assert not seen_bad, f"a read saw a mix of mart states: {seen_bad[:2]}"
    # The reader read while the mart moved: the first state and at least one later one.
    assert seen_states, "the reader thread made no read"
    assert len(set(seen_states)) >= 2, f"the reader saw only state {set(seen_states)} in {len(seen_states)} reads"
    s = status(replica)
    assert (s["mode"], s["refreshes"], s["last_error"]) == ("mart", 4, None)


def test_a_follower_more_than_64_snapshots_behind_reads_the_mart_table_whole(lake, tmp_path):
    """A replica applies at most 64 snapshots from their changes (the lake refresh's rule): 64
    behind, the follower applies them with every file the build read moved away; 65 behind, it
    reads the mart table whole, so with those files gone it fails (last_error names the missing
    file, the layer kept), and with them back it equals the oracle."""
    wh, _fact, mart_table, _merged, mart = lake
    state = {(r["company"], r["order_day"]): r for r in mart}
    rng = random.Random(64)

    def commit_one() -> None:  # one group's revenue and order count move
        key = rng.choice(sorted(state))
        state[key] = {**state[key], "revenue": Decimal(rng.randint(1, 10**6)), "orders": rng.randint(1, 9)}
        mart_table.commit([state[key]])

    def now() -> list[dict]:
        return [state[k] for k in sorted(state)]

    replica = connect()
    source = lake_source(wh, "mart_daily")
    replica.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    moved = move_data_files(Path(wh.path("mart_daily")), tmp_path / "away")

    def follow_until(pred, what: str) -> dict:
        replica.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [source]).fetchall()
        try:
            return wait_for(lambda: (lambda s: s if pred(s) else None)(status(replica)), 60, what)
        finally:
            replica.execute("SELECT * FROM serving_unfollow()").fetchall()

    for _ in range(64):
        commit_one()
    st = follow_until(lambda s: s["lake_snapshot"] == 65 or s["last_error"], "64 snapshots applied")
    assert (st["lake_snapshot"], st["last_error"]) == (65, None), st
    assert_replica_serves(replica, now(), "64 snapshots behind, the build's files gone")
    at_65 = now()
    for _ in range(65):
        commit_one()
    st = follow_until(lambda s: s["last_error"], "the follower's error")
    assert st["lake_snapshot"] == 65, st
    assert "No such file" in st["last_error"] or "NotFound" in st["last_error"], st["last_error"]
    assert_replica_serves(replica, at_65, "a failed apply 65 snapshots behind")
    for original, kept in moved:
        shutil.move(kept, original)
    st = follow_until(lambda s: s["lake_snapshot"] == 130, "65 snapshots applied, the files back")
    assert (st["lake_snapshot"], st["last_error"]) == (130, None), st
    assert_replica_serves(replica, now(), "65 snapshots behind")


@pytest.mark.parametrize(
    "bad,problem",
    [
        ({"orders": 0}, "the order count is not positive"),
        ({"orders": -3}, "the order count is not positive"),
        ({"revenue": None}, "revenue is NULL"),
    ],
)
def test_a_bad_mart_table_is_refused_and_the_previous_layer_kept(lake, bad, problem):
    """(A NULL company or order_day cannot be written: Paimon's key columns are NOT NULL.)"""
    wh, _fact, _mart_table, _merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    broken = wh.create("broken", MART, ["company", "order_day"], MART_OPTIONS)
    rows = [dict(r) for r in mart[:5]]
    rows[2].update(bad)
    broken.commit(rows)
    source = lake_source(wh, "broken")
    with pytest.raises(Exception) as e:
        replica.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    msg = str(e.value)
    assert f"serving_build: source '{source}'" in msg and problem in msg, msg
    assert_replica_serves(replica, mart, "after the refused build")


def test_a_mart_table_missing_a_column_is_refused_by_name(lake):
    wh, _fact, _mart_table, _merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    three = pa.schema(list(MART)[:3])
    t = wh.create("no_orders", three, ["company", "order_day"], MART_OPTIONS)
    t.commit([{k: r[k] for k in ("company", "order_day", "revenue")} for r in mart[:3]])
    source = lake_source(wh, "no_orders")
    with pytest.raises(Exception) as e:
        replica.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    assert f"serving_build: source '{source}' has no column 'orders'" in str(e.value), str(e.value)
    assert_replica_serves(replica, mart, "after the refused build")


def test_reconcile_with_fact_checks_a_replica_against_the_lake_fact(lake):
    """`serving_reconcile(fact := ...)` aggregates the lake fact while streaming it and returns
    the two-way differences; the oracle is the pure-Python mart of the merged fact."""
    wh, fact, _mart_table, merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    source = lake_source(wh, "fct_orders")
    assert replica.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall() == []
    assert status(replica)["last_reconcile_clean"] is True
    # The fact moves on; the mart table does not: exactly the moved groups differ.
    rng = random.Random(3)
    commits = random_lake_commits(rng, "partial-update", 0, first=40)
    for r in commits[0]:
        r["order_id"] += 10_000_000
    fact.commit(commits[0])
    now = mart_rows(merged + [{k: r[k] for k in ("order_id", "company", "order_day", "revenue")} for r in commits[0]])
    old = {(r["company"], r["order_day"]): (int(r["revenue"]), r["orders"]) for r in mart}
    new = {(r["company"], r["order_day"]): (int(r["revenue"]), r["orders"]) for r in now}
    want = sorted(
        [(c, d, "mart_only", *v) for (c, d), v in old.items() if new.get((c, d)) != v]
        + [(c, d, "fact_only", *v) for (c, d), v in new.items() if old.get((c, d)) != v]
    )
    got = replica.execute(
        "SELECT company, order_day, side, revenue, orders FROM serving_reconcile(fact := ?)", [source]
    ).fetchall()
    assert want and sorted(got) == want
    assert status(replica)["last_reconcile_clean"] is False
    with pytest.raises(Exception) as e:
        replica.execute("SELECT * FROM serving_reconcile(fact := 'mart_daily')").fetchall()
    assert "serving_reconcile: fact := 'mart_daily' is not a Paimon table" in str(e.value), str(e.value)
    with pytest.raises(Exception) as e:
        replica.execute("SELECT * FROM serving_reconcile(fact := ?)", [lake_source(wh, "mart_daily")]).fetchall()
    assert "has no column 'order_id'" in str(e.value), str(e.value)


@pytest.mark.parametrize("grain", ["day", "week", "month", "quarter", "year"])
def test_olap_with_fact_answers_from_the_lake_fact_on_a_replica(lake, grain):
    """`serving_olap(c, fact := ...)` on a mart-only replica aggregates the lake fact while
    streaming it: the oracle is the plain-Python dashboard of the merged fact, for every grain,
    with and without a window and top; the replica's own tables are untouched."""
    wh, _fact, _mart_table, merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    source = lake_source(wh, "fct_orders")
    rows = [(r["order_id"], r["company"], r["order_day"], r["revenue"]) for r in merged]
    days = sorted({r["order_day"] for r in merged})
    window = {"from_day": days[len(days) // 4], "to_day": days[3 * len(days) // 4]}
    for company in [*COMPANIES, "nobody"]:
        for params in [{}, {"top": 3}, window, {**window, "top": 2}]:
            args = ", ".join(f"{k} := ?" for k in params)
            sql = f"SELECT * FROM serving_olap(?, grain := ?, fact := ?{', ' + args if args else ''})"
            got = replica.execute(sql, [company, grain, source, *params.values()]).fetchall()
            assert got == expected(rows, company, grain=grain, **params), (company, params)
    assert_replica_serves(replica, mart, "after serving_olap(fact := ...)")


def test_olap_with_fact_refuses_what_is_not_a_fact(lake):
    wh, _fact, _mart_table, _merged, mart = lake
    replica = connect()
    replica.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "mart_daily")])
    for fact, problem in [
        ("mart_daily", "serving_olap: fact := 'mart_daily' is not a Paimon table"),
        (lake_source(wh, "mart_daily"), "has no column 'order_id'"),
        (lake_source(wh, "nowhere"), "nowhere"),
    ]:
        with pytest.raises(Exception) as e:
            replica.execute("SELECT * FROM serving_olap('acme', fact := ?)", [fact]).fetchall()
        assert problem in str(e.value), str(e.value)
    assert_replica_serves(replica, mart, "after the refusals")
