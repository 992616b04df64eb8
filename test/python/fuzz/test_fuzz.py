"""Hostile arguments never crash (issue 8, item 4).

Every SQL function of the extension is driven with edge arguments -- NULL, '', a 1 MB string,
NUL and control characters, unicode, numbers/booleans/dates through implicit casts, negative
and huge snapshot ids, paths to files, FIFOs, sockets, /proc and /dev, missing and unreadable
directories, and Paimon tables with a corrupt or truncated snapshot / manifest / data / schema
file -- passed as literals, prepared parameters, casts, expressions, columns of a table, inside
PREPARE/EXECUTE, EXPLAIN, CTEs and transactions. The only acceptable outcomes are a result or a
clear error: a `duckdb.Error` with a non-empty message that is not an INTERNAL error, not a Rust
panic and not "DuckDB API not initialized". Never a crash, never a hang (every case has a time
budget), and never a changed serving layer after an error (fuzz_worker.py checks the layer after
every case, and that a known-good refresh still gives the recorded result after a failed
build/refresh).

Cases run in worker subprocesses (fuzz_worker.py): a crash kills only the worker, the test
records the case and starts a new one. Besides the fixed corpus (every edge value for every
function, every corruption once), FUZZ_CASES random cases come from a seeded RNG: FUZZ_SEED=1
in `make test`; `make fuzz` runs many more with a time-based seed it prints.

Error messages of the extension that do not name the offending value, or that echo a huge one
back, are collected as findings and printed (they do not fail the test; FUZZ_STRICT_MESSAGES=1
makes them fail). Every problem is listed with a reproducer; build/fuzz-report.json has them all.
test_minimal_reproducers keeps the smallest SQL of each failure found so far.

Knobs (environment): FUZZ_SEED (1), FUZZ_CASES (random cases, 300), FUZZ_SECONDS (stop drawing
random cases after this long), FUZZ_CASE_TIMEOUT (seconds per case, 4; x3 for lake refresh/follow
cases and 1 MB arguments), FUZZ_HANG_CAP (hangs per function and hazard before the rest of that
hazard is skipped, 1), FUZZ_THREADS (DuckDB threads per worker, 1; 0 = DuckDB's default),
FUZZ_WORKER_MEMORY_MB (6144), FUZZ_STRICT_MESSAGES, FUZZ_REPORT (path), FUZZ_DUMP (every outcome,
JSON lines), FUZZ_PROGRESS, FUZZ_SKIP_HAZARDS=1 (leave out FIFO / device / huge-path cases while
fixing the rest), FUZZ_TEST_TIMEOUT (900).
"""

from __future__ import annotations

import datetime
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import fuzz_worker as fw
import pytest
from conftest import EXT_PATH, require_extension, sql_literal

HERE = Path(__file__).resolve().parent
SEED = int(os.environ.get("FUZZ_SEED", "1"))
N_RANDOM = int(os.environ.get("FUZZ_CASES", "300"))
CASE_TIMEOUT = float(os.environ.get("FUZZ_CASE_TIMEOUT", "4"))
TIME_BUDGET = float(os.environ.get("FUZZ_SECONDS", "0")) or None  # stop running random cases after this
STRICT_MESSAGES = os.environ.get("FUZZ_STRICT_MESSAGES") == "1"
# Address-space cap of a worker: a read that never ends (a table file linked to /dev/zero) must
# not take the machine down with it; hitting the cap shows as a crash of that case.
WORKER_MEMORY = int(os.environ.get("FUZZ_WORKER_MEMORY_MB", "6144")) * 2**20
TOTAL_TIMEOUT = int(os.environ.get("FUZZ_TEST_TIMEOUT", "900"))

MB = 2**20
PROGRESS = os.environ.get("FUZZ_PROGRESS") == "1"
HANG_CAP = int(os.environ.get("FUZZ_HANG_CAP", "1"))  # hangs per (function, hazard) before skipping the rest

# ------------------------------------------------------------------------------------------------
# Values: (label shown in reproducers, Python value, SQL literal or None when there is none).
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class V:
    label: str
    value: object
    literal: str | None = None

    def sql(self) -> str:
        if self.literal is not None:
            return self.literal
        v = self.value
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, datetime.date):
            return f"DATE '{v.isoformat()}'"
        if isinstance(v, bytes):
            return "'" + "".join(f"\\x{b:02X}" for b in v) + "'::BLOB"
        return sql_literal(v)


def label_str(s: str) -> str:
    if len(s) > 120:
        # Describe long strings by their shape, not their bytes.
        head = s[:16]
        return f"<{len(s)}-char string starting {head!r}>"
    return repr(s)


def S(s: str, label: str | None = None) -> V:
    return V(label or label_str(s), s)


HUGE = "x" * MB
STRINGS_STATIC = [
    S(""),
    S(" "),
    S("\t\n\r"),
    S("acme"),
    S("O'Reilly"),
    S("東京商事"),
    S("a"),
    S("a\x00b"),
    S("\x00"),
    S("x' OR '1'='1"),
    S("😀"),
    S(HUGE, "'x' * 1 MB"),
    S("\x00" * 1024, "1024 NULs"),
    S("😀" * 100_000, "'😀' * 100000"),
    S("e\u0301"),
    S("\u202egnp.x"),
    S("\ufeff"),
    S("\x01\x02\x1b[2J\x7f\x08"),
    S("%s%n%x%p"),
    S("{}"),
    S("$1"),
    S("?"),
    S(":name"),
    S("'"),
    S('"'),
    S("`"),
    S("\\"),
    S(";"),
    S("--"),
    S("/*"),
    S("a.b"),
    S("a..b"),
    S(".a"),
    S("a."),
    S("."),
    S(".."),
    S("..."),
    S("`a`.`b`"),
    S('"fz_base"'),
    S("main.fz_base"),
    S("memory.main.fz_base"),
    S("FZ_BASE"),
    S(" fz_base "),
    S("fz_base"),
    S("fz_view"),
    S("fz_changes"),
    S("fct_orders"),
    S("mart_daily"),
    S("serving_meta"),
    S("serving_mart_counts"),
    S("__streamhouse_handoff"),
    S("duckdb_tables()"),
    S("information_schema.tables"),
    S("system.main.duckdb_tables"),
    S("temp.main.x"),
    S("a" * 70_000, "'a' * 70000"),
    S(".".join(["a"] * 100_000), "'a.a.a...' (100000 parts)"),
    S("fz_base\x00; DROP TABLE fct_orders"),
    S("fz_base\x00garbage"),
    S("acme\x00"),
    S("paimon:"),
    S("paimon: "),
    S("paimon:paimon:"),
    S("PAIMON:/x"),
    S("s3://bucket/t"),
    S("s3://bucket/t.parquet"),
    S("file:///etc"),
    S("http://127.0.0.1:9/x.parquet"),
    S("gs://x/y.parquet"),
    S("hf://x/y.csv"),
    S("~"),
    S("~/x.parquet"),
    S("C:\\x.parquet"),
    S("\\\\server\\share\\x.csv"),
    S("*"),
    S("**"),
    S("[a-"),
    S("/dev/*.csv"),
    S("/proc/*/status.csv"),
    S("/proc"),
    S("/proc/self/mem"),
    S("/proc/self/fd/0"),
    S("/proc/self/environ"),
    S("/dev/zero"),
    S("/dev/stdin"),
    S("/dev/null"),
    S("/dev/full"),
    S("/dev/urandom"),
    S("/"),
    S("/etc/passwd"),
    S("/etc/shadow"),
    S("/root"),
    S("/nonexistent"),
    S("/nonexistent/x.parquet"),
    S("paimon:/proc"),
    S("paimon:/proc/self/mem"),
    S("paimon:/dev/zero"),
    S("paimon:/dev/stdin"),
    S("paimon:/"),
    S("paimon:/etc/passwd"),
    S("/proc/self/mem.csv"),
    S("/dev/stdin.csv"),
]

