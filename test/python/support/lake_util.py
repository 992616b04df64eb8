"""Real Paimon tables for the lake tests, written with Apache Paimon's own Python writer
(pypaimon), plus pure-Python oracles of each merge engine over the rows written."""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import pyarrow as pa

# scripts/paimon_write.py: the writer scripts/make_lake_fixtures.py uses too (repo root = parents[3]).
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from paimon_write import commit, create_table, fast_writes, open_warehouse  # noqa: F401 (fast_writes: for the tests)

# The merged orders a fact table holds: what the serving layer reads (order_id is the key).
ORDERS = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)


class Warehouse:
    def __init__(self, root):
        self.root = str(root)
        self.catalog = open_warehouse(self.root)

    def create(self, name: str, schema: pa.Schema, primary_keys: list[str] | None, options: dict):
        return LakeTable(create_table(self.catalog, name, schema, primary_keys, options), schema)

    def path(self, name: str) -> str:
        return f"{self.root}/db.db/{name}"


class LakeTable:
    def __init__(self, table, schema: pa.Schema):
        self.table = table
        self.schema = schema
        self.commits: list[list[dict]] = []

    def commit(self, rows: list[dict]) -> None:
        commit(self.table, self.schema, rows)
        self.commits.append(rows)

    def read(self, **options) -> list[dict]:
        """pypaimon's own batch read (the second, independent reader)."""
        t = self.table.copy(options) if options else self.table
        rb = t.new_read_builder()
        return rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()


def read_mart(catalog, name: str) -> dict:
    """pypaimon's own batch read of a mart table `db.<name>` in `catalog` (the independent reader):
    {(company, order_day): (revenue, orders)}; a group listed twice fails."""
    table = catalog.get_table(f"db.{name}")
    rb = table.new_read_builder()
    rows = rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()
    out = {(r["company"], r["order_day"]): (int(r["revenue"]), r["orders"]) for r in rows}
    assert len(out) == len(rows), f"the mart table {name} holds a (company, order_day) twice"
    return out


def writes(commits: list[list[dict]]) -> list[dict]:
    return [row for rows in commits for row in rows]


def oracle_deduplicate(commits, key="id", kind="op"):
    state: dict = {}
    for row in writes(commits):
        if row.get(kind) in ("-D", "-U"):
            state.pop(row[key], None)
        else:
            state[row[key]] = row
    return list(state.values())


def oracle_partial_update(commits, key="id"):
    state: dict = {}
    for row in writes(commits):
        cur = state.setdefault(row[key], dict.fromkeys(row))
        for col, v in row.items():
            if v is not None:
                cur[col] = v
    return list(state.values())


def oracle_aggregation(commits, funcs: dict, key="id"):
    state: dict = {}
    for row in writes(commits):
        cur = state.get(row[key])
        if cur is None:
            state[row[key]] = dict(row)
            continue
        for col, v in row.items():
            if col == key or v is None:
                continue
            f = funcs.get(col, "last_non_null_value")
            if cur[col] is None:
                cur[col] = v
            elif f == "sum":
                cur[col] += v
            elif f == "max":
                cur[col] = max(cur[col], v)
            elif f == "min":
                cur[col] = min(cur[col], v)
            else:
                cur[col] = v
    return list(state.values())


def oracle_first_row(commits, key="id"):
    state: dict = {}
    for row in writes(commits):
        state.setdefault(row[key], row)
    return list(state.values())


def oracle_sequence(commits, seq: str, key="id"):
    state: dict = {}
    for row in writes(commits):
        cur = state.get(row[key])
        if cur is None or row[seq] >= cur[seq]:
            state[row[key]] = row
    return list(state.values())


def apply_changelog(rows: list[tuple], key_index: int) -> list[tuple]:
    """Replays (row_kind, *columns) changes in order: the bounded streaming read's final state."""
    state: dict = {}
    for kind, *values in rows:
        if kind in ("+I", "+U"):
            state[values[key_index]] = tuple(values)
        else:
            state.pop(values[key_index], None)
    return sorted(state.values())


def canon(rows: list[dict], columns: list[str]) -> list[tuple]:
    return sorted(tuple(r[c] for c in columns) for r in rows)


def name(x: int) -> str:
    """Text of every length class a string view has: empty, inline (up to 12 bytes, exactly 12)
    and out of line."""
    return ["", "twelve bytes", "thirteen byte", f"a name longer than a view holds {x}"][x % 4] if x < 8 else f"n{x}"


def plain_schema() -> pa.Schema:
    """A column of every type a plain (merge-free) read hands over as it is stored."""
    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("name", pa.string()),
            ("qty", pa.int32()),
            ("price", pa.float64()),
            ("amount", pa.decimal128(18, 2)),
            ("big", pa.decimal128(30, 4)),
            ("day", pa.date32()),
            ("at", pa.timestamp("us")),
            ("flag", pa.bool_()),
            ("raw", pa.binary()),
        ]
    )


def plain_rows(n: int) -> list[dict]:
    """`n` rows of `plain_schema`, keys 0..n-1, a NULL in any other column one time in five."""
    import datetime
    import decimal

    r = random.Random(11)

    def maybe(v):
        return None if r.random() < 0.2 else v

    return [
        {
            "id": i,
            "name": maybe(name(r.randrange(60))),
            "qty": maybe(r.randrange(-1000, 1000)),
            "price": maybe(r.uniform(-5, 5)),
            "amount": maybe(decimal.Decimal(r.randrange(-(10**9), 10**9)) / 100),
            "big": maybe(decimal.Decimal(r.randrange(-(10**20), 10**20)) / 10000),
            "day": maybe(datetime.date(2020, 1, 1) + datetime.timedelta(days=r.randrange(2000))),
            "at": maybe(datetime.datetime(2024, 1, 1) + datetime.timedelta(microseconds=r.randrange(10**12))),
            "flag": maybe(r.random() < 0.5),
            "raw": maybe(bytes(r.randrange(256) for _ in range(r.randrange(20)))),
        }
        for i in range(n)
    ]


def move_data_files(table_dir: Path, to: Path) -> list[tuple[Path, Path]]:
    """Moves every data file of the table at `table_dir` under `to` (a read that needs one of them
    then fails); the (original, moved) pairs, to move them back."""
    moved = []
    for f in sorted(table_dir.glob("bucket-*/*")):
        target = to / f.relative_to(table_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f, target)
        moved.append((f, target))
    assert moved, table_dir
    return moved
