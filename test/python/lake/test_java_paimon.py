# ruff: noqa: F811 (test functions take the fixture `java` imported from support.java_paimon_tables)
"""Java Paimon (1.3.1, its own Java API) writes the lake property tables and reads them back as a
second oracle (issue 41 item 3).

Seeded random primary-key tables are written by Java Paimon's writer (support/java_paimon.py): merge
engines deduplicate, partial-update (ignore-delete, or remove-record-on-delete), aggregation (sum
with retractions, max, last_non_null_value) and first-row; row kinds +I/+U/-U/-D; sequence.field;
partitions; 1-3 buckets; deletion vectors; changelog producers none, input, lookup and
full-compaction; Parquet, ORC and Avro data files, small target files; BIGINT, INT, DOUBLE,
DECIMAL, BOOLEAN, DATE and STRING columns; a stream writer (commit identifiers) or a batch writer per
commit; Paimon's own compaction (automatic, in the writer before a commit, and dedicated compaction
jobs, minor and full; write-only writers leave level-0 files for them); a column added between
commits; 1-8 commits over overlapping keys. For each table, streamhouse's `paimon_scan` (the latest
snapshot and every snapshot by time travel), `FROM 'paimon:<dir>'`, `serving_build` (tables with the
serving columns) and `paimon_changelog` must equal, row for row:

- the plain-Python oracle: each engine's merge over the rows written, in commit order; for the
  changelog, the rows written (none/input), the lookup producer's before/after images of each
  commit's keys, and the state that replaying the changelog reaches at each compaction point;
- Java Paimon's own reads: its batch read (ReadBuilder) of the latest snapshot and of every
  snapshot, and its bounded streaming read (scan.mode = from-snapshot to the latest) for the
  changelog. Paimon's batch scan skips level-0 files of deletion-vector and first-row tables (the
  README's "Full merged state"); where such a table has level-0 files, Java's read of the latest
  state is its batch read of a copy it fully compacted.

`paimon_changelog` refuses by name the changes written before the added column; from the first
snapshot of the new schema on it must equal Java's streaming read from there.

The writes avoid what Java Paimon itself merges differently depending on which versions one
compaction sees (the generator says where), so one logical oracle holds for every layout. The
oracle is checked against Java Paimon's read first (`harness`): a difference there is the
harness's; a difference of streamhouse's from both is a streamhouse bug, kept as a strict xfail.

The generator (`Case`) and the plain-Python oracle are support/java_paimon_tables.py's; the
differences found, each as the smallest table that shows it, are test_java_paimon_lookup.py's.
"""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import duckdb
import pytest
from conftest import connect
from support.java_paimon import JavaPaimon
from support.java_paimon_tables import (  # noqa: F401 (java: the fixture, used by name)
    ENGINES,
    LOOKUP_RULE,
    SEEDS,
    Case,
    canon,
    from_java,
    java,
    kept,
    merge,
    replay,
    rows_of,
    snapshot_files,
)

pytestmark = pytest.mark.xdist_group("jvm")  # JVM tests: one worker (conftest.py)


# --------------------------------------------------------------------------------------------
# Writing a case with Java Paimon
# --------------------------------------------------------------------------------------------


class Written:
    def __init__(self, case: Case, warehouse: Path):
        self.case = case
        self.warehouse = str(warehouse)
        self.path = str(warehouse / "db.db" / "t")
        self.commits: list[list[tuple[str, dict]]] = []
        self.evolved = False
        # per commit: (the latest snapshot before it, the latest after it); its snapshots are
        # (before, after]: its APPEND snapshot, then a COMPACT one where it compacted
        self.commit_snapshots: list[tuple[int, int]] = []
        # (snapshot, commits so far) after each full compaction (a job's or in a commit), and after
        # every compaction point (each commit of a writer that compacts, each job)
        self.full_compacted: list[tuple[int, int]] = []
        self.compacted_at: list[tuple[int, int]] = []
        self.latest = 0

    def columns(self) -> list[str]:
        return [c for c, _ in self.case.columns(self.evolved)]

    def types(self) -> dict:
        return dict(self.case.columns(True))


def encode(value):
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value) if isinstance(value, decimal.Decimal) else value