INTERVALS = [
    V("INTERVAL '10 ms'", None, "INTERVAL '10 milliseconds'"),
    V("INTERVAL '1 ms'", None, "INTERVAL '1 millisecond'"),
    V("INTERVAL '-1 day'", None, "INTERVAL '-1 day'"),
    V("INTERVAL '0 s'", None, "INTERVAL '0 seconds'"),
    V("INTERVAL '1000000 years'", None, "INTERVAL '1000000 years'"),
    V("INTERVAL '1 month'", None, "INTERVAL '1 month'"),
    V("'1 second'", "1 second"),
    V("'abc'", "abc"),
    V("'-5 us'", "-5 us"),
    V("NULL::INTERVAL", None, "NULL::INTERVAL"),
    V("max INTERVAL", None, "INTERVAL '2147483647 months 2147483647 days 9223372036854775807 microseconds'"),
]
NUMBERS = [
    V("0", 0),
    V("1", 1),
    V("2", 2),
    V("3", 3),
    V("-1", -1),
    V("2**31-1", 2**31 - 1),
    V("-2**31", -(2**31)),
    V("2**31", 2**31),
    V("2**63-1", 2**63 - 1),
    V("-2**63", -(2**63)),
    V("2**64", 2**64),
    V("1.5", 1.5),
    V("-0.5", -0.5),
    V("nan", float("nan"), "'NaN'::DOUBLE"),
    V("inf", float("inf"), "'inf'::DOUBLE"),
    V("1e30", 1e30),
    V("'7'", "7"),
    V("' 7 '", " 7 "),
    V("'abc'", "abc"),
    V("''", ""),
    V("true", True),
    V("false", False),
    V("NULL", None),
    V("DATE", datetime.date(2024, 1, 1)),
    V("blob", b"\x00\xff"),
    V("HUGEINT max", None, "170141183460469231731687303715884105727::HUGEINT"),
    V("NULL::INT", None, "NULL::INT"),
    V("INTERVAL", None, "INTERVAL 1 DAY"),
    V("list", None, "[1, 2]"),
    V("struct", None, "{'a': 1}"),
    V("uuid", None, "uuid()"),
    V("random", None, "(random() * 10)::INT"),
]
# Non-strings in a VARCHAR slot: implicit casts (or a binder error).
CAST_VALUES = [
    V("42", 42),
    V("-1", -1),
    V("true", True),
    V("1.5", 1.5),
    V("DATE", datetime.date(2024, 1, 1)),
    V("NULL", None),
    V("NULL::INT", None, "NULL::INT"),
    V("NULL::VARCHAR", None, "NULL::VARCHAR"),
    V("2**64", 2**64),
    V("blob", b"a\x00b"),
    V("list", None, "['a', 'b']"),
    V("struct", None, "{'a': 'b'}"),
    V("TIMESTAMP", None, "TIMESTAMP '2024-01-01 00:00:00'"),
    V("uuid", None, "uuid()::VARCHAR"),
    V("map", None, "MAP {'k': 'v'}"),
    V("blob literal", None, "'\\xFF\\x00'::BLOB"),
]


# ------------------------------------------------------------------------------------------------
# The environment: lake tables (pypaimon), corrupt copies, odd files.
# ------------------------------------------------------------------------------------------------

FILE_SELECTORS = [
    "snapshot_latest",
    "snapshot_first",
    "LATEST",
    "schema",
    "baseManifestList",
    "deltaManifestList",
    "changelogManifestList",
    "manifest",
    "data",
    "changelog_file",
    "snapshot_dir",
    "manifest_dir",
    "schema_dir",
    "bucket_dir",
]


def corruption_specs():
    specs = []
    for sel in FILE_SELECTORS:
        for action in fw.FILE_ACTIONS:
            if sel.endswith("_dir") and action not in (
                "delete",
                "fifo",
                "socket",
                "dev_zero",
                "symlink_loop",
                "symlink_missing",
                "chmod000",
                "truncate0",
            ):
                continue
            specs.append({"kind": "file", "selector": sel, "action": action, "seed": len(specs)})
    for edit in fw.JSON_EDITS:
        specs.append({"kind": "json", "edit": list(edit)})
    return specs


def spec_name(spec) -> str:
    if spec["kind"] == "none":
        return "no corruption"
    if spec["kind"] == "file":
        return f"{spec['selector']}-{spec['action']}"
    sel, key, value = spec["edit"]
    v = repr(value)
    v = v if len(v) < 40 else v[:20] + f"..({len(v)})"
    return f"{sel}:{key}={v}"


def safe_dirname(i: int, spec) -> str:
    return f"c{i:03d}"


@dataclass
class Env:
    root: Path
    privileged: bool  # chmod 000 does not deny this process (root / CAP_DAC_OVERRIDE)
    can_drop: bool  # running as root: an unprivileged worker (nobody) sees unreadable files as such
    strings: list = field(default_factory=list)
    lake_paths: list = field(default_factory=list)  # V of directories for paimon_* functions
    corrupt: list = field(default_factory=list)  # (V path, spec)
    unreadable: list = field(default_factory=list)  # labels of values that need an unprivileged worker
    specs: list = field(default_factory=list)


def build_lake(root: Path):
    sys.path.insert(0, str(HERE.parents[1] / "scripts"))
    import decimal

    import pyarrow as pa
    from paimon_write import commit, create_table, open_warehouse

    wh = root / "wh"
    cat = open_warehouse(wh)
    orders = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    t = create_table(
        cat,
        "orders",
        orders,
        ["order_id"],
        {"bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input"},
    )
    d = datetime.date(2026, 11, 1)
    commit(
        t,
        orders,
        [
            {
                "order_id": i,
                "company": ["acme", "O'Reilly", "東京商事"][i % 3],
                "order_day": d + datetime.timedelta(days=i % 4),
                "revenue": i * 10 - 30,
            }
            for i in range(12)
        ],
    )
    commit(
        t,
        orders,
        [
            {"order_id": 2, "company": "acme", "order_day": d, "revenue": 7},
            {"order_id": 100, "company": "new", "order_day": d, "revenue": 1},
        ],
    )
    src = wh / "db.db" / "orders"
    lake = root / "lake"
    lake.mkdir()
    shutil.copytree(src, lake / "orders_s2")
    commit(
        t,
        orders,
        [
            {"order_id": 3, "company": "acme", "order_day": d, "revenue": 9},
            {"order_id": 101, "company": "new", "order_day": d, "revenue": 2},
        ],
    )
    shutil.copytree(src, lake / "orders_s3")
    # pypaimon writes no EARLIEST hint; a table may have one.
    (lake / "orders_s3" / "snapshot" / "EARLIEST").write_text("1")

    tier = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32())])
    tt = create_table(
        cat, "tier", tier, ["id"], {"bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input"}
    )
    for k in range(3):
        commit(tt, tier, [{"id": i, "bal": i * k} for i in range(5)])
    shutil.copytree(wh / "db.db" / "tier", lake / "tier")

    create_table(cat, "empty", orders, ["order_id"], {"bucket": "1"})  # schema, no snapshot
    shutil.copytree(wh / "db.db" / "empty", lake / "empty")

    types = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("t8", pa.int8()),
            ("t16", pa.int16()),
            ("f32", pa.float32()),
            ("f64", pa.float64()),
            ("b", pa.bool_()),
            ("dec", pa.decimal128(38, 10)),
            ("dec2", pa.decimal128(5, 2)),
            ("ts", pa.timestamp("us")),
            ("ts9", pa.timestamp("ns")),
            ("tstz", pa.timestamp("us", tz="UTC")),
            ("tm", pa.time32("ms")),
            ("bin", pa.binary()),
            ("s", pa.string()),
            ("d", pa.date32()),
            ("arr", pa.list_(pa.int32())),
            ("mp", pa.map_(pa.string(), pa.int64())),
            ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ]
    )
    ty = create_table(cat, "types", types, ["id"], {"bucket": "1", "changelog-producer": "input"})
    commit(
        ty,
        types,
        [
            {
                "id": 1,
                "t8": -128,
                "t16": 32767,
                "f32": float("nan"),
                "f64": float("inf"),
                "b": True,
                "dec": decimal.Decimal("1234567890123456789012345678.0123456789"),
                "dec2": decimal.Decimal("-999.99"),
                "ts": datetime.datetime(1, 1, 1),
                "ts9": datetime.datetime(2262, 4, 11),
                "tstz": datetime.datetime(9999, 12, 31, tzinfo=datetime.UTC),
                "tm": datetime.time(23, 59, 59),
                "bin": b"\x00\xff",
                "s": "a\x00b" + "z" * 5000,
                "d": datetime.date(1, 1, 1),
                "arr": [1, None],
                "mp": [("k", 1)],
                "st": {"x": 1, "y": "\x00"},
            },
            {"id": 2},
        ],
    )
    commit(ty, types, [{"id": 1, "s": "😀" * 3000}, {"id": 3, "arr": list(range(3000))}])
    shutil.copytree(wh / "db.db" / "types", lake / "types")
    return lake


