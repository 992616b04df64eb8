"""Flink runs the mart job (issue 41, item 1): Flink 1.20 SQL (local MiniClusters, Paimon 1.3.1's
Flink connector) executes exactly the text `paimon_mart_ddl(mart)` and `paimon_mart_job(fact, mart)`
return — fetched from the extension here, never a copy — over a Paimon fact table that Flink SQL
writes: new orders, corrections (revenue, company or day moved), deletes (a whole group emptied, a
whole company gone), re-inserts. Mart-only replicas (`serving_build('paimon:<mart>')` +
`serving_follow`, one built early, one in the middle) serve what Flink writes; at every quiet point
(the mart table unchanged for a while, each replica at its latest snapshot) their mart_daily and
dashboards, and the mart table itself (revenue and order counts), equal a plain-Python oracle over
the orders written.

Two faults this test found in the rendered job, fixed in core/tier.rs and kept as regression tests:
- it set no checkpoint interval, and Paimon's streaming sink commits only on checkpoints: in a
  session without one (a fresh SQL client) the mart never got a snapshot (now the job sets one,
  '10 s' unless `paimon_mart_job(fact, mart, checkpoint)` says otherwise; the tests pass '500 ms');
- the orders already in the fact when it started (files at level 0: written before its ALTER TABLE
  setting `changelog-producer = lookup`, or by a writer that does not compact) were not read:
  Paimon's streaming source then starts from the files above level 0 only (now the job leaves the
  fact's changelog producer alone and Flink normalizes the changes itself)."""

from __future__ import annotations

import datetime
import random
import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import connect
from support.flink_sql import FlinkSql, latest_snapshot, sql_string
from support.live_util import wait_for

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("jvm")]  # JVM tests: one worker (conftest.py)

COMPANIES = ["acme", "O'Reilly", "東京商事", "x' OR '1'='1", "globex", "a%b"]
BASE_DAY = datetime.date(2026, 11, 1)
# How long the mart table must stay unchanged to call it quiet: the fact is polled every 500 ms
# (its `continuous.discovery-interval`), the session checkpoints every 500 ms.
QUIET_S = 4.0
CHECKPOINT = "SET 'execution.checkpointing.interval' = '500 ms'"


def fact_ddl(catalog: str) -> str:
    """The fact table the job reads (the test's own: Fluss's tiering or any writer makes one)."""
    return (
        f"CREATE TABLE {catalog}.db.fct_orders (\n"
        "  order_id BIGINT, company STRING, order_day DATE, revenue BIGINT,\n"
        "  PRIMARY KEY (order_id) NOT ENFORCED\n"
        ") WITH ('bucket' = '2', 'continuous.discovery-interval' = '500 ms')"
    )


class Fact:
    """The orders written to the fact, in plain Python (the oracle), and the Flink SQL writing them."""

    def __init__(self, catalog: str, seed: int):
        self.table = f"{catalog}.db.fct_orders"
        self.rng = random.Random(seed)
        self.orders: dict[int, tuple[str, datetime.date, int]] = {}
        self.deleted: list[int] = []
        self.next_id = 1

    def new_order(self, company: str | None = None) -> tuple[int, tuple]:
        oid = self.next_id
        self.next_id += 1
        return oid, self.value(company)

    def value(self, company: str | None = None) -> tuple:
        r = self.rng
        return (
            company or r.choice(COMPANIES),
            BASE_DAY + datetime.timedelta(days=r.randrange(10)),
            r.randint(-500, 5000),
        )

    def upsert_sql(self, rows: dict) -> str:
        values = ",\n".join(
            f"({oid}, {sql_string(c)}, DATE '{d.isoformat()}', {rev})" for oid, (c, d, rev) in rows.items()
        )
        return f"INSERT INTO {self.table} VALUES\n{values}"

    def delete_sql(self, ids) -> str:
        return f"DELETE FROM {self.table} WHERE order_id IN ({', '.join(map(str, sorted(ids)))})"

    def write(self, flink: FlinkSql, upserts: dict, deletes: set) -> None:
        """One INSERT of the upserts, then one DELETE (disjoint ids: the order cannot matter)."""
        assert not set(upserts) & deletes
        if upserts:
            flink.exec(self.upsert_sql(upserts))
            self.orders.update(upserts)
        if deletes:
            flink.exec(self.delete_sql(deletes))
            for oid in deletes:
                del self.orders[oid]
            self.deleted += sorted(deletes)

    def round_of_changes(self, n_new: int, n_corrections: int, n_deletes: int) -> tuple[dict, set]:
        r = self.rng
        upserts = dict(self.new_order() for _ in range(n_new))
        live = sorted(self.orders)
        for oid in r.sample(live, n_corrections):
            c, d, rev = self.orders[oid]
            kind = r.choice(["revenue", "company", "day", "both"])
            if kind in ("company", "both"):
                c = r.choice([x for x in COMPANIES if x != c])
            if kind in ("day", "both"):
                d = BASE_DAY + datetime.timedelta(days=(d - BASE_DAY).days + r.choice([-3, -1, 1, 2]))
            if kind == "revenue":
                rev = rev + r.randint(1, 900)
            upserts[oid] = (c, d, rev)
        rest = [oid for oid in live if oid not in upserts]
        deletes = set(r.sample(rest, n_deletes))
        # a whole (company, day) group emptied: its mart row must be deleted
        groups: dict = defaultdict(list)
        for oid in rest:
            if oid not in deletes:
                c, d, _ = self.orders[oid]
                groups[(c, d)].append(oid)
        smallest = min(groups.values(), key=lambda ids: (len(ids), ids))
        deletes |= set(smallest)
        # orders deleted earlier come back
        for oid in self.deleted[:2]:
            upserts[oid] = self.value()
        self.deleted = self.deleted[2:]
        return upserts, deletes

    def mart(self) -> dict:
        """{(company, day): (revenue, orders)} of the orders written: the oracle."""
        cells: dict = defaultdict(lambda: [0, 0])
        for c, d, rev in self.orders.values():
            cells[(c, d)][0] += rev
            cells[(c, d)][1] += 1
        return {k: tuple(v) for k, v in cells.items()}