def write(java: JavaPaimon, tmp: Path, case: Case) -> Written:
    w = Written(case, tmp / "wh")
    where = {"warehouse": w.warehouse, "table": "t"}
    java.request(
        "create",
        **where,
        fields=[list(c) for c in case.columns(False)],
        primaryKeys=case.primary_keys(),
        partitionKeys=["region"] if case.partitioned else [],
        options=case.options(),
    )
    for step in case.steps():
        if step["op"] == "add_column":
            java.request("add_column", **where, name="note", type="STRING")
            w.evolved = True
        elif step["op"] == "compact":
            got = java.request("compact", **where, full=step["full"])
            w.latest = got["snapshot"]
            w.compacted_at.append((w.latest, len(w.commits)))
            if step["full"]:
                w.full_compacted.append((w.latest, len(w.commits)))
        else:
            cols = w.columns()
            rows = [[kind, *(encode(row.get(c)) for c in cols)] for kind, row in step["rows"]]
            got = java.request(
                "write",
                **where,
                rows=rows,
                writer=case.writer,
                writeOnly=case.write_only,
                compact=step["compact"],
            )
            w.commits.append(step["rows"])
            w.commit_snapshots.append((w.latest, got["snapshot"]))
            w.latest = got["snapshot"]
            if not case.write_only:
                w.compacted_at.append((w.latest, len(w.commits)))
            if step["compact"] == "full":
                w.full_compacted.append((w.latest, len(w.commits)))
    return w


def commits_at(w: Written, snapshot: int) -> int:
    """How many commits the snapshot holds (a commit's snapshots are (before, after])."""
    return sum(1 for before, _after in w.commit_snapshots if before < snapshot)


def java_read(
    java: JavaPaimon, w: Written, tmp: Path, snapshot: int | None = None
) -> tuple[list[str], list[tuple], int]:
    """Java Paimon's batch read: its columns, rows, and the most non-zero levels one bucket holds."""
    where = {"warehouse": w.warehouse, "table": "t"}
    extra = {} if snapshot is None else {"snapshot": snapshot}
    got = java.request("read", **where, **extra)
    skips_level0 = w.case.dv or w.case.engine == "first-row"
    if snapshot is None and skips_level0 and got["level0Files"] > 0:
        got = java.request("read", **where, compactedCopy=str(tmp / "compacted-copy"))
    cols = got["fields"]
    return cols, canon(from_java(r[1:], cols, w.types()) for r in got["rows"]), got["nonZeroLevels"]


# --------------------------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------------------------


def scan_rows(con, sql: str, params=()) -> list[tuple]:
    return canon(con.execute(sql, list(params)).fetchall())


def harness(ok: bool, what: str) -> None:
    """A check of the oracles themselves (Python's against Java Paimon's): `pytest.fail`, never an
    AssertionError, so a strict xfail of a streamhouse difference (raises=AssertionError) cannot
    hide it."""
    if not ok:
        pytest.fail(f"harness: {what}", pytrace=False)


def refused_by_name(case: Case, nonzero_levels: int) -> bool:
    aggregation_lookup = case.engine == "aggregation" and case.producer == "lookup" and not case.dv
    return aggregation_lookup and case.file_format != "parquet" and nonzero_levels >= 2


def expect_refusal(con, case: Case, sql: str, params=()) -> None:
    with pytest.raises(duckdb.Error) as refused:
        con.execute(sql, list(params)).fetchall()
    message = str(refused.value)
    assert LOOKUP_RULE in message, message
    assert "merge-engine aggregation with changelog-producer lookup" in message, message
    assert f"(file format {case.file_format})" in message, message