def drop_dac_capabilities() -> None:
    """In a child before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding
    set, so the exec'd worker (still uid 0) obeys file modes and chmod 000 denies it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def denied_to_child(path: Path, preexec) -> bool:
    code = f"import os\ntry:\n    os.listdir({str(path)!r})\nexcept PermissionError:\n    raise SystemExit(7)"
    try:
        return subprocess.run([sys.executable, "-c", code], preexec_fn=preexec, timeout=60).returncode == 7
    except (OSError, subprocess.SubprocessError):
        return False


def build_env(root: Path) -> Env:
    # Tests may run as root, where chmod 000 denies nothing: then the cases that need an
    # unreadable path run in a worker without the DAC capabilities (if the kernel lets us drop them).
    probe = root / "probe"
    probe.mkdir()
    os.chmod(probe, 0)
    privileged = not denied_to_child(probe, None)
    can_drop = privileged and denied_to_child(probe, drop_dac_capabilities)
    os.chmod(probe, 0o755)
    env = Env(root=root, privileged=privileged, can_drop=can_drop)
    (root / "scratch").mkdir()
    lake = build_lake(root)

    fs = root / "fs"
    fs.mkdir()
    (fs / "plain.txt").write_text("hello\n")
    (fs / "empty.parquet").write_bytes(b"")
    (fs / "garbage.parquet").write_bytes(bytes(random.Random(1).randrange(256) for _ in range(5000)))
    (fs / "garbage.csv").write_bytes(bytes(random.Random(2).randrange(256) for _ in range(5000)))
    (fs / "nul.csv").write_bytes(b"order_id,company,order_day,revenue\n1,a\x00b,2024-01-01,5\n")
    (fs / "good.csv").write_text("order_id,company,order_day,revenue\n1,acme,2024-01-01,5\n2,b,2024-01-02,6\n")
    (fs / "long.csv").write_text("order_id,company,order_day,revenue\n1," + "c" * MB + ",2024-01-01,5\n")
    (fs / "bad.json").write_text("{" * 10_000)
    for name in ("fifo", "fifo.parquet", "fifo.csv"):
        os.mkfifo(fs / name)
    for name in ("sock", "sock.csv"):
        fw.make_socket(fs / name)
    os.symlink("/dev/zero", fs / "zero.csv")
    os.symlink("/dev/zero", fs / "zero.parquet")
    os.symlink("loop.parquet", fs / "loop.parquet")
    (fs / "dir.parquet").mkdir()
    (fs / "fakepaimon" / "schema").mkdir(parents=True)
    (fs / "fakepaimon2" / "schema").mkdir(parents=True)
    (fs / "fakepaimon2" / "schema" / "schema-0").write_bytes(b"\xff\xfe garbage")
    (fs / "fifopaimon" / "schema").mkdir(parents=True)
    os.mkfifo(fs / "fifopaimon" / "schema" / "schema-0")
    unreadable = fs / "unreadable"
    shutil.copytree(lake / "orders_s3", unreadable)
    (fs / "unreadable.csv").write_text("order_id,company,order_day,revenue\n1,a,2024-01-01,5\n")
    (fs / "unreadable_snap").mkdir()
    shutil.copytree(lake / "orders_s3", fs / "unreadable_snap", dirs_exist_ok=True)

    # Corrupt copies of the 3-snapshot table.
    corrupt = root / "corrupt"
    corrupt.mkdir()
    env.specs = corruption_specs()
    for i, spec in enumerate(env.specs):
        d = corrupt / safe_dirname(i, spec)
        fw.copy_table(lake / "orders_s3", d)
        fw.apply_corruption(d, spec)
        env.corrupt.append((V(f"<{spec_name(spec)}>", str(d)), spec))

    # Make the tree readable for an unprivileged worker, then lock the unreadable parts.
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p):
                os.chmod(p, 0o755)
        for n in filenames:
            p = os.path.join(dirpath, n)
            if not os.path.islink(p) and stat_is_regular(p):
                os.chmod(p, 0o644)
    os.chmod(root, 0o755)
    os.chmod(root / "scratch", 0o1777)
    for i, spec in enumerate(env.specs):
        if spec["kind"] == "file" and spec["action"] == "chmod000":
            fw.corrupt_file(fw.select_file(corrupt / safe_dirname(i, spec), spec["selector"]), "chmod000", 0)
    os.chmod(unreadable, 0)
    os.chmod(fs / "unreadable.csv", 0)
    os.chmod(fs / "unreadable_snap" / "snapshot", 0)

    p = lambda rel: str(root / rel)  # noqa: E731
    fs_paths = [
        S(p("fs/plain.txt"), "<regular text file>"),
        S(p("fs/empty.parquet"), "<0-byte .parquet>"),
        S(p("fs/garbage.parquet"), "<garbage .parquet>"),
        S(p("fs/garbage.csv"), "<garbage .csv>"),
        S(p("fs/nul.csv"), "<csv with a NUL byte>"),
        S(p("fs/good.csv"), "<good csv>"),
        S(p("fs/long.csv"), "<csv with a 1 MB field>"),
        S(p("fs/bad.json"), "<json of 10000 '{'>"),
        S(p("fs/fifo"), "<FIFO>"),
        S(p("fs/fifo.parquet"), "<FIFO named .parquet>"),
        S(p("fs/fifo.csv"), "<FIFO named .csv>"),
        S(p("fs/sock"), "<unix socket>"),
        S(p("fs/sock.csv"), "<unix socket named .csv>"),
        S(p("fs/zero.csv"), "<symlink to /dev/zero named .csv>"),
        S(p("fs/zero.parquet"), "<symlink to /dev/zero named .parquet>"),
        S(p("fs/loop.parquet"), "<symlink loop .parquet>"),
        S(p("fs/dir.parquet"), "<directory named .parquet>"),
        S(p("fs/fakepaimon"), "<dir with empty schema/>"),
        S(p("fs/fakepaimon2"), "<dir with garbage schema-0>"),
        S(p("fs/fifopaimon"), "<dir whose schema-0 is a FIFO>"),
        S(p("fs/unreadable"), "<chmod 000 Paimon table dir>"),
        S(p("fs/unreadable.csv"), "<chmod 000 csv>"),
        S(p("fs/unreadable_snap"), "<Paimon table with chmod 000 snapshot/>"),
        S(p("fs"), "<plain directory>"),
        S(p("missing/dir"), "<missing directory>"),
        S(p("x" * 300), "<path with a 300-char name>"),
        S(p("a/" * (MB // 2)), "<1 MB path>"),
        S("lake/orders_s3", "<relative lake path>"),
        S("./lake/../lake/orders_s3", "<relative path with ..>"),
        S(p("lake/orders_s3") + "/", "<lake path/>"),
        S(p("lake/orders_s3") + "/.", "<lake path/.>"),
        S(p("lake/orders_s3") + "//", "<lake path//>"),
        S(p("lake/orders_s3") + "\x00/x", "<lake path + NUL>"),
        S(p("lake/orders_s3") + "\n", "<lake path + newline>"),
        S("/proc/self/cwd/lake/orders_s3", "</proc/self/cwd/lake/orders_s3>"),
        S(p("lake/orders_s3/snapshot/snapshot-1"), "<a snapshot file>"),
        S(p("lake/orders_s3/bucket-0"), "<a bucket dir>"),
    ]
    env.unreadable = ["<chmod 000 Paimon table dir>", "<chmod 000 csv>", "<Paimon table with chmod 000 snapshot/>"]
    lake_good = [S(p(f"lake/{n}"), f"<lake {n}>") for n in ("orders_s3", "orders_s2", "tier", "empty", "types")]
    env.lake_paths = lake_good + fs_paths + [v for v, _ in env.corrupt]
    prefixed = [V("'paimon:' || " + v.label, "paimon:" + v.value) for v in lake_good + fs_paths[:26]]
    env.strings = STRINGS_STATIC + fs_paths + lake_good + prefixed
    for v, spec in env.corrupt:
        if spec["kind"] == "file" and spec["action"] == "chmod000":
            env.unreadable.append(v.label)
    # The worker loads every string into a table (fz_strs) for the column-argument cases.
    (root / "strings.json").write_text(json.dumps([v.value for v in env.strings if isinstance(v.value, str)]))
    os.chmod(root / "strings.json", 0o644)
    return env


def stat_is_regular(p: str) -> bool:
    import stat as st

    try:
        return st.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------
# Cases.
# ------------------------------------------------------------------------------------------------

TEXT_FUNCS = [
    "serving_build",
    "serving_refresh",
    "serving_dashboard",
    "serving_olap",
    "serving_explain",
    "serving_follow",
]
LAKE_FUNCS = ["paimon_scan", "paimon_changelog", "paimon_snapshots"]
NAMED = {"paimon_scan": "snapshot", "paimon_changelog": "from_snapshot", "serving_follow": "every"}
MUTATING = {"serving_build", "serving_refresh", "serving_follow"}
ORACLE_FUNCS = {"serving_dashboard", "serving_olap"}
FORMS = [
    "param",
    "literal",
    "typed",
    "concat",
    "subquery",
    "lateral",
    "prepare",
    "explain",
    "cte",
    "union",
    "txn",
    "describe",
    "ctas",
]


@dataclass
class Case:
    id: int
    sql: object  # str or list of str
    params: list
    labels: list
    func: str
    mutating: bool = False
    check: dict | None = None
    kind: str = "sql"
    corruption: dict | None = None
    lane: str = "plain"  # plain | sandbox | unpriv
    value_label: str | None = None  # the main argument, for the message check
    value: object = None
    big: bool = False  # carries a huge value: a longer time budget
    deep: bool = True  # after a failed serving_refresh, prove a known refresh still lands exactly
    hazard: str | None = None  # what makes it likely to hang (FIFO, /dev/zero...), for the hang cap
    may_change: bool = False  # a failed statement may still hold a successful build (two calls in one)

    def wire(self) -> dict:
        d = {
            "id": self.id,
            "kind": self.kind,
            "sql": self.sql,
            "params": [fw.encode(p) for p in self.params],
            "mutating": self.mutating,
            "func": self.func,
            "deep": self.deep,
            "may_change": self.may_change,
        }
        if self.check:
            d["check"] = {k: fw.encode(v) for k, v in self.check.items()}
        if self.corruption:
            d["corruption"] = self.corruption
        return d

    def repro(self) -> str:
        if self.kind in ("lake_refresh", "lake_follow"):
            call = (
                "SELECT * FROM serving_follow('paimon:' || P, every := INTERVAL '10 milliseconds');\n"
                "-- wait 0.3 s\nSELECT * FROM serving_status();\nSELECT * FROM serving_unfollow()"
                if self.kind == "lake_follow"
                else "SELECT * FROM serving_refresh('paimon:' || P);\nSELECT * FROM serving_status()"
            )
            return (
                f"-- build from a clean copy of the 2-snapshot lake table P: SELECT * FROM "
                f"serving_build('paimon:' || P);\n-- add snapshot 3 and corrupt it "
                f"({spec_name(self.corruption)}), then:\n" + call
            )
        stmts = self.sql if isinstance(self.sql, list) else [self.sql]
        text = ";\n".join(s if len(s) < 400 else s[:200] + f"...<{len(s)} chars>" for s in stmts)
        if self.params:
            text += "\n-- parameters: " + ", ".join(self.labels)
        return text


def call_sql(func: str, form: str, args_sql: list[str], named: str = "") -> tuple[object, bool]:
    """SQL calling table function `func` with argument expressions; returns (sql, uses_params)."""
    inner = ", ".join(args_sql) + named
    call = f"{func}({inner})"
    if form == "explain":
        return f"EXPLAIN SELECT * FROM {call}", True
    if form == "describe":
        return f"DESCRIBE SELECT * FROM {call}", True
    if form == "cte":
        return f"WITH c AS (SELECT * FROM {call}) SELECT * FROM c", True
    if form == "txn":
        return ["BEGIN TRANSACTION", f"SELECT * FROM {call}"], True
    if form == "ctas":
        return f"CREATE OR REPLACE TEMP TABLE fz_out AS SELECT * FROM {call}", True
    return f"SELECT * FROM {call}", True


def arg_expr(form: str, v: V) -> tuple[str, list]:
    """(SQL expression, params) for one argument in `form`."""
    if form == "literal":
        return v.sql(), []
    if v.literal is not None and form not in ("lateral",):
        # Values only expressible in SQL.
        inner = v.literal
        if form == "typed":
            return f"CAST({inner} AS VARCHAR)", []
        if form == "concat":
            return f"({inner} || '')", []
        if form == "subquery":
            return f"(SELECT {inner})", []
        return inner, []
    if form == "typed":
        return "CAST(? AS VARCHAR)", [v.value]
    if form == "concat":
        return "(? || '')", [v.value]
    if form == "subquery":
        return "(SELECT ?)", [v.value]
    return "?", [v.value]


def hazard_of(labels) -> str | None:
    """What may make a case hang, so that a hang is charged to its cause (see HANG_CAP)."""
    text = " ".join(labels).lower()
    if "named ." in text and ("fifo" in text or "/dev/zero" in text or "socket" in text):
        return "a FIFO / device / socket as a file source"
    if "fifo" in text:
        return "a FIFO inside a Paimon table"
    if "dev_zero" in text:
        return "/dev/zero inside a Paimon table"
    for h in ("socket", "1 mb path", "/dev/stdin", "/proc/self/mem", "/dev/zero"):
        if h in text:
            return h
    return None


class Generator:
    def __init__(self, env: Env, rng: random.Random):
        self.env = env
        self.rng = rng
        self.n = 0
        self.lake_values = env.lake_paths

    def next_id(self) -> int:
        self.n += 1
        return self.n

    def lane_for(self, labels) -> str:
        if any(u in lbl for lbl in labels for u in self.env.unreadable):
            return "unpriv" if (self.env.can_drop or not self.env.privileged) else "skip"
        return "plain"

    def table_call(self, func: str, v: V, form: str, named: tuple[str, V] | None = None, extra: str = "") -> Case:
        rng = self.rng
        if form == "lateral":
            params = [v.value] if v.literal is None else []
            src = "(SELECT ? AS v)" if v.literal is None else f"(SELECT {v.literal} AS v)"
            sql = f"SELECT f.* FROM {src} a, {func}(a.v) f"
            if rng.random() < 0.5:
                sql = f"SELECT f.* FROM fz_args a, {func}(a.s) f"
                params = []
            return self._case(sql, params, [v.label], func, v)
        if form == "prepare":
            expr, params = arg_expr("param", v)
            named_sql = ""
            if named:
                named_sql = f", {named[0]} := {named[1].sql()}"
            sql = [
                f"PREPARE fzp AS SELECT * FROM {func}($1{named_sql})",
                f"EXECUTE fzp({v.sql() if v.literal is not None or isinstance(v.value, (bytes,)) else '?'})",
            ]
            params = [] if (v.literal is not None or isinstance(v.value, bytes)) else [v.value]
            return self._case(sql, params, [v.label], func, v)
        expr, params = arg_expr(form if form not in FORMS[5:] or form == "subquery" else "param", v)
        if form in ("explain", "describe", "cte", "txn", "ctas", "union") and rng.random() < 0.5:
            expr, params = v.sql(), []
        named_sql = ""
        labels = [v.label]
        if named:
            nexpr, nparams = arg_expr(rng.choice(["param", "literal"]), named[1])
            named_sql = f", {named[0]} := {nexpr}"
            params = params + nparams
            labels.append(f"{named[0]} := {named[1].label}")
        named_sql += extra
        if form == "union":
            other = rng.choice(self.env.strings)
            oexpr = other.sql()
            sql = (
                f"SELECT count(*) FROM (SELECT * FROM {func}({expr}{named_sql}) "
                f"UNION ALL SELECT * FROM {func}({oexpr}{named_sql}))"
            )
            labels.append(other.label)
            # The same params appear once: the second call uses a literal. The error may name either.
            # Each build/refresh commits on its own (README): when one of the two succeeds and the
            # other fails, the statement fails but the successful call's layer stays.
            c = self._case(sql, params, labels, func, v)
            c.value = None
            c.may_change = func in MUTATING
            return c
        sql, _ = call_sql(func, form, [expr], named_sql)
        case = self._case(sql, params, labels, func, v)
        if named or extra:
            case.value = None  # the error may rightly name the other argument instead
        if (
            func in ORACLE_FUNCS
            and form in ("param", "literal", "typed")
            and isinstance(v.value, str)
            and v.literal is None
            and not named
            and not extra
        ):
            case.check = {"oracle": v.value}
        return case

    def _case(self, sql, params, labels, func, v: V | None) -> Case:
        c = Case(self.next_id(), sql, params, labels, func, mutating=func in MUTATING)
        c.lane = self.lane_for(labels)
        c.big = any(isinstance(p, str) and len(p) > 50_000 for p in params) or len(str(sql)) > 50_000
        c.hazard = hazard_of(labels)
        if v is not None:
            c.value_label, c.value = v.label, v.value
        return c

    def scalar(self, func: str, v: V, form: str, a: V | None = None, b: V | None = None) -> Case:
        rng = self.rng
        nums = [a, b] if func == "paimon_tier_upsert" else []
        labels = [v.label] + [n.label for n in nums]
        if form == "range" and isinstance(v.value, str) and len(v.value) > 10_000:
            form = "column"  # 5000 rows of a 1 MB string would test the machine, not the function
        if form == "column":
            # Non-constant vectors: a VALUES list with the value among others, many rows, NULLs.
            rows = ["(?)", "('acme')", "(NULL)", "('a.b')"]
            rng.shuffle(rows)
            args = ["v"] + [n.sql() for n in nums]
            sql = f"SELECT {func}({', '.join(args)}) FROM (VALUES {', '.join(rows)}) t(v)"
            params = [v.value] if v.literal is None else []
            if v.literal is not None:
                sql = sql.replace("(?)", f"({v.literal})")
            return self._case(sql, params, labels, func, v)
        if form == "range":
            args = ["CASE WHEN i % 3 = 0 THEN NULL WHEN i % 3 = 1 THEN 'lake.t' || i ELSE ? END"]
            if nums:
                args += ["(i % 7)::INT - 3", f"CASE WHEN i % 5 = 0 THEN NULL ELSE {nums[1].sql()} END"]
            sql = f"SELECT count(*), max(length(x)) FROM (SELECT {func}({', '.join(args)}) AS x FROM range(5000) t(i))"
            params = [v.value] if v.literal is None else []
            if v.literal is not None:
                sql = sql.replace("ELSE ? END", f"ELSE {v.literal} END")
            return self._case(sql, params, labels, func, v)
        exprs, params = [], []
        for arg in [v, *nums]:
            e, p = arg_expr(form if arg is v else rng.choice(["param", "literal"]), arg)
            exprs.append(e)
            params += p
        sql = f"SELECT {func}({', '.join(exprs)})"
        if form == "prepare":
            sql = [
                f"PREPARE fzs AS SELECT {func}({', '.join('$' + str(i + 1) for i in range(len(exprs)))})",
                f"EXECUTE fzs({', '.join(x.sql() for x in [v, *nums])})",
            ]
            params = []
        return self._case(sql, params, labels, func, v)

    # -- the fixed corpus ----------------------------------------------------------------------
    def corpus(self) -> list[Case]:
        """Every edge value through every function once (as a prepared parameter, or its SQL
        literal when it has no Python form), a sample as literals, every call form once, every
        corruption once; a balance that keeps `make test` short."""
        rng = self.rng
        env = self.env
        out = []
        values = env.strings + CAST_VALUES

        def natural(v):
            return "param" if v.literal is None else "literal"

        # The source parser (build) and the company binding (dashboard) see every value; the
        # functions sharing their code see a third (random cases and `make fuzz` see the rest).
        share = {
            "serving_build": 1,
            "serving_dashboard": 1,
            "serving_refresh": 3,
            "serving_olap": 3,
            "serving_explain": 3,
            "serving_follow": 3,
        }
        for func in TEXT_FUNCS:
            for v in values:
                if share[func] == 1 or rng.randrange(share[func]) == 0:
                    out.append(self.table_call(func, v, natural(v)))
            short = [v for v in values if isinstance(v.value, str) and v.literal is None and len(v.value) < 200]
            for v in rng.sample(short, 15):
                out.append(self.table_call(func, v, "literal"))
            for form in FORMS:
                out.append(self.table_call(func, rng.choice(values), form))
        # serving_follow's every := INTERVAL, on the lake table (the layer is not built from it: the
        # call must refuse cleanly whatever `every` is) and on the table it was built from.
        for n in INTERVALS + NUMBERS[:12]:
            out.append(
                self.table_call(
                    "serving_follow",
                    V("'paimon:' || <lake orders_s3>", "paimon:" + self.lake_values[0].value),
                    "param",
                    ("every", n),
                )
            )
            out.append(self.table_call("serving_follow", S("fz_base"), "param", ("every", n)))
        lake_args = (
            [v for v in self.lake_values if not v.label.startswith("<c")] + CAST_VALUES + rng.sample(STRINGS_STATIC, 30)
        )
        for func in LAKE_FUNCS:
            for v in lake_args:
                out.append(self.table_call(func, v, natural(v)))
            for form in FORMS:
                out.append(self.table_call(func, rng.choice(self.lake_values[:5]), form))
            if func in NAMED:
                for n in NUMBERS:
                    out.append(self.table_call(func, rng.choice(self.lake_values[:3]), "param", (NAMED[func], n)))
                # Wrong, duplicated and extra parameters.
                good = self.lake_values[0]
                for extra in [
                    ", snapshot := 1, snapshot := 2",
                    ", from_snapshot := 1, snapshot := 1",
                    ", nope := 1",
                    ", 1",
                    ", snapshot := 'abc'",
                    ", snapshot := NULL::VARCHAR",
                    ", snapshot := [1]",
                    ", snapshot := (SELECT 1)",
                    ", snapshot := random()::BIGINT",
                ]:
                    out.append(self.table_call(func, good, "literal", extra=extra))
        for v in values:
            out.append(self.scalar("paimon_tier_ddl", v, natural(v)))
            out.append(self.scalar("paimon_tier_upsert", v, natural(v), rng.choice(NUMBERS), rng.choice(NUMBERS)))
        for n in NUMBERS:
            out.append(self.scalar("paimon_tier_upsert", S("lake.t"), "literal", n, rng.choice(NUMBERS)))
            out.append(self.scalar("paimon_tier_upsert", S("lake.t"), "param", rng.choice(NUMBERS[:10]), n))
        for func in ("paimon_tier_ddl", "paimon_tier_upsert"):
            for form in ("column", "range", "prepare", "typed", "concat"):
                for v in rng.sample(values, 4):
                    out.append(self.scalar(func, v, form, rng.choice(NUMBERS), rng.choice(NUMBERS)))
            # The whole string pool as one column (1 MB strings included).
            args = "s" if func == "paimon_tier_ddl" else "s, 1, 2"
            out.append(self._case(f"SELECT count({func}({args})) FROM fz_strs", [], ["<every string>"], func, None))
            out.append(
                self._case(
                    f"SELECT count({func}({args})) FROM fz_strs WHERE s NOT LIKE '%.%' AND s <> ''",
                    [],
                    ["<strings without dots>"],
                    func,
                    None,
                )
            )
        for func in ("serving_reconcile", "serving_status", "serving_unfollow"):
            for sql in [
                f"SELECT * FROM {func}()",
                f"EXPLAIN SELECT * FROM {func}()",
                f"DESCRIBE SELECT * FROM {func}()",
                f"SELECT count(*) FROM (SELECT * FROM {func}() UNION ALL SELECT * FROM {func}())",
                ["BEGIN TRANSACTION", f"SELECT * FROM {func}()"],
                f"SELECT * FROM {func}(NULL)",
                f"SELECT * FROM {func}('x')",
                f"SELECT * FROM {func}(42)",
                [f"PREPARE fzr AS SELECT * FROM {func}()", "EXECUTE fzr"],
                f"SELECT * FROM fz_args, {func}()",
                f"SELECT {func}()",
            ]:
                out.append(self._case(sql, [], [], func, None))
        for arg in ("", "42", "'x'", "NULL"):
            out.append(self._case(f"SELECT * FROM __streamhouse_handoff({arg})", [], [], "__streamhouse_handoff", None))
        # Every corruption once through a lake function or a build (rotating); a lake refresh (the
        # costliest case) for every file action, on rotating files, and for every kind of JSON edit.
        funcs = [*LAKE_FUNCS, "serving_build", "scan_old", "changelog_from"]
        for i, (v, _spec) in enumerate(env.corrupt):
            out.append(self.lake_case(funcs[i % len(funcs)], v))
        seen = set()
        for i, action in enumerate(fw.FILE_ACTIONS):
            specs = [sp for sp in env.specs if sp["kind"] == "file" and sp["action"] == action]
            out.append(self.lake_refresh(specs[i % len(specs)]))
        for spec in env.specs:
            if spec["kind"] == "json" and spec["edit"][0] not in seen:
                seen.add(spec["edit"][0])
                out.append(self.lake_refresh(spec))
        # A follower meeting a corrupt table: it must fail cleanly, change nothing, and stop.
        for want in [
            ("none", None),
            ("snapshot_latest", "truncate_half"),
            ("data", "garbage"),
            ("manifest", "delete"),
            ("snapshot_latest", "fifo"),
            ("data", "fifo"),
            ("schema", "dev_zero"),
            ("LATEST", "chmod000"),
            ("deltaManifestList", "flip"),
        ]:
            spec = (
                {"kind": "none"}
                if want[0] == "none"
                else next(sp for sp in env.specs if sp["kind"] == "file" and (sp["selector"], sp["action"]) == want)
            )
            out.append(self.lake_refresh(spec, follow=True))
        # The known-refresh proof after a failed refresh costs a refresh and a rebuild: in the
        # corpus every 4th failing plain refresh gets it (lake refreshes and random cases always).
        plain_refreshes = [c for c in out if c.func == "serving_refresh" and c.kind == "sql"]
        for i, c in enumerate(plain_refreshes):
            c.deep = i % 4 == 0
        return out

    def lake_case(self, f: str, v: V) -> Case:
        if f == "serving_build":
            return self.table_call("serving_build", V("'paimon:' || " + v.label, "paimon:" + v.value), "param")
        if f == "scan_old":
            return self.table_call("paimon_scan", v, "param", ("snapshot", NUMBERS[1]))
        if f == "changelog_from":
            return self.table_call("paimon_changelog", v, "param", ("from_snapshot", NUMBERS[3]))
        return self.table_call(f, v, "param")

    def lake_refresh(self, spec, follow: bool = False) -> Case:
        c = Case(
            self.next_id(),
            None,
            [],
            [spec_name(spec)],
            "serving_follow" if follow else "serving_refresh",
            mutating=True,
            kind="lake_follow" if follow else "lake_refresh",
            corruption=spec,
        )
        c.hazard = hazard_of(c.labels)
        if spec["kind"] == "file" and spec["action"] == "chmod000":
            c.lane = "unpriv" if (self.env.can_drop or not self.env.privileged) else "skip"
        return c

    # -- random cases ------------------------------------------------------------------------------
    def mutate(self, s: str) -> str:
        rng = self.rng
        ops = rng.randrange(1, 4)
        for _ in range(ops):
            op = rng.randrange(7)
            pos = rng.randrange(len(s) + 1)
            if op == 0:
                s = (
                    s[:pos]
                    + rng.choice(["\x00", "\n", "'", '"', ".", "/", "..", "\\", "😀", "\x7f", " ", "%", "*"])
                    + s[pos:]
                )
            elif op == 1 and s:
                s = s[:pos] + s[pos + 1 :]
            elif op == 2:
                s = s[:pos]
            elif op == 3:
                s = s + rng.choice(["/", "/.", "/..", "/snapshot", "/schema/schema-0", ".parquet", ".csv", "\x00"])
            elif op == 4:
                s = s.upper() if rng.random() < 0.5 else s.swapcase()
            elif op == 5:
                s = "paimon:" + s
            else:
                s = s * rng.randrange(2, 4)
        return s

    def random_case(self) -> Case:
        rng = self.rng
        r = rng.random()
        pool = self.env.strings + CAST_VALUES
        if r < 0.45:
            func = rng.choice(TEXT_FUNCS + LAKE_FUNCS)
            v = rng.choice(self.lake_values) if func in LAKE_FUNCS and rng.random() < 0.6 else rng.choice(pool)
            if isinstance(v.value, str) and v.literal is None and len(v.value) < 5000 and rng.random() < 0.4:
                m = self.mutate(v.value)
                v = S(m)
            named = None
            if func in NAMED and rng.random() < 0.5:
                named = (NAMED[func], rng.choice(NUMBERS))
            return self.table_call(func, v, rng.choice(FORMS), named)
        if r < 0.6:
            func = rng.choice(["paimon_tier_ddl", "paimon_tier_upsert"])
            v = rng.choice(pool)
            if isinstance(v.value, str) and v.literal is None and len(v.value) < 5000 and rng.random() < 0.5:
                v = S(self.mutate(v.value))
            form = rng.choice(["param", "literal", "typed", "concat", "column", "range", "prepare"])
            return self.scalar(func, v, form, rng.choice(NUMBERS), rng.choice(NUMBERS))
        if r < 0.85:
            f = rng.choice([*LAKE_FUNCS, "serving_build", "scan_old", "changelog_from"])
            v, spec = rng.choice(self.env.corrupt)
            return self.lake_case(f, v)
        if r < 0.9:
            spec = rng.choice(self.env.specs)
            return self.lake_refresh(spec, follow=rng.random() < 0.25)
        # Sequences: a hostile call between good ones, in one statement batch.
        func = rng.choice(TEXT_FUNCS)
        v = rng.choice(pool)
        expr, _params = arg_expr("literal", v)
        sql = ["SELECT * FROM serving_dashboard('acme')", f"SELECT * FROM {func}({expr})"]
        c = self._case(sql, [], [v.label], func, v)
        return c


# ------------------------------------------------------------------------------------------------
# Running cases in workers.
# ------------------------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    res: dict | None  # the worker's answer, None when it died or hung
    problem: str | None = None  # crash / hang description
    seconds: float = 0.0


class Runner:
    def __init__(self, env: Env, lane: str, log_dir: Path):
        self.env = env
        self.lane = lane
        self.log_dir = log_dir
        self.proc = None
        self.n_started = 0

    def start(self):
        self.n_started += 1
        self.stderr_path = self.log_dir / f"worker-{self.lane}-{self.n_started}.stderr"
        # open for the worker's whole life (it is the child's stderr), closed in kill()
        self.stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        mode = "sandbox" if self.lane == "sandbox" else "plain"
        cmd = [
            sys.executable,
            str(HERE / "fuzz_worker.py"),
            "--ext",
            require_extension(),
            "--root",
            str(self.env.root),
            "--mode",
            mode,
        ]
        drop = self.lane == "unpriv" and self.env.can_drop

        def preexec():
            import resource

            os.setsid()
            resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
            if drop:
                drop_dac_capabilities()

        env = dict(os.environ)
        env.setdefault("FUZZ_THREADS", "1")  # DuckDB threads per worker; 0 = DuckDB's default
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=str(self.env.root),
            preexec_fn=preexec,
            env=env,
        )
        line = self._readline(120)
        if line is None or not json.loads(line).get("ready"):
            self.kill()
            raise RuntimeError(f"fuzz worker ({self.lane}) did not start: {line!r}\n{self.stderr_tail()}")

    def _readline(self, timeout: float):
        out = self.proc.stdout
        buf = b""
        deadline = time.monotonic() + timeout
        fd = out.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return buf.decode() if buf else ""
            buf += chunk
            if buf.endswith(b"\n"):
                return buf.decode()

    def stderr_tail(self) -> str:
        try:
            self.stderr.flush()
            data = self.stderr_path.read_bytes()
            return data[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own session (setsid)
            except ProcessLookupError:
                pass
        if self.proc:
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        self.stderr.close()
        self.proc = None

    def run(self, case: Case) -> Result:
        if self.proc is None:
            self.start()
        t0 = time.monotonic()
        timeout = CASE_TIMEOUT * (3 if case.kind in ("lake_refresh", "lake_follow") or case.big else 1)
        try:
            self.proc.stdin.write((json.dumps(case.wire()) + "\n").encode())
            self.proc.stdin.flush()
            line = self._readline(timeout)
        except BrokenPipeError:
            line = ""
        dt = time.monotonic() - t0
        if line:
            return Result(case, json.loads(line), seconds=dt)
        if line is None:
            self.kill()
            return Result(case, None, f"HANG: no answer within {timeout:.0f} s (worker killed)", dt)
        rc = self.proc.wait()
        tail = self.stderr_tail()
        self.kill()
        how = f"killed by signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exited with code {rc}"
        return Result(case, None, f"CRASH: worker {how}; stderr tail:\n{tail}", dt)

    def close(self):
        if self.proc:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass
            self.kill()


# ------------------------------------------------------------------------------------------------
# Judging outcomes.
# ------------------------------------------------------------------------------------------------

BAD_MESSAGE_MARKERS = [
    "INTERNAL",
    "panicked at",
    "DuckDB API not initialized",
    "RUST_BACKTRACE",
    "database has been invalidated",
    "FATAL",
]
OUR_PREFIXES = ("serving", "paimon_", "streamhouse", "__streamhouse")


def judge(r: Result) -> tuple[list[str], list[str]]:
    """(hard failures, soft findings) of one result."""
    hard, soft = [], []
    if r.problem:
        return [r.problem], []
    res = r.res
    outcome = res.get("outcome")
    msg = res.get("msg") or ""
    if outcome == "pyerror":
        hard.append(f"not a DuckDB error: {res.get('etype')}: {msg[:500]}")
    elif outcome == "error":
        if not msg.strip():
            hard.append(f"empty error message ({res.get('etype')})")
        if res.get("etype") in ("InternalException", "FatalException"):
            hard.append(f"{res.get('etype')}: {short_msg(msg)}")
        else:
            for m in BAD_MESSAGE_MARKERS:
                if m in msg:
                    hard.append(f"unclear error ({res.get('etype')}, contains {m!r}): {short_msg(msg)}")
                    break
        soft += message_findings(r.case, msg)
    for step in res.get("steps") or []:
        smsg = step.get("msg") or ""
        if step.get("outcome") == "pyerror":
            hard.append(f"{step['step']}: not a DuckDB error: {step.get('etype')}: {smsg[:500]}")
        elif step.get("outcome") == "error":
            if not smsg.strip():
                hard.append(f"{step['step']}: empty error message ({step.get('etype')})")
            elif step.get("etype") in ("InternalException", "FatalException") or any(
                m in smsg for m in BAD_MESSAGE_MARKERS
            ):
                hard.append(
                    f"{step['step']} after the corruption: unclear error ({step.get('etype')}): {short_msg(smsg)}"
                )
    for key in ("wrong", "changed", "broken"):
        if res.get(key):
            hard.append(f"{key.upper()}: {res[key]}")
    if (
        outcome == "ok"
        and isinstance(r.case.value, str)
        and "\x00" in r.case.value
        and r.case.func in (TEXT_FUNCS + LAKE_FUNCS)
        and r.case.kind == "sql"
        and not r.case.check
    ):
        # A NUL-bearing argument that still succeeded: was it silently cut at the NUL?
        soft.append("accepted an argument containing NUL (was it truncated at the NUL?)")
    return hard, soft


def message_findings(case: Case, msg: str) -> list[str]:
    out = []
    body = msg.split(": ", 1)[1] if msg.split(": ", 1)[0].endswith("Error") else msg
    ours = body.startswith(OUR_PREFIXES)
    if len(msg) > 64 * 1024:
        out.append(f"error message is {len(msg)} characters long (echoes a huge argument?)")
    if "Error code" in msg:
        out.append(f"message carries C API noise: {msg[:300]}")
    v = case.value
    if ours and isinstance(v, str) and 0 < len(v) <= 200 and v.isprintable() and v.strip() == v and v not in body:
        # Parts of a dotted name or a path are fine too, and "paimon:" is a prefix, not the path.
        shown = v[len("paimon:") :] if v.startswith("paimon:") else v
        if shown not in body and not any(p and p in body for p in shown.split(".") if len(p) > 2):
            out.append(f"message does not name the value {v!r}: {msg[:400]}")
    path = v[len("paimon:") :] if isinstance(v, str) and v.startswith("paimon:") and case.func in MUTATING else v
    if (
        ours
        and isinstance(path, str)
        and "\x00" not in path
        and len(path) < 4096
        and os.path.isdir(path)
        and os.path.isdir(os.path.join(path, "schema"))
        and ("no schema/" in msg or "no such directory" in msg)
    ):
        out.append(
            f"message says the Paimon table is missing, but {path!r} exists (it cannot be read): {short_msg(msg, 300)}"
        )
    if (
        ours
        and isinstance(v, str)
        and "\x00" in v
        and v.split("\x00")[0]
        and v.split("\x00")[0] in body
        and v.replace("\x00", "\\0") not in body
        and v not in body
    ):
        out.append(f"message shows the value cut at its NUL character: {msg[:300]}")
    return out


# ------------------------------------------------------------------------------------------------
# The test.
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env():
    require_extension()
    root = Path(tempfile.mkdtemp(prefix="streamhouse-fuzz-", dir="/tmp"))
    try:
        yield build_env(root)
    finally:
        fw.rmtree(root)


def run_all(env: Env, cases: list[Case], log_dir: Path, parallel: int = 2, first_random: int | None = None):
    lanes: dict[str, list[Case]] = {}
    for c in cases:
        lanes.setdefault(c.lane, []).append(c)
    skipped = lanes.pop("skip", [])
    if skipped:
        # Counted and shown in pytest's summary, never dropped silently: as root without a way to
        # drop the permission override (CAP_DAC_OVERRIDE), a chmod-000 file is readable anyway.
        import warnings

        warnings.warn(
            f"fuzz: {len(skipped)} permission cases (chmod 000 files) not run: this process is root "
            "and cannot drop its permission override here",
            stacklevel=2,
        )
    # Plain cases are split over `parallel` workers; the unpriv / sandbox lanes get one each.
    shards = []
    plain = lanes.pop("plain", [])
    for i in range(parallel):
        shards.append(("plain", plain[i::parallel]))
    for lane, cs in lanes.items():
        shards.append((lane, cs))
    results: list[Result] = []
    t_start = time.monotonic()
    lock = threading.Lock()
    errors = []
    hangs: dict = {}  # (function, hazard) -> cases that hung or crashed

    def drive(lane, cs):
        runner = Runner(env, lane, log_dir)
        try:
            for i, c in enumerate(cs):
                if PROGRESS and i % 200 == 0:
                    print(f"fuzz: {lane} {i}/{len(cs)}", flush=True)
                if (
                    TIME_BUDGET
                    and first_random is not None
                    and c.id >= first_random
                    and time.monotonic() - t_start > TIME_BUDGET
                ):
                    break
                key = (c.func, c.hazard)
                with lock:
                    capped = c.hazard is not None and len(hangs.get(key, [])) >= HANG_CAP
                if capped:
                    # Enough proof that this hazard hangs this function: do not spend another
                    # time budget on it; the case is reported with the group.
                    r = Result(
                        c,
                        None,
                        f"SKIPPED: {c.func} already hung/crashed {HANG_CAP} times on a "
                        f"{c.hazard!r} argument (cases {hangs[key]})",
                    )
                else:
                    r = runner.run(c)
                with lock:
                    if r.problem and not r.problem.startswith("SKIPPED") and c.hazard is not None:
                        hangs.setdefault(key, []).append(c.id)
                    results.append(r)
        except Exception as e:  # harness failure: report, do not hide
            errors.append(f"{lane}: {e!r}")
        finally:
            runner.close()

    threads = [threading.Thread(target=drive, args=s) for s in shards if s[1]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def sandbox_cases(gen: Generator) -> list[Case]:
    """The path-taking functions under enable_external_access = false (allowed: the fuzz root)."""
    out = []
    paths = [
        v for v in gen.env.strings if isinstance(v.value, str) and ("/" in v.value or v.value.startswith("paimon"))
    ]
    for func in ["paimon_scan", "serving_build"]:
        for i, v in enumerate([*paths, gen.env.lake_paths[0]]):
            if func == "serving_build" and i % 2:
                continue
            c = gen.table_call(func, v, "param")
            if c.lane == "plain":
                c.lane = "sandbox"
                out.append(c)
    return out


def summarize(results: list[Result]):
    hard, soft = [], []
    for r in results:
        h, s = judge(r)
        for x in h:
            hard.append((r, x))
        for x in s:
            soft.append((r, x))
    return hard, soft


def short_msg(msg: str, limit: int = 500) -> str:
    msg = msg[: limit + 1000].split("\nStack Trace")[0].strip()
    msg = "".join(ch if ch.isprintable() or ch == "\n" else repr(ch)[1:-1] for ch in msg)
    return msg if len(msg) <= limit else msg[:limit] + f"... <{len(msg)} chars>"


def group_key(r: Result, problem: str):
    first = problem.splitlines()[0]
    if first.startswith(("HANG", "CRASH", "SKIPPED")):
        return ("hang/crash", r.case.func, r.case.hazard or " ".join(r.case.labels)[:80])
    return (re.sub(r"\d{3,}", "N", first[:100]), r.case.func)


def format_findings(items, limit=60) -> str:
    """Problems grouped (50 identical hangs read as one), each with a reproducer."""
    groups: dict = {}
    for r, problem in items:
        groups.setdefault(group_key(r, problem), []).append((r, problem))
    lines = []
    for _key, members in list(groups.items())[:limit]:
        ran = [m for m in members if not m[1].startswith("SKIPPED")] or members
        r, problem = ran[0]
        skipped = len(members) - len(ran) if ran is not members else 0
        head = short_msg(problem, 1500).replace(str(EXT_PATH), "<ext>")
        lines.append(
            f"* {head}\n  function {r.case.func}, lane {r.case.lane}: {len(ran)} case(s)"
            + (f" (+{skipped} more with the same hazard not run)" if skipped else "")
            + f", e.g. case {r.case.id}:\n    "
            + r.case.repro().replace("\n", "\n    ")
        )
        if r.res and r.res.get("msg"):
            lines.append(f"    -> {r.res.get('etype')}: {short_msg(r.res['msg'], 400)}")
    if len(groups) > limit:
        lines.append(f"... and {len(groups) - limit} more groups")
    return "\n".join(lines)


@pytest.mark.timeout(TOTAL_TIMEOUT)
def test_hostile_arguments_never_crash(env, tmp_path):
    t0 = time.monotonic()
    rng = random.Random(SEED)
    gen = Generator(env, rng)
    cases = gen.corpus() + sandbox_cases(gen)
    n_corpus = len(cases)
    first_random = gen.n + 1
    for _ in range(N_RANDOM):
        cases.append(gen.random_case())
    print(
        f"\nfuzz: FUZZ_SEED={SEED} corpus={n_corpus} random={len(cases) - n_corpus} "
        f"(privileged={env.privileged}, unprivileged worker={env.can_drop})"
    )
    if os.environ.get("FUZZ_SKIP_HAZARDS") == "1":  # while fixing: leave out what is known to hang
        cases = [c for c in cases if c.hazard is None]
    results, harness_errors = run_all(env, cases, tmp_path, first_random=first_random)
    assert not harness_errors, harness_errors
    hard, soft = summarize(results)
    if os.environ.get("FUZZ_DUMP"):
        with open(os.environ["FUZZ_DUMP"], "w") as f:
            for r in sorted(results, key=lambda r: r.case.id):
                f.write(
                    json.dumps(
                        {
                            "id": r.case.id,
                            "func": r.case.func,
                            "lane": r.case.lane,
                            "labels": r.case.labels,
                            "repro": r.case.repro()[:600],
                            "seconds": round(r.seconds, 3),
                            "problem": (r.problem or "")[:3000],
                            "res": {k: (str(v)[:1500]) for k, v in (r.res or {}).items()},
                        },
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    dt = time.monotonic() - t0
    outcomes = {}
    for r in results:
        k = "crash/hang" if r.problem else r.res.get("outcome")
        outcomes[k] = outcomes.get(k, 0) + 1
    slow = sorted(results, key=lambda r: -r.seconds)[:3]
    print(
        f"fuzz: {len(results)} cases in {dt:.1f} s: {outcomes}; slowest: "
        + ", ".join(f"case {r.case.id} {r.seconds:.2f}s" for r in slow)
    )
    report = {
        "seed": SEED,
        "cases": len(results),
        "hard": [(r.case.id, r.case.repro(), p) for r, p in hard],
        "soft": [(r.case.id, r.case.repro(), p) for r, p in soft],
    }
    out = Path(os.environ.get("FUZZ_REPORT", HERE.parents[1] / "build" / "fuzz-report.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    if soft:
        print(f"fuzz: {len(soft)} message finding(s) (full list in {out}):\n" + format_findings(soft, 25))
    problems = hard + (soft if STRICT_MESSAGES else [])
    if problems:
        pytest.fail(
            f"FUZZ_SEED={SEED}: {len(problems)} problem(s): crashes, hangs, wrong answers, a changed "
            f"serving layer or unclear errors (full report: {out}):\n" + format_findings(problems),
            pytrace=False,
        )


# ------------------------------------------------------------------------------------------------
# The failures the fuzz found, minimized: each is the smallest SQL that shows it, run in its own
# process with a time budget. They fail until the extension is fixed (the fuzz corpus above
# keeps exercising the same inputs through every function).
# ------------------------------------------------------------------------------------------------

REPRO_RUNNER = r"""
import json, os, resource, sys
limit = int(os.environ.get("REPRO_AS", "0"))
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import duckdb
con = duckdb.connect(config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"})
con.execute("LOAD " + "'" + sys.argv[1].replace("'", "''") + "'")
for stmt in json.loads(sys.argv[2]):
    if stmt.startswith("!"):  # a filesystem step between statements
        exec(stmt[1:])
        continue
    try:
        out = {"sql": stmt, "ok": [list(map(str, r)) for r in con.execute(stmt).fetchall()]}
    except duckdb.Error as e:
        out = {"sql": stmt, "error": type(e).__name__, "msg": str(e)[:2000]}
    print(json.dumps(out), flush=True)
"""


def run_repro(statements: list[str], timeout: float, address_space: int = 0):
    """[(sql, outcome dict)], and a problem string if the process crashed or hung."""
    env = dict(os.environ, REPRO_AS=str(address_space))
    proc = subprocess.Popen(
        [sys.executable, "-c", REPRO_RUNNER, require_extension(), json.dumps(statements)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        problem = None
        if proc.returncode != 0:
            sig = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            problem = f"CRASH ({sig}): {err.decode(errors='replace')[-600:]}"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        problem = f"HANG: no answer within {timeout:.0f} s"
    return [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")], problem


def clear_error(o) -> bool:
    return (
        "error" in o
        and o["msg"].strip()
        and o["error"] not in ("InternalException", "FatalException")
        and not any(m in o["msg"] for m in BAD_MESSAGE_MARKERS)
    )


def every_clear(outs) -> str | None:
    """The check of a reproducer that only must not crash or hang: besides that, every statement
    gives a result or a clear error (never an INTERNAL error, a panic or an empty message)."""
    if not outs:
        return "no statement reported an outcome"
    bad = [o for o in outs if "ok" not in o and not clear_error(o)]
    return None if not bad else f"not a result or a clear error: {short_msg(json.dumps(bad[0]), 300)}"


def _lit(s: str) -> str:
    return sql_literal(s)


def reproducers(env: Env):
    """(id, statements, timeout, address-space cap, check(outcomes) -> problem or None)."""
    root = env.root / "repro"
    root.mkdir(exist_ok=True)
    s2, s3 = env.root / "lake" / "orders_s2", env.root / "lake" / "orders_s3"
    t_fifo_schema = root / "fifo_schema"
    (t_fifo_schema / "schema").mkdir(parents=True, exist_ok=True)
    if not (t_fifo_schema / "schema" / "schema-0").exists():
        os.mkfifo(t_fifo_schema / "schema" / "schema-0")
    t_fifo_snap = root / "fifo_snapshot"
    if not t_fifo_snap.exists():
        fw.copy_table(s3, t_fifo_snap)
        fw.corrupt_file(t_fifo_snap / "snapshot" / "snapshot-3", "fifo", 0)
    t_zero = root / "zero_schema"
    (t_zero / "schema").mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(t_zero / "schema" / "schema-0"):
        os.symlink("/dev/zero", t_zero / "schema" / "schema-0")
    t_nofields = root / "no_fields"
    (t_nofields / "schema").mkdir(parents=True, exist_ok=True)
    (t_nofields / "schema" / "schema-0").write_text(
        json.dumps(
            {
                "version": 3,
                "id": 0,
                "fields": [],
                "highestFieldId": -1,
                "partitionKeys": [],
                "primaryKeys": [],
                "options": {},
                "timeMillis": 0,
            }
        )
    )
    fifo_csv = env.root / "fs" / "fifo.csv"
    lake = root / "lake"  # a table the layer is built from, then damaged between statements

    def fresh_lake():
        return (
            f"!import shutil; shutil.rmtree({str(lake)!r}, ignore_errors=True); "
            f"shutil.copytree({str(s2)!r}, {str(lake)!r})"
        )

    nul_table = (
        "CREATE TABLE o AS SELECT 1::BIGINT AS order_id, 'a' AS company, DATE '2024-01-01' AS order_day, "
        "10::BIGINT AS revenue UNION ALL SELECT 2, 'a' || chr(0) || 'b', DATE '2024-01-01', 99"
    )

    def last(outs):
        return outs[-1] if outs else {}

    yield (
        "nul_company_answers_for_its_prefix",
        [nul_table, "SELECT * FROM serving_build('o')", "SELECT revenue FROM serving_dashboard('a' || chr(0) || 'b')"],
        20,
        0,
        lambda outs: (
            None
            if last(outs).get("ok") == [["99"]] or clear_error(last(outs))
            else f"serving_dashboard('a' || chr(0) || 'b') answered {last(outs)} (company 'a' has 10, 'a\\0b' has 99)"
        ),
    )
    yield (
        "nul_source_builds_from_its_prefix",
        [nul_table, "SELECT source FROM serving_build('o' || chr(0) || 'junk')"],
        20,
        0,
        lambda outs: (
            None if clear_error(last(outs)) else f"serving_build('o' || chr(0) || 'junk') did not refuse: {last(outs)}"
        ),
    )
    yield (
        "nul_lake_path_reads_its_prefix",
        [f"SELECT count(*) FROM paimon_scan({_lit(str(s3))} || chr(0) || 'junk')"],
        20,
        0,
        lambda outs: (
            None
            if clear_error(last(outs))
            else f"paimon_scan(<table> || chr(0) || 'junk') read the table: {last(outs)}"
        ),
    )
    yield (
        "schema_without_fields_is_internal_error",
        [f"SELECT * FROM paimon_scan({_lit(str(t_nofields))})"],
        20,
        0,
        lambda outs: (
            None
            if clear_error(last(outs)) or "ok" in last(outs)
            else f"not a clear error: {short_msg(last(outs).get('msg', ''), 300)}"
        ),
    )
    for rid, sql in [
        ("fifo_schema_file_hangs", f"SELECT * FROM paimon_snapshots({_lit(str(t_fifo_schema))})"),
        ("fifo_snapshot_file_hangs", f"SELECT count(*) FROM paimon_scan({_lit(str(t_fifo_snap))})"),
        ("fifo_csv_source_hangs", f"SELECT * FROM serving_build({_lit(str(fifo_csv))})"),
    ]:
        yield (rid, [sql], 10, 0, every_clear)
    yield (
        "dev_zero_schema_file_exhausts_memory",
        [f"SELECT * FROM paimon_snapshots({_lit(str(t_zero))})"],
        60,
        3 * 2**30,
        every_clear,
    )
    yield (
        "sandbox_long_path_is_quadratic",
        [
            "SET allowed_directories = ['/nonexistent-allowed']",
            "SET enable_external_access = false",
            "SELECT * FROM paimon_scan('/tmp/' || repeat('a/', 200000))",
        ],
        8,
        0,
        every_clear,
    )
    yield (
        "refresh_without_snapshot_dir_reports_null_snapshot",
        [
            fresh_lake(),
            f"SELECT lake_snapshot FROM serving_build('paimon:' || {_lit(str(lake))})",
            f"!import shutil; shutil.rmtree({str(lake / 'snapshot')!r})",
            f"SELECT lake_snapshot FROM serving_refresh('paimon:' || {_lit(str(lake))})",
            "SELECT lake_snapshot FROM serving_meta",
        ],
        20,
        0,
        lambda outs: (
            None
            if len(outs) >= 3 and (clear_error(outs[1]) or outs[1].get("ok") == outs[2].get("ok"))
            else f"serving_refresh on the table without its snapshot/ directory: {outs[1:] if len(outs) > 1 else outs}"
        ),
    )
    yield (
        "status_hangs_on_fifo_latest_hint",
        [
            fresh_lake(),
            f"SELECT lake_snapshot FROM serving_build('paimon:' || {_lit(str(lake))})",
            f"!import os; os.remove({str(lake / 'snapshot' / 'LATEST')!r}); "
            f"os.mkfifo({str(lake / 'snapshot' / 'LATEST')!r})",
            "SELECT lake_snapshot FROM serving_status()",
        ],
        10,
        0,
        every_clear,
    )
    yield (
        "unfollow_hangs_on_follower_stuck_in_fifo",
        [
            fresh_lake(),
            f"SELECT lake_snapshot FROM serving_build('paimon:' || {_lit(str(lake))})",
            f"SELECT following FROM serving_follow('paimon:' || {_lit(str(lake))}, "
            "every := INTERVAL '10 milliseconds')",
            f"!import shutil, os, time; shutil.copytree({str(s3)!r}, {str(lake)!r}, dirs_exist_ok=True); "
            f"os.remove({str(lake / 'snapshot' / 'snapshot-3')!r}); "
            f"os.mkfifo({str(lake / 'snapshot' / 'snapshot-3')!r}); "
            "time.sleep(0.3)",
            "SELECT followed FROM serving_unfollow()",
        ],
        10,
        0,
        every_clear,
    )


@pytest.mark.timeout(300)
def test_minimal_reproducers(env):
    """Each reproducer must give a result or a clear error in its time budget, without crashing."""
    from concurrent.futures import ThreadPoolExecutor

    cases = list(reproducers(env))
    # The lake-damaging ones share one directory: run those one after another.
    serial = [c for c in cases if any(s.startswith("!") for s in c[1])]
    parallel = [c for c in cases if c not in serial]

    def one(c):
        rid, stmts, timeout, cap, check = c
        outs, problem = run_repro(stmts, timeout, cap)
        if problem is None:
            problem = check(outs)
        return rid, stmts, problem

    with ThreadPoolExecutor(4) as pool:
        fut_serial = pool.submit(lambda: [one(c) for c in serial])
        results = list(pool.map(one, parallel)) + fut_serial.result()
    failed = [(rid, stmts, p) for rid, stmts, p in results if p]
    if failed:
        pytest.fail(
            f"{len(failed)} of {len(results)} minimal reproducers fail:\n"
            + "\n".join(
                f"* {rid}: {p}\n    "
                + ";\n    ".join(s if not s.startswith("!") else "-- (filesystem) " + s[1:] for s in stmts)
                for rid, stmts, p in failed
            ),
            pytrace=False,
        )