def dashboards(mart: dict) -> dict:
    per: dict = defaultdict(list)
    for (c, d), (rev, _n) in mart.items():
        per[c].append((d, rev))
    return {c: sorted(per[c], key=lambda dr: (-dr[1], dr[0])) for c in COMPANIES}


def status(con) -> dict:
    cur = con.execute("SELECT * FROM serving_status()")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def served(con) -> list:
    return con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()


def rows_of(mart: dict) -> list:
    return sorted((c, d, rev) for (c, d), (rev, _n) in mart.items())


def start_replica(mart_dir: Path):
    con = connect()
    source = f"paimon:{mart_dir}"
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source]).fetchall()
    return con


def settle(replicas: list, mart_dir: Path, fact: Fact, what: str) -> int:
    """Waits for the quiet point after a round of writes, then checks every replica against the
    oracle; returns the mart snapshot they serve."""
    want = fact.mart()
    # Flink has caught up once each replica serves the oracle's mart (checked exactly below).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(served(r) != rows_of(want) for r in replicas):
        time.sleep(0.2)
    # quiet: the mart table unchanged for QUIET_S, and every replica at its latest snapshot
    last, since = latest_snapshot(mart_dir), time.monotonic()
    while time.monotonic() - since < QUIET_S:
        time.sleep(0.2)
        now = latest_snapshot(mart_dir)
        if now != last:
            last, since = now, time.monotonic()
    for r in replicas:
        wait_for(lambda r=r: status(r)["lake_snapshot"] == last, 30, f"{what}: a replica at snapshot {last}")
    boards = dashboards(want)
    for n, r in enumerate(replicas):
        label = f"{what}, replica {n}"
        assert served(r) == rows_of(want), label
        for c in COMPANIES:
            assert r.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == boards[c], f"{label}: {c!r}"
        s = status(r)
        assert (s["mode"], s["fct_rows"], s["mart_rows"], s["state"], s["last_error"]) == (
            "mart",
            None,
            len(want),
            "following",
            None,
        ), label
    # the mart table Flink wrote: revenue and order counts per group
    sql = "SELECT company, order_day, revenue, orders FROM paimon_scan(?) ORDER BY ALL"
    table = replicas[0].execute(sql, [str(mart_dir)]).fetchall()
    assert table == sorted((c, d, rev, n) for (c, d), (rev, n) in want.items()), f"{what}: the mart table"
    return last


def render(con, fact: str, mart: str, checkpoint: str | None) -> tuple[str, str]:
    """The extension's text: the mart table's DDL and the job (committing every `checkpoint`, or the
    function's default when None)."""
    ddl = con.execute("SELECT paimon_mart_ddl(?)", [mart]).fetchone()[0]
    if checkpoint is None:
        job = con.execute("SELECT paimon_mart_job(?, ?)", [fact, mart]).fetchone()[0]
    else:
        job = con.execute("SELECT paimon_mart_job(?, ?, ?)", [fact, mart, checkpoint]).fetchone()[0]
    return ddl, job


def setup(flink: FlinkSql, tmp_path: Path, catalog: str, checkpoint: str | None = "500 ms"):
    """A new session (no checkpoint interval: a fresh SQL client's) on a warehouse of its own with the
    fact table and the rendered mart table; returns a connection, the rendered job, the mart's dir."""
    warehouse = tmp_path / "wh"
    flink.new_session()
    flink.use_catalog(catalog, warehouse)
    con = connect()
    ddl, job = render(con, f"{catalog}.db.fct_orders", f"{catalog}.db.mart_daily", checkpoint)
    flink.exec(f"CREATE DATABASE {catalog}.db;\n" + fact_ddl(catalog))
    (created,) = flink.exec(ddl)
    assert created["kind"] == "SUCCESS", created
    return con, job, warehouse / "db.db" / "mart_daily"