@pytest.mark.parametrize("seed", SEEDS)
def test_java_paimon_table(java, tmp_path, seed):
    case = Case(seed)
    w = write(java, tmp_path, case)
    cols = w.columns()
    col_list = ", ".join(f'"{c}"' for c in cols)
    key_idx = [cols.index(k) for k in case.primary_keys()]
    want = rows_of(merge(case, w.commits, cols), cols)

    # the oracle agrees with Java Paimon's own read (the harness's check)
    java_cols, java_rows, levels = java_read(java, w, tmp_path)
    harness(java_cols == cols and java_rows == want, f"seed {seed}: Java Paimon's read differs from the Python oracle")

    con = connect()
    path = w.path
    from_sql = f"SELECT {col_list} FROM 'paimon:{path}'"
    last = cols[-1]
    if refused_by_name(case, levels):
        for sql in [f"SELECT {col_list} FROM paimon_scan($1)", "SELECT count(*) FROM paimon_scan($1)"]:
            expect_refusal(con, case, sql, [path])
        expect_refusal(con, case, from_sql)
    else:
        assert scan_rows(con, f"SELECT {col_list} FROM paimon_scan($1)", [path]) == want, f"seed {seed}: paimon_scan"
        assert scan_rows(con, from_sql) == want, f"seed {seed}: FROM 'paimon:...'"
        # a count, and one column that is not the key (the merge is still by key)
        assert con.execute("SELECT count(*) FROM paimon_scan($1)", [path]).fetchone()[0] == len(want)
        got_one = scan_rows(con, f'SELECT "{last}" FROM paimon_scan($1)', [path])
        assert got_one == canon((r[-1],) for r in want), f"seed {seed}: SELECT {last}"

    # every snapshot by time travel: its own schema's columns
    snaps = snapshot_files(path)
    assert max(snaps, default=0) == w.latest
    skips_level0 = case.dv or case.engine == "first-row"
    for s in sorted(snaps):
        got_cols = [
            d[0] for d in con.execute("DESCRIBE SELECT * FROM paimon_scan($1, snapshot := $2)", [path, s]).fetchall()
        ]
        want_s = rows_of(merge(case, w.commits[: commits_at(w, s)], got_cols), got_cols)
        sel = ", ".join(f'"{c}"' for c in got_cols)
        levels_s = 0
        if not skips_level0:
            jc, jr, levels_s = java_read(java, w, tmp_path, snapshot=s)
            harness(jc == got_cols and jr == want_s, f"seed {seed}: Java Paimon's read of snapshot {s}")
        snapshot_sql = f"SELECT {sel} FROM paimon_scan($1, snapshot := $2)"
        if refused_by_name(case, levels_s):
            expect_refusal(con, case, snapshot_sql, [path, s])
        else:
            assert scan_rows(con, snapshot_sql, [path, s]) == want_s, f"seed {seed}: paimon_scan(snapshot := {s})"

    check_changelog(java, con, w, cols, key_idx)
    if case.serving:
        check_serving(con, w, want, cols)


def java_changelog(java: JavaPaimon, w: Written, start: int) -> list[tuple]:
    """Java Paimon's bounded streaming read from snapshot `start`: (snapshot, row kind, *values)."""
    cols = w.columns()
    rows = java.request("changelog", warehouse=w.warehouse, table="t", **{"from": start})["rows"]
    return [(r[0], r[1], *from_java(r[2:], cols, w.types())) for r in rows]


def check_changelog(java: JavaPaimon, con, w: Written, cols: list[str], key_idx: list[int]) -> None:
    case, seed = w.case, w.case.seed
    col_list = ", ".join(f'"{c}"' for c in cols)
    sql = f"SELECT snapshot_id, row_kind, {col_list} FROM paimon_changelog($1, from_snapshot := $2)"
    start = 1
    schemas = {s: d["schemaId"] for s, d in snapshot_files(w.path).items()}
    old_schema = sorted({r[0] for r in java_changelog(java, w, 1) if schemas[r[0]] != schemas[w.latest]})
    if old_schema:
        # Refused by name: changes written under the schema before the added column (Java Paimon
        # reads them, NULL in the new column). From the first snapshot written under the new
        # schema on, the changes are read.
        with pytest.raises(duckdb.Error) as refused:
            con.execute(sql, [w.path, 1]).fetchall()
        message = str(refused.value)
        assert (
            f"reading the changes of snapshot {old_schema[0]}, written with schema 0 while the table now has schema 1 "
            in message
        )
        assert (
            "(reading changes across a schema change such as an added, dropped or renamed column "
            "is not supported)" in message
        )
        start = min(s for s, schema in schemas.items() if schema == schemas[w.latest])
    got = con.execute(sql, [w.path, start]).fetchall()
    assert [r[0] for r in got] == sorted(r[0] for r in got), f"seed {seed}: changes not in snapshot order"
    assert all(r[0] >= start for r in got)
    java_changes = java_changelog(java, w, start)
    assert canon(got) == canon(java_changes), f"seed {seed}: paimon_changelog vs Java Paimon's streaming read"

    by_snap: dict = {}
    for s, *change in got:
        by_snap.setdefault(s, []).append(tuple(change))

    def upto(snapshot: int) -> list[tuple]:
        return [c for s in sorted(by_snap) if s <= snapshot for c in by_snap[s]]

    def state_rows(n_commits: int) -> list[tuple]:
        return rows_of(merge(case, w.commits[:n_commits], cols), cols)

    # the commits whose changes were read, and whether the replay starts at the table's start
    read = [i for i, (before, _after) in enumerate(w.commit_snapshots) if before + 1 >= start]
    from_start = start == 1
    if case.producer in ("none", "input"):
        # each commit's changes are its rows as written (minus what ignore-delete drops)
        for i in read:
            before, after = w.commit_snapshots[i]
            rows = [(kind, *(row.get(c) for c in cols)) for kind, row in w.commits[i] if kept(case, kind)]
            if not rows:
                continue
            assert after > before, f"seed {seed}: commit {i} made no snapshot"
            assert canon(by_snap.get(before + 1, [])) == canon(rows), f"seed {seed}: changes of commit {i}"
        if case.engine == "deduplicate" and not case.sequence_field and from_start:
            for i, (_before, after) in enumerate(w.commit_snapshots):
                assert canon(replay(upto(after), key_idx).values()) == state_rows(i + 1), f"seed {seed}: replay {i}"
    elif case.producer == "lookup":
        points = w.compacted_at
        if not case.write_only and not case.dv:
            # each commit's level-0 files are compacted in it: its keys' before/after images
            # (with deletion vectors Java Paimon's lookup of the before image can find a row its
            # deletion vector already removed: it then emits a second -D of a deleted key)
            for i in read:
                before, after = w.commit_snapshots[i]
                old, new = merge(case, w.commits[:i], cols), merge(case, w.commits[: i + 1], cols)
                keys = case.primary_keys()
                kinds = {tuple(row[c] for c in keys): kind for kind, row in w.commits[i] if kept(case, kind)}
                expect = []
                for key, kind in kinds.items():
                    b, a = old.get(key), new.get(key)
                    b = None if b is None else tuple(b[c] for c in cols)
                    a = None if a is None else tuple(a[c] for c in cols)
                    if case.engine == "first-row":
                        if b is None:  # a new key's first row, with the row kind it was written with
                            expect.append((kind, *a))
                    elif b is None and a is not None:
                        expect.append(("+I", *a))
                    elif b is not None and a is None:
                        expect.append(("-D", *b))
                    elif b is not None:
                        expect += [("-U", *b), ("+U", *a)]
                changes = [c for s in range(before + 1, after + 1) for c in by_snap.get(s, [])]
                assert canon(changes) == canon(expect), f"seed {seed}: lookup changelog of commit {i}"
        for snapshot, n in points if from_start else []:
            if not case.write_only or (snapshot, n) in w.full_compacted:
                assert canon(replay(upto(snapshot), key_idx).values()) == state_rows(n), (
                    f"seed {seed}: replay to {snapshot}"
                )
    else:  # full-compaction: the state at every full compaction
        for snapshot, n in w.full_compacted if from_start else []:
            assert canon(replay(upto(snapshot), key_idx).values()) == state_rows(n), (
                f"seed {seed}: replay to {snapshot}"
            )


