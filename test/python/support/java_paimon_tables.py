"""The random primary-key tables of the Java Paimon lake tests (test/python/lake/test_java_paimon*.py)
and their plain-Python oracle (issue 41 item 3), plus what those files share: the `java` fixture
(one Java Paimon runner per test module, support/java_paimon.py), Java's values and a table's
snapshot files read back, and the words streamhouse refuses a lookup table's layout with.

`Case(seed)` decides everything about a table from its seed: the merge engine (deduplicate,
partial-update with ignore-delete or remove-record-on-delete, aggregation, first-row), changelog
producer, partitions, buckets, deletion vectors, sequence.field, file format and target file size,
stream or batch writer, write-only writers and compaction, an added column, and the rows of each
commit (`steps`). `merge` is each engine's rule over the rows written, in commit order, and
`replay` a changelog's; neither ever asks the extension or Java Paimon.
"""

from __future__ import annotations

import datetime
import decimal
import json
import random
from pathlib import Path

import pytest

from support.java_paimon import JavaPaimon

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
# Reading back
# --------------------------------------------------------------------------------------------


def snapshot_files(path: str) -> dict[int, dict]:
    out = {}
    for p in Path(path, "snapshot").glob("snapshot-*"):
        d = json.loads(p.read_text())
        out[d["id"]] = d
    return out


def from_java(values: list, columns: list[str], types: dict) -> tuple:
    out = []
    for c, v in zip(columns, values, strict=True):
        if v is not None and types[c] == "DATE":
            v = datetime.date.fromisoformat(v)
        elif v is not None and types[c].startswith("DECIMAL"):
            v = decimal.Decimal(v)
        out.append(v)
    return tuple(out)


# Java Paimon reads a lookup table (changelog-producer = lookup, no deletion vectors) with its lookup
# rule: a key from level 0 and the lowest non-zero level holding it (see test_java_paimon_lookup.py).
# streamhouse's native reader applies it to local Parquet files; for an aggregation table that would
# go to paimon-rust (which merges every level: ORC/Avro files here) a bucket holding two non-zero
# levels is refused by name. Java's plan says how many levels a bucket holds.
LOOKUP_RULE = "is read by Java Paimon with its lookup rule"
