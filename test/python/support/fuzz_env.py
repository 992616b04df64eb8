"""The fuzz's environment (fuzz/test_fuzz.py): lake tables written by pypaimon, corrupt copies of
them, odd files (FIFOs, sockets, symlinks to /dev/zero, unreadable paths), and the path values that
point at them."""

from __future__ import annotations

import datetime
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conftest import ROOT

from support import fuzz_worker as fw
from support.fuzz_values import MB, STRINGS_STATIC, S, V

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
    sys.path.insert(0, str(ROOT / "scripts"))
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