def check_serving(con, w: Written, want: list[tuple], cols: list[str]) -> None:
    seed = w.case.seed
    serving = ["order_id", "company", "order_day", "revenue"]
    idx = [cols.index(c) for c in serving]
    fact = canon(tuple(r[i] for i in idx) for r in want)
    fct_rows, mart_rows = con.execute(
        "SELECT fct_rows, mart_rows FROM serving_build($1)", [f"paimon:{w.path}"]
    ).fetchone()
    assert fct_rows == len(fact), f"seed {seed}: serving_build fct_rows"
    assert canon(con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders").fetchall()) == fact
    mart: dict = {}
    for _oid, company, day, revenue in fact:
        mart[(company, day)] = mart.get((company, day), 0) + revenue
    got_mart = {
        (c, d): int(v) for c, d, v in con.execute("SELECT company, order_day, revenue FROM mart_daily").fetchall()
    }
    assert got_mart == mart, f"seed {seed}: mart_daily"
    assert mart_rows == len(mart)


def test_the_seeds_cover_every_engine_and_feature():
    cases = [Case(s) for s in SEEDS]
    assert {c.engine for c in cases} == set(ENGINES)
    assert {c.producer for c in cases} == {"none", "input", "lookup", "full-compaction"}
    assert {(c.engine, c.producer) for c in cases} >= {(e, "lookup") for e in ENGINES}
    assert any(c.dv and c.write_only for c in cases) and any(c.dv and not c.write_only for c in cases)
    assert any(c.sequence_field for c in cases) and any(c.partitioned for c in cases)
    assert any(c.pu_remove for c in cases) and any(c.engine == "partial-update" and not c.pu_remove for c in cases)
    assert any(c.evolve_at is not None for c in cases)
    assert {c.writer for c in cases} == {"stream", "batch"}
    assert {c.file_format for c in cases} == {"parquet", "orc", "avro"} and any(c.small_files for c in cases)
    assert {c.engine for c in cases if c.serving} == set(ENGINES)
    assert any(c.commits == 1 for c in cases) and any(c.commits >= 6 for c in cases)
    steps = [s for c in cases for s in c.steps()]
    assert {(s["op"], s.get("full")) for s in steps if s["op"] == "compact"} == {("compact", True), ("compact", False)}
    assert {s["compact"] for s in steps if s["op"] == "commit"} == {None, "minor", "full"}
