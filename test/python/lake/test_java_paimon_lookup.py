# ruff: noqa: F811 (test functions take the fixture `java` imported from support.java_paimon_tables)
"""Java Paimon (1.3.1, its own Java API) and its lookup rule (issue 41 item 3): the differences the
random tables of test_java_paimon.py found, each as the smallest table that shows it, written by
Java Paimon's stream writer (support/java_paimon.py). Java Paimon reads a lookup table
(changelog-producer = lookup, no deletion vectors) taking a key from level 0 and the lowest
non-zero level holding it, so a merged row its lookup compaction wrote into level 4 beside level
5's older version is read once:

- an aggregation table (sum): order 1's upper-level value is not added again — by paimon_scan (the
  latest snapshot, a projection and its snapshots by time travel), `FROM 'paimon:<dir>'`,
  serving_build, and serving_refresh and serving_follow after new commits;
- a partial-update table that removes a row on delete: the row written after the delete is read as
  written, not merged onto level 5's old row.

Where streamhouse cannot read a bucket so (paimon-rust's reader, which merges every level; the
native reader on Avro files) it is refused by name, with the rule's wording and what to use
instead, and paimon_read_plan says so too.

Oracles: Java Paimon's own batch read of the same table and its layout (the levels a bucket holds,
the snapshot files' commit kinds), and the values written, summed by hand — never the extension.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest
from conftest import connect
from support.java_paimon import JavaPaimon
from support.java_paimon_tables import (  # noqa: F401 (java: the fixture, used by name)
    DAYS,
    LOOKUP_RULE,
    SERVING_FIELDS,
    canon,
    from_java,
    java,
    snapshot_files,
)

pytestmark = pytest.mark.xdist_group("jvm")  # JVM tests: one worker (conftest.py)


def lookup_table(java: JavaPaimon, warehouse: str, options: dict) -> dict:
    """Creates a serving-shaped table of one bucket with the lookup changelog producer and
    `options`; returns the request fields naming it."""
    where = {"warehouse": warehouse, "table": "t"}
    java.request(
        "create",
        **where,
        fields=[list(f) for f in SERVING_FIELDS.items()],
        primaryKeys=["order_id"],
        partitionKeys=[],
        options={"bucket": "1", "changelog-producer": "lookup", **options},
    )
    return where


def agg_lookup_table(java: JavaPaimon, tmp: Path) -> tuple[str, list[tuple]]:
    """A serving-shaped aggregation table with the lookup changelog producer, written by Java
    Paimon's stream writer: orders 1-4 with revenue 10, then 5 more revenue for order 1. The second
    commit's lookup compaction writes order 1's merged row (15) into level 4 beside the level-5 file
    holding 10 (its upper-level value)."""
    warehouse = str(tmp / "wh")
    where = lookup_table(java, warehouse, {"merge-engine": "aggregation", "fields.revenue.aggregate-function": "sum"})
    day = DAYS[0].isoformat()
    java.request("write", **where, rows=[["+I", k, "acme", day, 10] for k in (1, 2, 3, 4)], writer="stream")
    java.request("write", **where, rows=[["+I", 1, "acme", day, 5]], writer="stream")
    want = [(1, "acme", DAYS[0], 15), (2, "acme", DAYS[0], 10), (3, "acme", DAYS[0], 10), (4, "acme", DAYS[0], 10)]
    return f"{warehouse}/db.db/t", want


def test_aggregation_lookup_table_as_java_paimon_writes_and_reads_it(java, tmp_path):
    """The table of the test below, as Java Paimon has it: its read, and the layout (the latest
    snapshot's one bucket holds two files, order 1 in both, at levels 5 and 4)."""
    path, want = agg_lookup_table(java, tmp_path)
    got = java.request("read", warehouse=str(tmp_path / "wh"), table="t")
    assert canon(from_java(r[1:], got["fields"], SERVING_FIELDS) for r in got["rows"]) == want
    assert (got["level0Files"], got["nonZeroLevels"]) == (0, 2)
    kinds = [(d["commitKind"], d["deltaRecordCount"]) for _, d in sorted(snapshot_files(path).items())]
    assert kinds == [("APPEND", 4), ("COMPACT", 0), ("APPEND", 1), ("COMPACT", 0)], kinds
    plan = connect().execute("SELECT bucket, files, reader FROM paimon_read_plan($1)", [path]).fetchall()
    assert plan == [(0, 2, "native merge")]


def test_aggregation_lookup_reads_the_upper_level_once(java, tmp_path):
    path, want = agg_lookup_table(java, tmp_path)
    con = connect()
    scan = canon(con.execute("SELECT * FROM paimon_scan($1)", [path]).fetchall())
    named = canon(con.execute(f"SELECT * FROM 'paimon:{path}'").fetchall())
    revenue = canon(con.execute("SELECT revenue FROM paimon_scan($1)", [path]).fetchall())
    con.execute("SELECT * FROM serving_build($1)", [f"paimon:{path}"]).fetchall()
    fact = canon(con.execute("SELECT * FROM fct_orders").fetchall())
    mart = con.execute("SELECT company, order_day, revenue FROM mart_daily").fetchall()
    # before the fix: order 1 had revenue 25 in all of them (10 + 15)
    assert (scan, named, fact, mart) == (want, want, want, [("acme", DAYS[0], 45)])
    assert revenue == canon((r[3],) for r in want)
    # every snapshot, by time travel: the APPEND one holds order 1's +5 in level 0 over level 5
    for snapshot, expect in [(1, 10), (3, 15), (4, 15)]:
        got = con.execute("SELECT revenue FROM paimon_scan($1, snapshot := $2) WHERE order_id = 1", [path, snapshot])
        assert got.fetchall() == [(expect,)], snapshot
    # paimon-rust's reader merges every level: refused by name, with what to use instead
    with pytest.raises(duckdb.Error) as refused:
        con.execute("SELECT * FROM paimon_scan($1, reader := 'paimon-rust')", [path]).fetchall()
    message = str(refused.value)
    assert LOOKUP_RULE in message and "merge-engine aggregation with changelog-producer lookup" in message, message
    assert "bucket 0 holds levels [4, 5]" in message and "reader := 'native'" in message, message


def test_aggregation_lookup_table_refreshes_to_java_paimons_read(java, tmp_path):
    """A layer built from the table, then two new commits (order 1 again, a new order 5; order 1
    once more) applied by serving_refresh and by serving_follow: the layer equals Java Paimon's
    read after them. (The first commit's compaction leaves one level; the second's writes order 1's
    merged value into level 4 beside level 5 again.)"""
    path, _ = agg_lookup_table(java, tmp_path)
    where = {"warehouse": str(tmp_path / "wh"), "table": "t"}
    source = f"paimon:{path}"
    cons = {name: connect() for name in ("refresh", "follow")}
    for con in cons.values():
        con.execute("SELECT * FROM serving_build($1)", [source]).fetchall()
    day = DAYS[0].isoformat()
    java.request("write", **where, rows=[["+I", 1, "acme", day, 7], ["+I", 5, "zeta", day, 3]], writer="stream")
    java.request("write", **where, rows=[["+I", 1, "acme", day, 1]], writer="stream")
    got = java.request("read", **where)
    want = canon(from_java(r[1:], got["fields"], SERVING_FIELDS) for r in got["rows"])
    assert {r[0]: r[3] for r in want}[1] == 23  # 10 + 5 + 7 + 1, Java's own read
    assert got["nonZeroLevels"] == 2
    cons["refresh"].execute("SELECT * FROM serving_refresh($1)", [source]).fetchall()
    follow = cons["follow"]
    follow.execute("SELECT * FROM serving_follow($1, every := INTERVAL '50 ms')", [source]).fetchall()
    latest = max(snapshot_files(path))
    deadline = time.monotonic() + 30
    while follow.execute("SELECT lake_snapshot FROM serving_status()").fetchone()[0] != latest:
        assert time.monotonic() < deadline, "serving_follow did not apply the new snapshots"
        time.sleep(0.05)
    follow.execute("SELECT * FROM serving_unfollow()").fetchall()
    for name, con in cons.items():
        assert canon(con.execute("SELECT * FROM fct_orders").fetchall()) == want, name
        mart = con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY company").fetchall()
        assert mart == [("acme", DAYS[0], 53), ("zeta", DAYS[0], 3)], name


def pu_remove_lookup_table(java: JavaPaimon, tmp: Path, file_format: str) -> str:
    """A partial-update table that removes a row on delete, with the lookup changelog producer:
    order 1 is written, deleted, then written again without a company. Java Paimon's lookup
    compaction merges the new row onto the delete (so without the old company) into level 4,
    beside level 5's old row."""
    warehouse = str(tmp / f"wh-{file_format}")
    options = {"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"}
    where = lookup_table(java, warehouse, {**options, "file.format": file_format})
    day = DAYS[0].isoformat()
    # many orders in level 5: the later small files stay above it (no size-amplification full compaction)
    java.request("write", **where, rows=[["+I", k, "acme", day, 10] for k in range(1, 301)], writer="stream")
    java.request("write", **where, rows=[["-D", 1, "acme", day, 10]], writer="stream")
    java.request("write", **where, rows=[["+I", 1, None, DAYS[1].isoformat(), 4]], writer="stream")
    return f"{warehouse}/db.db/t"


def test_partial_update_removing_on_delete_with_lookup_reads_like_java_paimon(java, tmp_path):
    path = pu_remove_lookup_table(java, tmp_path, "parquet")
    got = java.request("read", warehouse=str(tmp_path / "wh-parquet"), table="t")
    want = canon(from_java(r[1:], got["fields"], SERVING_FIELDS) for r in got["rows"])
    # Java Paimon's own read: order 1 as written after its delete (no company), level 5's old row unread
    assert want == canon([(1, None, DAYS[1], 4)] + [(k, "acme", DAYS[0], 10) for k in range(2, 301)])
    assert got["nonZeroLevels"] == 2
    con = connect()
    assert canon(con.execute("SELECT * FROM paimon_scan($1)", [path]).fetchall()) == want
    assert canon(con.execute(f"SELECT * FROM 'paimon:{path}'").fetchall()) == want
    for reader, why in [("paimon-rust", "reader := 'native'"), ("native", "(file format avro)")]:
        target = path if reader == "paimon-rust" else pu_remove_lookup_table(java, tmp_path, "avro")
        with pytest.raises(duckdb.Error) as refused:
            con.execute("SELECT * FROM paimon_scan($1, reader := $2)", [target, reader]).fetchall()
        message = str(refused.value)
        assert LOOKUP_RULE in message and "merge-engine partial-update with changelog-producer lookup" in message
        assert why in message, message
        if reader == "native":  # the plan says so too
            plan = con.execute("SELECT reader, reason FROM paimon_read_plan($1)", [target]).fetchall()
            assert plan[0][0] == "refused" and LOOKUP_RULE in plan[0][1], plan
