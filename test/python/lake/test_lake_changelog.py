"""paimon_changelog on tables whose changes carry every row kind (+I, -U, +U, -D), with and without
a changelog producer, from every snapshot: compared with the rows written and with pypaimon's own
streaming read (the second, independent reader).

README: `paimon_changelog(path [, from_snapshot])` is "every change from the first snapshot (or
`from_snapshot`) to the latest, in commit order, with its row kind (`+I`, `-U`, `+U`, `-D`): the
table's changelog files, or its delta when it produces none".
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from conftest import connect
from support.lake_util import Warehouse, apply_changelog, canon

KINDS = ("+I", "-U", "+U", "-D")
SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32()), ("op", pa.string())])


@pytest.fixture
def con():
    c = connect()
    yield c
    c.close()


def random_kinds(rng: random.Random, commits: int, keys: int) -> list[list[dict]]:
    """Commits of row-kinded writes, one write per key per commit (pypaimon merges writes of one
    key inside a commit): a live key is updated (+U), retracted (-U) or deleted (-D); a dead or
    new key is inserted (+I). Every kind appears."""
    live: dict[int, int] = {}
    out = []
    for _ in range(commits):
        rows = []
        for k in sorted(rng.sample(range(keys), keys // 2)):
            op = rng.choice(["+U", "+U", "-U", "-D"]) if k in live else "+I"
            bal = live[k] if op in ("-U", "-D") else rng.randint(-1000, 1000)
            rows.append({"id": k, "bal": bal, "op": op})
            if op in ("+I", "+U"):
                live[k] = bal
            else:
                live.pop(k)
        out.append(rows)
    assert {r["op"] for rows in out for r in rows} == set(KINDS), "harness: not every row kind was written"
    return out


def pypaimon_stream(table, from_snapshot: int, latest: int) -> list[tuple]:
    """pypaimon's streaming read of snapshots from_snapshot..latest, one plan per snapshot (its
    changelog files, or its delta for a table without a changelog producer), with row kinds."""
    sb = table.new_stream_read_builder().with_include_row_kind(True)
    scan = sb.new_streaming_scan()
    scan._prefetch_enabled = False  # one snapshot at a time, in order
    scan._diff_threshold = 1 << 30  # never a merged catch-up: each snapshot's own changes
    scan.next_snapshot_id = from_snapshot
    read = sb.new_read()
    out = []
    for plan in scan.stream_sync():
        snapshot = scan.next_snapshot_id - 1
        for r in read.to_arrow(plan.splits()).to_pylist():
            out.append((snapshot, r["_row_kind"], r["id"], r["bal"], r["op"]))
        if snapshot >= latest:
            break
    return out


def changelog(con, path: str, from_snapshot: int | None = None) -> list[tuple]:
    extra = "" if from_snapshot is None else f", from_snapshot := {int(from_snapshot)}"
    return con.execute(f"SELECT snapshot_id, row_kind, id, bal, op FROM paimon_changelog($1{extra})", [path]).fetchall()


def by_snapshot(rows: list[tuple]) -> list[tuple]:
    """Order inside one snapshot is not part of the contract; the snapshot order is."""
    return sorted(rows, key=lambda r: (r[0], r[2], r[1]))


@pytest.mark.parametrize("producer,buckets", [("input", "1"), ("input", "2"), ("none", "1"), ("none", "2")])
def test_changelog_row_kinds_and_from_snapshot_content(tmp_path, con, producer, buckets):
    wh = Warehouse(tmp_path / "wh")
    options = {"bucket": buckets, "merge-engine": "deduplicate", "rowkind.field": "op"}
    if producer != "none":
        options["changelog-producer"] = producer
    t = wh.create("kinds", SCHEMA, ["id"], options)
    commits = random_kinds(random.Random(int(buckets) * 7 + len(producer)), commits=6, keys=16)
    for rows in commits:
        t.commit(rows)
    path = wh.path("kinds")
    latest = len(commits)

    snaps = con.execute("SELECT snapshot_id, changelog_records FROM paimon_snapshots($1) ORDER BY 1", [path]).fetchall()
    assert [s[0] for s in snaps] == list(range(1, latest + 1))
    if producer == "none":
        # no changelog files at all: what paimon_changelog returns can only be the delta
        assert all(s[1] is None for s in snaps), snaps
    else:
        assert all(s[1] == len(rows) for s, rows in zip(snaps, commits, strict=True)), snaps

    # oracle 1: the rows as written, each with its snapshot
    written = [(n, r["op"], r["id"], r["bal"], r["op"]) for n, rows in enumerate(commits, 1) for r in rows]
    # oracle 2: pypaimon's own streaming read
    stream = pypaimon_stream(t.table, 1, latest)
    assert by_snapshot(stream) == by_snapshot(written), "harness: pypaimon does not stream what was written"

    got = changelog(con, path)
    assert [r[0] for r in got] == sorted(r[0] for r in got), "changes must come in commit order"
    assert {r[1] for r in got} == set(KINDS)
    assert by_snapshot(got) == by_snapshot(written)

    # from_snapshot: exactly the changes of that snapshot and the later ones, not just their count
    for start in range(1, latest + 1):
        want = [r for r in written if r[0] >= start]
        got = changelog(con, path, start)
        assert by_snapshot(got) == by_snapshot(want), f"from_snapshot := {start}"
        assert by_snapshot(got) == by_snapshot(pypaimon_stream(t.table, start, latest)), f"from_snapshot := {start}"

    # replayed in order, the stream is the merged state (batch read by pypaimon and by paimon_scan)
    replayed = apply_changelog([r[1:4] for r in changelog(con, path)], key_index=0)
    batch = canon(t.read(), ["id", "bal"])
    assert replayed == batch
    assert sorted(con.execute("SELECT id, bal FROM paimon_scan($1)", [path]).fetchall()) == batch


def test_changelog_of_a_table_without_changelog_is_its_delta_not_its_state(tmp_path, con):
    """A table without a changelog producer: each snapshot's changes are its delta as written
    (a delete is a -D row carrying the deleted values), never the merged state of the snapshot."""
    wh = Warehouse(tmp_path / "wh")
    t = wh.create("delta", SCHEMA, ["id"], {"bucket": "1", "merge-engine": "deduplicate", "rowkind.field": "op"})
    t.commit([{"id": 1, "bal": 10, "op": "+I"}, {"id": 2, "bal": 20, "op": "+I"}, {"id": 3, "bal": 30, "op": "+I"}])
    t.commit([{"id": 2, "bal": 20, "op": "-D"}])
    t.commit([{"id": 1, "bal": 10, "op": "-U"}, {"id": 4, "bal": 40, "op": "+I"}])
    t.commit([{"id": 1, "bal": 11, "op": "+U"}])
    path = wh.path("delta")
    assert con.execute("SELECT count(changelog_records) FROM paimon_snapshots($1)", [path]).fetchone()[0] == 0
    assert by_snapshot(changelog(con, path)) == [
        (1, "+I", 1, 10, "+I"),
        (1, "+I", 2, 20, "+I"),
        (1, "+I", 3, 30, "+I"),
        (2, "-D", 2, 20, "-D"),
        (3, "-U", 1, 10, "-U"),
        (3, "+I", 4, 40, "+I"),
        (4, "+U", 1, 11, "+U"),
    ]
    assert changelog(con, path, 4) == [(4, "+U", 1, 11, "+U")]
    assert by_snapshot(changelog(con, path, 2)) == by_snapshot(pypaimon_stream(t.table, 2, 4))
    assert sorted(con.execute("SELECT id, bal FROM paimon_scan($1)", [path]).fetchall()) == [(1, 11), (3, 30), (4, 40)]