def start_job(flink: FlinkSql, job: str) -> None:
    """The job, as rendered; the session starts in batch mode: the script's SET switches it."""
    results = flink.exec(job, mode="batch", detach=True)
    assert results[-1]["kind"] == "SUCCESS_WITH_CONTENT" and results[-1].get("job"), results


def mart_table(con, mart_dir: Path) -> list | None:
    """The mart table as paimon_scan reads it, None before its first snapshot."""
    if latest_snapshot(mart_dir) == 0:
        return None
    sql = "SELECT company, order_day, revenue, orders FROM paimon_scan(?) ORDER BY ALL"
    return con.execute(sql, [str(mart_dir)]).fetchall()


def oracle_table(fact: Fact) -> list:
    return sorted((c, d, rev, n) for (c, d), (rev, n) in fact.mart().items())


def assert_mart_table_comes_to_hold_the_oracle(con, mart_dir: Path, fact: Fact, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and mart_table(con, mart_dir) != oracle_table(fact):
        time.sleep(0.5)
    assert latest_snapshot(mart_dir) >= 1, f"the job committed nothing to the mart table in {seconds} s"
    assert mart_table(con, mart_dir) == oracle_table(fact)


def test_flink_runs_the_rendered_mart_job_and_replicas_serve_it(flink, tmp_path):
    _con, job, mart_dir = setup(flink, tmp_path, "lake")
    flink.exec(CHECKPOINT)
    start_job(flink, job)

    fact = Fact("lake", seed=41)
    fact.write(flink, dict(fact.new_order() for _ in range(80)), set())
    wait_for(lambda: latest_snapshot(mart_dir) >= 1, 120, "the job's first commit to the mart")
    replicas = [start_replica(mart_dir)]
    try:
        snapshots = [settle(replicas, mart_dir, fact, "after the first orders")]
        for k, (n_new, n_corr, n_del) in enumerate([(12, 10, 4), (8, 12, 6), (10, 8, 5)], start=1):
            fact.write(flink, *fact.round_of_changes(n_new, n_corr, n_del))
            if k == 2:
                # the same orders corrected again, in a commit of their own: the latest wins
                again = {oid: fact.value() for oid in fact.rng.sample(sorted(fact.orders), 6)}
                fact.write(flink, again, set())
                replicas.append(start_replica(mart_dir))  # a replica built from a later snapshot
            snapshots.append(settle(replicas, mart_dir, fact, f"after round {k}"))
        # a whole company leaves: every one of its groups is deleted from the mart
        gone = {oid for oid, (c, _d, _r) in fact.orders.items() if c == "a%b"}
        assert gone
        fact.write(flink, {}, gone)
        snapshots.append(settle(replicas, mart_dir, fact, "after a company left"))
        assert all(r.execute("SELECT * FROM serving_dashboard('a%b')").fetchall() == [] for r in replicas)
        assert snapshots == sorted(snapshots) and len(set(snapshots)) == len(snapshots), snapshots
    finally:
        for r in replicas:
            r.execute("SELECT * FROM serving_unfollow()").fetchall()
        flink.cancel_jobs()

    # Flink's own batch reads: the fact holds what the oracle wrote, the mart its rollup.
    fct = flink.query("SELECT order_id, company, order_day, revenue FROM lake.db.fct_orders")
    assert sorted((oid, c, datetime.date.fromisoformat(d), rev) for _k, oid, c, d, rev in fct) == sorted(
        (oid, *v) for oid, v in fact.orders.items()
    )
    mart = flink.query("SELECT company, order_day, revenue, orders FROM lake.db.mart_daily")
    assert sorted((c, datetime.date.fromisoformat(d), int(rev), n) for _k, c, d, rev, n in mart) == oracle_table(fact)


def test_orders_in_the_fact_before_the_job_reach_the_mart(flink, tmp_path):
    con, job, mart_dir = setup(flink, tmp_path, "early")
    fact = Fact("early", seed=5)
    fact.write(flink, dict(fact.new_order() for _ in range(40)), set())  # before the job
    flink.exec(CHECKPOINT)
    start_job(flink, job)
    try:
        # no more writes: the mart must come to hold the rollup of what was there
        assert_mart_table_comes_to_hold_the_oracle(con, mart_dir, fact, 30)
    finally:
        flink.cancel_jobs()


def test_rendered_mart_job_commits_in_a_session_without_checkpoint_settings(flink, tmp_path):
    # The session sets no checkpoint interval and the job is rendered with the function's default.
    con, job, mart_dir = setup(flink, tmp_path, "plain", checkpoint=None)
    start_job(flink, job)  # on an empty fact: the orders come after it started
    fact = Fact("plain", seed=7)
    try:
        fact.write(flink, dict(fact.new_order() for _ in range(20)), set())
        assert_mart_table_comes_to_hold_the_oracle(con, mart_dir, fact, 30)
    finally:
        flink.cancel_jobs()


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    with FlinkSql(tmp_path_factory.mktemp("flink-mart")) as f:
        yield f
