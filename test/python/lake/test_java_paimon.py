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
"""

from __future__ import annotations

import datetime
import decimal
import json
import random
import time
from pathlib import Path

import duckdb
import pytest
from conftest import connect
from support.java_paimon import JavaPaimon

pytestmark = pytest.mark.xdist_group("jvm")  # JVM tests: one worker (conftest.py)

SEEDS = list(range(28))
ENGINES = ["deduplicate", "partial-update", "aggregation", "first-row"]
COMPANIES = ["acme", "O'Reilly", "東京商事", "Café Zürich", "zeta"]
DAYS = [datetime.date(2026, 11, 1) + datetime.timedelta(days=i) for i in range(5)]
# The serving columns (serving_build reads them) and the other tables' columns, in Paimon SQL types.
SERVING_FIELDS = {"order_id": "BIGINT NOT NULL", "company": "STRING", "order_day": "DATE", "revenue": "BIGINT"}
GENERIC_FIELDS = {
    "id": "BIGINT NOT NULL",
    "name": "STRING",
    "qty": "BIGINT",
    "price": "DOUBLE",
    "day": "DATE",
    "ts": "BIGINT",
    "amount": "DECIMAL(12, 2)",
    "flag": "BOOLEAN",
    "small": "INT",
}


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    with JavaPaimon(tmp_path_factory.mktemp("java-paimon")) as j:
        yield j


# --------------------------------------------------------------------------------------------
# The random tables
# --------------------------------------------------------------------------------------------


class Case:
    """One random table: its configuration and the steps that write it (all decided by the seed)."""

    def __init__(self, seed: int):
        r = random.Random(seed * 7919 + 41)
        self.seed = seed
        self.engine = ENGINES[seed % len(ENGINES)]
        self.serving = seed % 3 == 1  # the serving columns: serving_build reads it
        self.partitioned = r.random() < 0.4
        self.buckets = r.choice([1, 2, 3])
        self.dv = self.engine != "first-row" and r.random() < 0.35
        producers = ["none", "lookup"] if self.engine == "first-row" else ["none", "input", "lookup", "full-compaction"]
        if self.dv:
            producers.remove("full-compaction")  # Paimon: DV only with none/input/lookup
        self.producer = producers[(seed // len(ENGINES)) % len(producers)]
        self.sequence_field = self.engine == "deduplicate" and not self.serving and r.random() < 0.4
        # deduplicate takes retractions always; the others through ignore-delete (partial-update,
        # first-row) or by retracting (aggregation: sum subtracts, the rest ignore-retract)
        self.retracts = self.engine == "deduplicate" or r.random() < 0.6
        # partial-update takes -D as "remove the row" instead (partial-update.remove-record-on-delete)
        self.pu_remove = self.engine == "partial-update" and self.retracts and (seed // len(ENGINES)) % 2 == 1
        self.writer = r.choice(["stream", "batch"])
        self.write_only = r.random() < (0.5 if self.dv else 0.3)
        self.trigger = r.choice([None, 2, 3])  # num-sorted-run.compaction-trigger
        self.commits = r.randint(1, 8)
        self.keys = r.randint(8, 120)
        self.evolve_at = r.randint(1, self.commits - 1) if self.commits > 1 and seed % 5 == 2 else None
        # data files: Parquet mostly, ORC and Avro too; small target files: a sorted run of many files
        self.file_format = r.choice(["parquet", "parquet", "parquet", "orc", "avro"])
        self.small_files = r.random() < 0.25
        self.r = r

    # --- schema

    @property
    def key_col(self) -> str:
        return "order_id" if self.serving else "id"

    def columns(self, evolved: bool) -> list[tuple[str, str]]:
        cols = list((SERVING_FIELDS if self.serving else GENERIC_FIELDS).items())
        if self.partitioned:
            cols.insert(1, ("region", "STRING NOT NULL"))
        if evolved:
            cols.append(("note", "STRING"))
        return cols

    def primary_keys(self) -> list[str]:
        return [self.key_col, "region"] if self.partitioned else [self.key_col]

    def options(self) -> dict:
        o = {"bucket": str(self.buckets), "merge-engine": self.engine}
        if self.producer != "none":
            o["changelog-producer"] = self.producer
        if self.dv:
            o["deletion-vectors.enabled"] = "true"
        if self.sequence_field:
            o["sequence.field"] = "ts"
        if self.pu_remove:
            o["partial-update.remove-record-on-delete"] = "true"
        elif self.retracts and self.engine in ("partial-update", "first-row"):
            o["ignore-delete"] = "true"
        if self.trigger is not None:
            o["num-sorted-run.compaction-trigger"] = str(self.trigger)
        if self.file_format != "parquet":
            o["file.format"] = self.file_format
        if self.small_files:
            o["target-file-size"] = "2 kb"
        if self.engine == "aggregation":
            # sum (a retraction subtracts), max; the rest last_non_null_value; all but the sum
            # ignore retractions (their retraction depends on which versions one compaction merges)
            summed = "revenue" if self.serving else "qty"
            o[f"fields.{summed}.aggregate-function"] = "sum"
            if not self.serving:
                o["fields.price.aggregate-function"] = "max"
            for c, _ in self.columns(False):
                if c != summed and c not in self.primary_keys():
                    o[f"fields.{c}.ignore-retract"] = "true"
        return o

    # --- rows

    def value_row(self, k: int, commit: int, evolved: bool, partial: bool) -> dict:
        r = self.r

        def maybe(v):
            return None if partial and r.random() < 0.35 else v

        if self.serving:
            row = {
                "order_id": k,
                "company": maybe(r.choice(COMPANIES)),
                "order_day": maybe(r.choice(DAYS)),
                "revenue": maybe(r.randint(-50, 2000)),
            }
        else:
            row = {
                "id": k,
                "name": maybe(r.choice(["", "twelve bytes", f"a name longer than a view holds {k}", f"c{commit}"])),
                "qty": maybe(r.randint(-5, 100)),
                "price": maybe(round(r.uniform(0, 50), 2)),
                "day": maybe(r.choice(DAYS)),
                "ts": r.randrange(0, 12),
                "amount": maybe(decimal.Decimal(r.randrange(-(10**8), 10**8)).scaleb(-2)),
                "flag": maybe(r.random() < 0.5),
                "small": maybe(r.randint(-(2**31), 2**31 - 1)),
            }
        if self.partitioned:
            row["region"] = ["eu", "us"][k % 2]
        if evolved:
            row["note"] = maybe(f"n{commit}")
        return row

    def commit_rows(self, commit: int, evolved: bool, live: set, dead: set) -> list[tuple[str, dict]]:
        """One version per key (a writer folds a key's versions inside a commit before its files)."""
        r = self.r
        out = []
        for k in sorted(r.sample(range(self.keys), r.randint(1, self.keys))):
            if (self.sequence_field or self.pu_remove) and k in dead:
                # sequence.field: a full compaction drops the winning delete, a later lower `ts`
                # would win; remove-record-on-delete: a row written after the delete is merged
                # onto the deleted row's fields when they are in one compaction, not otherwise
                continue
            partial = self.engine in ("partial-update", "aggregation") and k in live
            if self.serving and self.engine == "aggregation":
                partial = partial and r.random() < 0.5
            row = self.value_row(k, commit, evolved, partial)
            kind = r.choice(["+I", "+U"])
            # aggregation: a retraction only of a key written before (Paimon reads a key whose one
            # version is a retraction as absent, but merges it with later versions into a row)
            retract_ok = self.retracts and (k in live or not (self.serving or self.engine == "aggregation"))
            if self.pu_remove:
                retract_ok = k in live  # -U would be ignored, or a delete once compacted alone
            if retract_ok and r.random() < 0.25:
                kind = "-D" if self.pu_remove else r.choice(["-U", "-D"])
                if self.engine == "aggregation" and evolved:
                    row["note"] = None  # last_non_null_value's retraction depends on compaction order
            out.append((kind, row))
            if kind in ("+I", "+U"):
                live.add(k)
            elif self.engine == "deduplicate" or self.pu_remove:
                live.discard(k)
                dead.add(k)
        return out

    def steps(self) -> list[dict]:
        """commit / compact / add_column steps, in order."""
        r = self.r
        out, live, dead, evolved = [], set(), set(), False
        for c in range(self.commits):
            if self.evolve_at == c:
                out.append({"op": "add_column"})
                evolved = True
            step = {"op": "commit", "rows": self.commit_rows(c, evolved, live, dead), "compact": None}
            if not self.write_only and r.random() < 0.25:
                step["compact"] = r.choice(["minor", "full"])
            out.append(step)
            if self.write_only and r.random() < 0.4:
                out.append({"op": "compact", "full": r.random() < 0.5})
        if self.write_only and r.random() < 0.6:
            out.append({"op": "compact", "full": True})
        return out


# --------------------------------------------------------------------------------------------
# The plain-Python oracle
# --------------------------------------------------------------------------------------------


def kept(case: Case, kind: str) -> bool:
    """Whether Java's writer keeps a row: ignore-delete drops retractions before they are written."""
    ignore_delete = case.retracts and case.engine in ("partial-update", "first-row") and not case.pu_remove
    return not (kind in ("-U", "-D") and ignore_delete)


def merge(case: Case, commits: list[list[tuple[str, dict]]], columns: list[str]) -> dict:
    """key -> merged row (dict over `columns`) after `commits`, by each engine's rule."""
    state: dict = {}
    order = 0
    seq_rank: dict = {}
    key_cols = case.primary_keys()
    for rows in commits:
        for kind, row in rows:
            order += 1
            if not kept(case, kind):
                continue
            key = tuple(row[c] for c in key_cols)
            full = {c: row.get(c) for c in columns}
            add = kind in ("+I", "+U")
            if case.engine == "deduplicate":
                rank = (row["ts"], order) if case.sequence_field else (order,)
                if key not in seq_rank or rank >= seq_rank[key]:
                    seq_rank[key] = rank
                    if add:
                        state[key] = full
                    else:
                        state.pop(key, None)
            elif case.engine == "first-row":
                state.setdefault(key, full)
            elif case.engine == "partial-update":
                if not add:  # remove-record-on-delete (ignore-delete dropped it at the writer)
                    state.pop(key, None)
                    continue
                cur = state.setdefault(key, dict.fromkeys(columns))
                for c, v in full.items():
                    if v is not None:
                        cur[c] = v
            else:  # aggregation: sum (retracted: subtracted), max, the rest last_non_null_value
                cur = state.get(key)
                if cur is None:
                    cur = state[key] = dict.fromkeys(columns)
                    for c in key_cols:
                        cur[c] = full[c]
                summed = "revenue" if case.serving else "qty"
                for c, v in full.items():
                    if c in key_cols or v is None:
                        continue
                    if c == summed:
                        v = v if add else -v
                        cur[c] = v if cur[c] is None else cur[c] + v
                    elif not add:
                        continue  # ignore-retract (note: retracted rows carry no note)
                    elif c == "price":
                        cur[c] = v if cur[c] is None else max(cur[c], v)
                    else:
                        cur[c] = v
    return state


def rows_of(state: dict, columns: list[str]) -> list[tuple]:
    return canon(tuple(row[c] for c in columns) for row in state.values())


def canon(rows) -> list[tuple]:
    return sorted((tuple(r) for r in rows), key=repr)


def replay(changes: list[tuple], key_idx: list[int]) -> dict:
    """(kind, *values) replayed in order: +I/+U put, -U/-D remove."""
    state: dict = {}
    for kind, *values in changes:
        key = tuple(values[i] for i in key_idx)
        if kind in ("+I", "+U"):
            state[key] = tuple(values)
        else:
            state.pop(key, None)
    return state


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


def snapshot_files(path: str) -> dict[int, dict]:
    out = {}
    for p in Path(path, "snapshot").glob("snapshot-*"):
        d = json.loads(p.read_text())
        out[d["id"]] = d
    return out


def commits_at(w: Written, snapshot: int) -> int:
    """How many commits the snapshot holds (a commit's snapshots are (before, after])."""
    return sum(1 for before, _after in w.commit_snapshots if before < snapshot)


def from_java(values: list, columns: list[str], types: dict) -> tuple:
    out = []
    for c, v in zip(columns, values, strict=True):
        if v is not None and types[c] == "DATE":
            v = datetime.date.fromisoformat(v)
        elif v is not None and types[c].startswith("DECIMAL"):
            v = decimal.Decimal(v)
        out.append(v)
    return tuple(out)


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


# Java Paimon reads a lookup table (changelog-producer = lookup, no deletion vectors) with its lookup
# rule: a key from level 0 and the lowest non-zero level holding it (see test_aggregation_lookup_*).
# streamhouse's native reader applies it to local Parquet files; for an aggregation table that would
# go to paimon-rust (which merges every level: ORC/Avro files here) a bucket holding two non-zero
# levels is refused by name. Java's plan says how many levels a bucket holds.
LOOKUP_RULE = "is read by Java Paimon with its lookup rule"


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


# --------------------------------------------------------------------------------------------
# The differences found, each as the smallest table that shows it
# --------------------------------------------------------------------------------------------


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
