"""The tier table in Flink SQL (issue 41, item 2): the DDL `paimon_tier_ddl(name)` renders and the
statements of `paimon_tier_upsert` run, as the extension returns them, in Flink 1.20 SQL on a Paimon
catalog (Paimon 1.3.1's Flink connector, a filesystem warehouse). Flink's batch read and its bounded
streaming read of the table (the changelog from the first snapshot to the latest) reach the same
final state, equal to a plain-Python oracle (the last balance per id), and streamhouse's
`paimon_scan` and `paimon_changelog` of the table Flink wrote agree with both. The negative control:
the same writes into an append-only table (no primary key) show every version in its streaming read
(and its batch read), never the last value per id.

One runner JVM per module (support/flink_sql.py); every Flink job runs in a local MiniCluster."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import connect
from support.flink_sql import FlinkSql, latest_snapshot

pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("jvm")]  # JVM tests: one worker (conftest.py)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    with FlinkSql(tmp_path_factory.mktemp("flink-tier")) as f:
        yield f


def writes() -> list[tuple[int, int]]:
    """Seeded (id, bal) writes: ids written several times (the latest must win), one written once,
    balances at the INT extremes and negative."""
    rng = random.Random(41)
    ids = [7, -3, 0, INT_MAX, 12]
    out = [(i, rng.randrange(-1000, 1000)) for i in ids]  # every id once
    for _ in range(7):
        out.append((rng.choice(ids[:3]), rng.choice([INT_MIN, INT_MAX, 0, -1, rng.randrange(INT_MIN, INT_MAX)])))
    out.append((12, 5))  # 12: written twice, far apart
    return out


def last_per_id(ws) -> dict:
    """The oracle: the last balance written per id."""
    state: dict = {}
    for i, b in ws:
        state[i] = b
    return state


def replay(rows) -> dict:
    """A keyed changelog (`[kind, id, bal]` rows) applied in order: +I/+U put, -U/-D remove."""
    state: dict = {}
    for kind, i, b in rows:
        if kind in ("+I", "+U"):
            state[i] = b
        else:
            assert state.get(i) == b, (kind, i, b, state.get(i))
            del state[i]
    return state


def bounded_stream_sql(table: str, consumer: str) -> str:
    """A streaming read of every change from snapshot 1 on. `consumer-id` makes the source record,
    at each checkpoint, the next snapshot it will read: the runner ends the read once that is past
    the latest snapshot (Paimon's own bound, `scan.bounded.watermark`, needs snapshot watermarks,
    and a batch INSERT commits none)."""
    return (
        f"SELECT id, bal FROM {table} /*+ OPTIONS('scan.mode' = 'from-snapshot', 'scan.snapshot-id' = '1', "
        f"'consumer-id' = '{consumer}', 'consumer.expiration-time' = '1 h', "
        "'continuous.discovery-interval' = '100 ms') */"
    )


def run_writes(flink: FlinkSql, con, name: str) -> list[str]:
    """Renders one `paimon_tier_upsert` per write and runs them in order, as one script."""
    statements = [con.execute("SELECT paimon_tier_upsert(?, ?, ?)", [name, i, b]).fetchone()[0] for i, b in writes()]
    results = flink.exec(";\n".join(statements))
    assert len(results) == len(statements)
    assert all(r["kind"] == "SUCCESS_WITH_CONTENT" and r.get("job") for r in results), results
    return statements


def stream_of(flink: FlinkSql, table_dir: Path, table: str, consumer: str) -> list[list]:
    return flink.stream(
        bounded_stream_sql(table, consumer),
        table_dir / "consumer" / f"consumer-{consumer}",
        until=latest_snapshot(table_dir),
    )


def session(flink: FlinkSql, warehouse: Path) -> None:
    """A new session on a catalog of its own; it checkpoints (the bounded streaming read needs it)."""
    flink.new_session()
    flink.use_catalog("lake", warehouse)
    flink.exec("SET 'execution.checkpointing.interval' = '300 ms'")


def test_tier_table_batch_and_bounded_streaming_reads_agree(flink, tmp_path):
    warehouse = tmp_path / "wh"
    session(flink, warehouse)
    flink.exec("CREATE DATABASE db")
    con = connect()
    ddl = con.execute("SELECT paimon_tier_ddl('db.acct')").fetchone()[0]
    (created,) = flink.exec(ddl)
    assert created["kind"] == "SUCCESS", created
    ws = writes()
    run_writes(flink, con, "db.acct")
    table_dir = warehouse / "db.db" / "acct"
    want = last_per_id(ws)
    assert len(want) < len(ws), "ids must be written more than once"

    # Flink's batch read: the merged state.
    batch = flink.query("SELECT id, bal FROM db.acct")
    assert sorted(tuple(r) for r in batch) == sorted(("+I", i, b) for i, b in want.items())

    # Flink's bounded streaming read: with changelog-producer = input, every write in commit
    # order; replayed by key it reaches the same state.
    stream = stream_of(flink, table_dir, "db.acct", "tier-check")
    assert stream == [["+I", i, b] for i, b in ws]
    assert replay(stream) == want

    # streamhouse on the table Flink wrote.
    path = str(table_dir)
    assert dict(con.execute("SELECT id, bal FROM paimon_scan(?)", [path]).fetchall()) == want
    assert con.execute("SELECT count(*) FROM paimon_scan(?)", [path]).fetchone()[0] == len(want)
    changelog = con.execute("SELECT snapshot_id, row_kind, id, bal FROM paimon_changelog(?)", [path]).fetchall()
    assert [[k, i, b] for _s, k, i, b in changelog] == stream
    snapshots = [s for s, *_ in changelog]
    assert snapshots == sorted(snapshots) and len(set(snapshots)) == len(ws), "one commit per statement"
    assert replay([[k, i, b] for _s, k, i, b in changelog]) == want


def test_append_only_table_shows_every_version(flink, tmp_path):
    """The negative control: the same writes (the statements paimon_tier_upsert renders for it) into
    a table without a primary key (hand-written: an append table needs a bucket key, and the
    merge engine and changelog producer are primary-key options) are not collapsed."""
    warehouse = tmp_path / "wh"
    session(flink, warehouse)
    flink.exec("CREATE DATABASE db")
    flink.exec("CREATE TABLE db.acct_log (id INT, bal INT) WITH ('bucket' = '1', 'bucket-key' = 'id')")
    con = connect()
    ws = writes()
    run_writes(flink, con, "db.acct_log")
    table_dir = warehouse / "db.db" / "acct_log"
    want = last_per_id(ws)

    stream = stream_of(flink, table_dir, "db.acct_log", "append-check")
    assert stream == [["+I", i, b] for i, b in ws], "the streaming read shows every version"
    assert len(stream) > len(want), "more rows than ids: not the last value per id"
    batch = flink.query("SELECT id, bal FROM db.acct_log")
    assert sorted(tuple(r) for r in batch) == sorted(("+I", i, b) for i, b in ws)

    path = str(table_dir)
    assert sorted(con.execute("SELECT id, bal FROM paimon_scan(?)", [path]).fetchall()) == sorted(ws)
    changelog = con.execute("SELECT row_kind, id, bal FROM paimon_changelog(?)", [path]).fetchall()
    assert [list(r) for r in changelog] == stream
