"""Worker process of the hostile-argument fuzz test (fuzz/test_fuzz.py).

A crash in the extension kills the process that loaded it, so every fuzz case runs here, in a
child process the test drives over a pipe: one JSON case per line in on stdin, one JSON outcome
per line out on a private copy of the original stdout (fd 1 itself is pointed at stderr, so
nothing DuckDB or Rust prints can corrupt the protocol). The test kills the worker when a case
overruns its time budget (a hang) and sees a crash as a dead pipe plus a return code.

The worker owns one database with a serving layer built from a small known table. After every
case it re-reads that layer (fingerprint); a case that errored, or that was not a build/refresh,
must leave it exactly as it was. A build/refresh that succeeded is undone by rebuilding from the
known table, which must give the original fingerprint back. After a failed build/refresh it
also runs a known-good refresh and compares it with the one recorded at startup, so a failure
that poisoned an in-memory cache (not only the tables) is caught too.

Also the corruption helpers for Paimon table directories, shared with the test (the worker
applies them itself for the lake-refresh cases, after building from the clean table).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import traceback
from pathlib import Path

# Run by path (fuzz/test_fuzz.py starts it as a script), this file's directory is on sys.path, not
# test/python: add it so the shared oracle in test/python/conftest.py imports the same way as under pytest.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from conftest import oracle as conftest_oracle

# ------------------------------------------------------------------------------------------------
# Values across the pipe: JSON plus a few tagged types.
# ------------------------------------------------------------------------------------------------


def encode(v):
    if isinstance(v, datetime.date):
        return {"$date": v.isoformat()}
    if isinstance(v, float) and v != v:
        return {"$nan": True}
    if isinstance(v, bytes):
        return {"$bytes": v.hex()}
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 2**53:
        return {"$int": str(v)}
    return v


def decode(v):
    if isinstance(v, dict):
        if "$date" in v:
            return datetime.date.fromisoformat(v["$date"])
        if "$nan" in v:
            return float("nan")
        if "$bytes" in v:
            return bytes.fromhex(v["$bytes"])
        if "$int" in v:
            return int(v["$int"])
    return v


# ------------------------------------------------------------------------------------------------
# The known serving layer.
# ------------------------------------------------------------------------------------------------

# Companies include a NUL-bearing name and its prefix, so an argument truncated at NUL answers
# for the wrong company and the oracle notices.
COMPANIES = ["acme", "O'Reilly", "東京商事", "a", "a\x00b", "", " ", "x' OR '1'='1", "😀"]
BASE_DAY = datetime.date(2024, 1, 1)


def base_rows():
    rows = []
    for i in range(60):
        company = COMPANIES[(i * 7) % len(COMPANIES)]
        day = BASE_DAY + datetime.timedelta(days=(i * 5) % 9)
        revenue = [100, -7, 0, 2**40, -(2**40), 13][i % 6] + i
        rows.append((1000 + i * 3, company, day, revenue))
    return rows


def change_rows():
    """A known-good change set: one update, one move, one delete, one insert."""
    return [
        (1000, "acme", BASE_DAY, 5, False),
        (1003, "O'Reilly", BASE_DAY + datetime.timedelta(days=30), 6, False),
        (1006, None, None, None, True),
        (999_999, "new co", BASE_DAY, 7, False),
    ]


def oracle(rows):
    """Per-company dashboard answers, by the suite's one pure-Python oracle."""
    return conftest_oracle(rows)[0]


# One statement (statements are what costs here): a multiset hash of every serving table, the
# bookkeeping that says what the layer reflects, and the list of tables (a leftover staging table
# or a dropped one is a changed layer too). Timestamps and the generation token are left out.
FP_QUERY = """
SELECT (SELECT (count(*), sum(hash(x)::HUGEINT)) FROM fct_orders x),
       (SELECT (count(*), sum(hash(x)::HUGEINT)) FROM mart_daily x),
       (SELECT (count(*), sum(hash(x)::HUGEINT)) FROM serving_mart_counts x),
       (SELECT list((source, {counters} lake_snapshot, fct_rows, serving_catalog, serving_schema))
          FROM serving_meta),
       (SELECT list(concat_ws('.', database_name, schema_name, table_name)
                    ORDER BY database_name, schema_name, table_name)
          FROM duckdb_tables() WHERE NOT temporary)
"""


def fingerprint(con, subst: str | None = None, counters: bool = True) -> str:
    """The layer's fingerprint; `subst` (a per-case lake path) is replaced by a placeholder;
    without `counters`, how many refreshes happened (and from what) does not count."""
    q = FP_QUERY.format(counters="refresh_source, refreshes," if counters else "")
    text = repr(con.execute(q).fetchall())
    return text.replace(subst, "<P>") if subst else text


# ------------------------------------------------------------------------------------------------
# Corrupting a copy of a Paimon table directory.
# ------------------------------------------------------------------------------------------------

FILE_ACTIONS = [
    "truncate0",
    "truncate1",
    "truncate_half",
    "zero_fill",
    "garbage",
    "flip",
    "append_garbage",
    "delete",
    "dir",
    "fifo",
    "socket",
    "dev_zero",
    "symlink_loop",
    "symlink_missing",
    "chmod000",
]


def _latest_snapshot(table: Path) -> Path:
    snaps = sorted((p for p in (table / "snapshot").glob("snapshot-*")), key=lambda p: int(p.name.split("-", 1)[1]))
    return snaps[-1]


def select_file(table: Path, selector: str) -> Path:
    """A file of the table by role; the latest snapshot's own files where that matters."""
    if selector == "snapshot_latest":
        return _latest_snapshot(table)
    if selector == "snapshot_first":
        return table / "snapshot" / "snapshot-1"
    if selector in ("LATEST", "EARLIEST"):
        return table / "snapshot" / selector
    if selector == "schema":
        return table / "schema" / "schema-0"
    snap = json.loads(_latest_snapshot(table).read_text())
    if selector in ("baseManifestList", "deltaManifestList", "changelogManifestList"):
        return table / "manifest" / snap[selector]
    if selector == "manifest":
        return sorted(p for p in (table / "manifest").iterdir() if not p.name.startswith("manifest-list-"))[-1]
    if selector == "data":
        return sorted((table / "bucket-0").glob("data-*"))[-1]
    if selector == "changelog_file":
        return sorted((table / "bucket-0").glob("changelog-*"))[-1]
    if selector in ("snapshot_dir", "manifest_dir", "schema_dir", "bucket_dir"):
        return (
            table
            / {
                "snapshot_dir": "snapshot",
                "manifest_dir": "manifest",
                "schema_dir": "schema",
                "bucket_dir": "bucket-0",
            }[selector]
        )
    raise ValueError(selector)


def make_socket(path: Path) -> None:
    """A listening-never unix socket at `path` (bound in a short dir: sun_path is 108 bytes)."""
    short = tempfile.mkdtemp(prefix="fzs", dir="/tmp")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(os.path.join(short, "s"))
        os.rename(os.path.join(short, "s"), path)
    finally:
        s.close()
        shutil.rmtree(short, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def corrupt_file(path: Path, action: str, seed: int) -> None:
    import random

    rng = random.Random(seed)
    is_dir = path.is_dir() and not path.is_symlink()
    if (
        action in ("truncate0", "truncate1", "truncate_half", "zero_fill", "garbage", "flip", "append_garbage")
        and is_dir
    ):
        action = "delete"  # content edits make no sense on a directory
    if action == "chmod000":
        os.chmod(path, 0)
        return
    if action in ("truncate0", "truncate1", "truncate_half"):
        data = path.read_bytes()
        keep = {"truncate0": 0, "truncate1": min(1, len(data)), "truncate_half": len(data) // 2}[action]
        path.write_bytes(data[:keep])
    elif action == "zero_fill":
        path.write_bytes(b"\0" * path.stat().st_size)
    elif action == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(max(1, path.stat().st_size))))
    elif action == "flip":
        data = bytearray(path.read_bytes())
        for _ in range(max(1, len(data) // 200)):
            if data:
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif action == "append_garbage":
        with open(path, "ab") as f:
            f.write(bytes(rng.randrange(256) for _ in range(777)))
    else:
        _remove(path)
        if action == "delete":
            pass
        elif action == "dir":
            path.mkdir()
        elif action == "fifo":
            os.mkfifo(path)
        elif action == "socket":
            make_socket(path)
        elif action == "dev_zero":
            os.symlink("/dev/zero", path)
        elif action == "symlink_loop":
            os.symlink(path.name, path)
        elif action == "symlink_missing":
            os.symlink(str(path) + ".gone", path)
        else:
            raise ValueError(action)


# JSON edits of the latest snapshot / the schema: (file selector, key path, new value or "$del").
BIG = 2**63 - 1
JSON_EDITS = [
    ("snapshot_latest", "id", -1),
    ("snapshot_latest", "id", 999),
    ("snapshot_latest", "id", "two"),
    ("snapshot_latest", "id", None),
    ("snapshot_latest", "schemaId", 99),
    ("snapshot_latest", "schemaId", -1),
    ("snapshot_latest", "baseManifestList", "../../../../../../../../etc/passwd"),
    ("snapshot_latest", "baseManifestList", "/dev/zero"),
    ("snapshot_latest", "baseManifestList", ""),
    ("snapshot_latest", "baseManifestList", "../snapshot"),
    ("snapshot_latest", "baseManifestList", "$del"),
    ("snapshot_latest", "deltaManifestList", "../snapshot/LATEST"),
    ("snapshot_latest", "changelogManifestList", "nope"),
    ("snapshot_latest", "timeMillis", BIG),
    ("snapshot_latest", "timeMillis", -(2**63)),
    ("snapshot_latest", "timeMillis", -1),
    ("snapshot_latest", "timeMillis", 1e300),
    ("snapshot_latest", "timeMillis", "soon"),
    ("snapshot_latest", "totalRecordCount", -5),
    ("snapshot_latest", "totalRecordCount", BIG),
    ("snapshot_latest", "deltaRecordCount", None),
    ("snapshot_latest", "changelogRecordCount", -(2**63)),
    ("snapshot_latest", "commitKind", "BOGUS"),
    ("snapshot_latest", "commitKind", ""),
    ("snapshot_latest", "version", 99),
    ("snapshot_latest", "baseManifestListSize", -1),
    ("snapshot_latest", "$whole", "{"),
    ("snapshot_latest", "$whole", "[]"),
    ("snapshot_latest", "$whole", "null"),
    ("snapshot_latest", "$whole", "[" * 100_000),
    ("snapshot_first", "id", 2),
    ("schema", "fields.3.type", "STRING"),
    ("schema", "fields.3.type", "FOO"),
    ("schema", "fields.0.type", "BIGINT"),
    ("schema", "fields.1.type", "DECIMAL(100, 2)"),
    ("schema", "fields.2.name", "order_id"),
    ("schema", "fields", []),
    ("schema", "primaryKeys", ["nope"]),
    ("schema", "partitionKeys", ["nope"]),
    ("schema", "options.bucket", "-1"),
    ("schema", "options.bucket", "0"),
    ("schema", "options.bucket", "abc"),
    ("schema", "options.bucket", "99999999999999999999"),
    ("schema", "options.merge-engine", "bogus"),
    ("schema", "options.sequence.field", "nope"),
    ("schema", "options.changelog-producer", "bogus"),
    ("schema", "options.rowkind.field", "nope"),
    ("schema", "options.merge-engine", "aggregation"),
    ("schema", "id", 99),
    ("schema", "highestFieldId", -1),
    ("schema", "$whole", ""),
    ("schema", "$whole", '{"fields": 5}'),
    ("LATEST", "$text", ""),
    ("LATEST", "$text", "-1"),
    ("LATEST", "$text", "0"),
    ("LATEST", "$text", "99"),
    ("LATEST", "$text", "abc"),
    ("LATEST", "$text", str(BIG)),
    ("LATEST", "$text", "99999999999999999999"),
    ("LATEST", "$text", " 2 \n"),
    ("LATEST", "$text", "\0"),
    ("EARLIEST", "$text", "2"),
    ("EARLIEST", "$text", "-5"),
    ("EARLIEST", "$text", "junk"),
    ("EARLIEST", "$text", str(BIG)),
    # Extra files that must be ignored or refused: odd snapshot / schema names.
    ("$extra", "snapshot/snapshot-abc", "{}"),
    ("$extra", "snapshot/snapshot-99999999999999999999", "{}"),
    ("$extra", "snapshot/snapshot--1", "{}"),
    ("$extra", "snapshot/snapshot-0", "$copy:snapshot/snapshot-1"),
    ("$extra", "schema/schema-1", "{}"),
    ("$extra", "schema/schema-99999999999999999999", "{}"),
    ("$extra", "schema/schema-x", "{}"),
    ("$extra", f"snapshot/snapshot-{BIG}", "$copy:snapshot/snapshot-1"),
    ("$gap", "snapshot/snapshot-1", None),
]


def _set_path(obj, dotted: str, value):
    # Option keys contain dots themselves ("sequence.field"): the first part names the map.
    head, _, rest = dotted.partition(".")
    if head == "options" and rest:
        obj = obj.setdefault("options", {})
        key = rest
    else:
        parts = dotted.split(".")
        for p in parts[:-1]:
            obj = obj[int(p)] if isinstance(obj, list) else obj[p]
        key = parts[-1]
        if isinstance(obj, list):
            key = int(key)
    if value == "$del":
        del obj[key]
    else:
        obj[key] = value


def apply_json_edit(table: Path, edit) -> None:
    selector, key, value = edit
    if selector == "$extra":
        target = table / key
        if isinstance(value, str) and value.startswith("$copy:"):
            shutil.copyfile(table / value[len("$copy:") :], target)
        else:
            target.write_text(value)
        return
    if selector == "$gap":
        (table / key).unlink()
        return
    path = select_file(table, selector)
    if key == "$text":
        path.write_text(value)
        return
    if key == "$whole":
        path.write_text(value)
        return
    doc = json.loads(path.read_text())
    _set_path(doc, key, value)
    path.write_text(json.dumps(doc, indent=2))


def apply_corruption(table: Path, spec: dict) -> None:
    """spec: {"kind": "file", "selector", "action", "seed"} or {"kind": "json", "edit"}."""
    if spec["kind"] == "file":
        corrupt_file(select_file(table, spec["selector"]), spec["action"], spec.get("seed", 0))
    elif spec["kind"] == "json":
        apply_json_edit(table, tuple(spec["edit"]))
    elif spec["kind"] == "none":
        pass
    else:
        raise ValueError(spec)


def copy_table(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


def make_writable(root: Path) -> None:
    """Undo chmod 000 so a tree can be removed."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                if not os.path.islink(p):
                    os.chmod(p, 0o755)
            except OSError:
                pass


def rmtree(path: Path) -> None:
    if not os.path.lexists(path):
        return
    try:
        os.chmod(path, 0o755)
    except OSError:
        pass
    make_writable(path)
    shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# The worker.
# ------------------------------------------------------------------------------------------------


class Worker:
    def __init__(self, ext: str, root: str, mode: str, out):
        import duckdb

        self.duckdb = duckdb
        self.root = Path(root)
        self.mode = mode
        self.out = out
        self.work = Path(tempfile.mkdtemp(prefix=f"worker-{os.getpid()}-", dir=self.root / "scratch"))
        self.con = duckdb.connect(
            ":memory:",
            config={
                "allow_unsigned_extensions": "true",
                # No downloads: an s3:// or https:// argument must fail locally, not fetch httpfs.
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
            },
        )
        self.con.execute("LOAD " + sql_literal(ext))
        if int(os.environ.get("FUZZ_THREADS") or 0) > 0:
            # Tiny tables: one thread per worker halves the per-statement overhead.
            self.con.execute(f"SET threads = {int(os.environ['FUZZ_THREADS'])}")
        con = self.con
        con.execute("CREATE TABLE fz_base (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
        self.rows = base_rows()
        con.executemany("INSERT INTO fz_base VALUES (?, ?, ?, ?)", self.rows)
        con.execute(
            "CREATE TABLE fz_changes (order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT, "
            "deleted BOOLEAN)"
        )
        con.executemany("INSERT INTO fz_changes VALUES (?, ?, ?, ?, ?)", change_rows())
        con.execute("CREATE VIEW fz_view AS SELECT * FROM fz_base")
        con.execute("CREATE TABLE fz_args (s VARCHAR, i BIGINT, n INTEGER)")
        con.executemany(
            "INSERT INTO fz_args VALUES (?, ?, ?)",
            [("acme", 1, 1), (None, None, None), ("", -1, 0), ("a\x00b", 2**62, 2**31 - 1)],
        )
        con.execute("CREATE TABLE fz_strs (s VARCHAR)")
        strings_file = self.root / "strings.json"
        if strings_file.is_file():
            con.executemany("INSERT INTO fz_strs VALUES (?)", [[s] for s in json.loads(strings_file.read_text())])
        self.oracle = oracle(self.rows)
        changed = {r[0]: r for r in change_rows()}
        after = [r for r in self.rows if r[0] not in changed] + [r[:4] for r in change_rows() if not r[4]]
        self.oracle_after_changes = oracle(after)
        self.rebuild()
        self.fp0 = fingerprint(con)
        con.execute("SELECT * FROM serving_refresh('fz_changes')").fetchall()
        self.fp_refreshed = fingerprint(con)
        assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
        self.rebuild()
        assert fingerprint(con) == self.fp0, "rebuilding from fz_base is not reproducible"
        # The lake layer: built from a clean copy, refreshed to the next snapshot.
        self.lake_s2 = self.root / "lake" / "orders_s2"
        self.lake_s3 = self.root / "lake" / "orders_s3"
        self.fp_lake_built = self.fp_lake_refreshed = None
        if self.lake_s2.is_dir():
            p = self.work / "lake_probe"
            copy_table(self.lake_s2, p)
            con.execute("SELECT * FROM serving_build(?)", ["paimon:" + str(p)]).fetchall()
            self.fp_lake_built = self._lake_fp(p)
            self.fp_lake_built_content = self._lake_fp(p, counters=False)
            self._advance(p)
            con.execute("SELECT * FROM serving_refresh(?)", ["paimon:" + str(p)]).fetchall()
            self.fp_lake_refreshed = self._lake_fp(p)
            self.fp_lake_refreshed_content = self._lake_fp(p, counters=False)
            rmtree(p)
            self.rebuild()
            assert fingerprint(con) == self.fp0
        if mode == "sandbox":
            con.execute("SET allowed_directories = [" + sql_literal(str(self.root)) + "]")
            con.execute("SET enable_external_access = false")
        self.lake_n = 0

    def _lake_fp(self, p: Path, counters: bool = True) -> str:
        # The lake path differs per case; the fingerprint must not depend on it.
        return fingerprint(self.con, str(p), counters)

    def _advance(self, p: Path) -> None:
        """Overlay snapshot 3's files onto a copy of the table at snapshot 2."""
        shutil.copytree(self.lake_s3, p, symlinks=True, dirs_exist_ok=True)

    def rebuild(self) -> None:
        self.con.execute("SELECT * FROM serving_build('fz_base')").fetchall()

    def run_sql(self, case):
        con = self.con
        stmts = case["sql"] if isinstance(case["sql"], list) else [case["sql"]]
        params = [decode(p) for p in case.get("params") or []]
        rows = None
        for i, sql in enumerate(stmts):
            last = i == len(stmts) - 1
            cur = con.execute(sql, params) if (params and last) else con.execute(sql)
            try:
                rows = cur.fetchall()
            except self.duckdb.InvalidInputException as e:
                if "no open result set" in str(e):
                    rows = []
                else:
                    raise
        return rows

    def run_case(self, case) -> dict:
        kind = case.get("kind", "sql")
        res = {"id": case["id"]}
        check = case.get("check") or {}
        refused = decode(check["refused"]) if check.get("refused") is not None else None
        try:
            if kind in ("lake_refresh", "lake_follow"):
                return self.lake_case(case, res)
            rows = self.run_sql(case)
            res["outcome"] = "ok"
            res["nrows"] = len(rows)
            res["sample"] = _short(rows[:3])
            if refused is not None:
                res["wrong"] = f"an expression calling {refused} was accepted; the gate must refuse it"
            if check and check.get("oracle") is not None:
                company = decode(check["oracle"])
                want = self.oracle.get(company, [])
                if [tuple(r) for r in rows] != want:
                    res["wrong"] = (
                        f"answer for company {_short(company, 60)} is {_short(rows)}, oracle says {_short(want)}"
                    )
        except self.duckdb.Error as e:
            res.update(outcome="error", etype=type(e).__name__, msg=str(e))
            if refused is not None and refused not in str(e).lower():
                res["wrong"] = f"the refusal of an expression calling {refused} does not name it: {str(e)[:300]}"
        except Exception as e:  # not a DuckDB error: a Python-level failure (decoding a result...)
            res.update(outcome="pyerror", etype=type(e).__name__, msg=str(e)[:4000], tb=traceback.format_exc()[-4000:])
        self.after(case, res)
        return res

    def after(self, case, res) -> None:
        """Layer checks: unchanged after an error or a read-only call; restorable after a change."""
        con = self.con
        try:
            # A failed statement inside an explicit transaction leaves it open: end it.
            if any(
                s.strip().upper().startswith("BEGIN")
                for s in (case["sql"] if isinstance(case.get("sql"), list) else [case.get("sql") or ""])
            ):
                try:
                    con.execute("ROLLBACK")
                except self.duckdb.Error:
                    pass
            if case.get("func") == "serving_follow" and res["outcome"] == "ok":
                con.execute("SELECT * FROM serving_unfollow()").fetchall()
            fp = fingerprint(con)
            mutating = case.get("mutating", False)
            if fp != self.fp0:
                if (res["outcome"] == "ok" or case.get("may_change")) and mutating:
                    self.rebuild()
                    if fingerprint(con) != self.fp0:
                        res["changed"] = (
                            "rebuilding from fz_base after a successful build/refresh did not restore the layer"
                        )
                else:
                    res["changed"] = (
                        f"serving layer changed after a {'failed' if res['outcome'] != 'ok' else 'read-only'} call"
                    )
                    self.rebuild()
            if case.get("func") == "serving_refresh" and res["outcome"] != "ok" and case.get("deep", True):
                # The layer must also behave: a known refresh gives the recorded result (a failed
                # refresh must not leave a stale in-memory mart behind either).
                con.execute("SELECT * FROM serving_refresh('fz_changes')").fetchall()
                if fingerprint(con) != self.fp_refreshed:
                    res["changed"] = "after the failed call, a known-good refresh no longer gives the recorded result"
                self.rebuild()
                if fingerprint(con) != self.fp0:
                    res["changed"] = (res.get("changed") or "") + "; rebuild does not restore the layer"
        except self.duckdb.Error as e:
            res["broken"] = f"the database is unusable after the case: {type(e).__name__}: {str(e)[:2000]}"

    def _sub(self, res, label, sql, params=None):
        """Runs a follow-up statement of a lake case; its outcome is judged like the case's own."""
        entry = {"step": label}
        try:
            rows = self.con.execute(sql, params).fetchall()
            entry.update(outcome="ok", sample=_short(rows[:1]))
            if label == "serving_unfollow()" and rows and rows[0][3]:
                # The follower's last error is a message the user reads too.
                entry.update(outcome="error", etype="follower last_error", msg=str(rows[0][3]))
        except self.duckdb.Error as e:
            entry.update(outcome="error", etype=type(e).__name__, msg=str(e))
        except Exception as e:
            entry.update(outcome="pyerror", etype=type(e).__name__, msg=str(e)[:4000])
        res.setdefault("steps", []).append(entry)
        return entry

    def lake_case(self, case, res) -> dict:
        """Build from a clean lake table at snapshot 2, add snapshot 3 and corrupt it, then refresh
        it (lake_refresh) or follow it for a moment (lake_follow); ask serving_status (which
        looks at the lake too); the layer must be the clean build's, or the clean refresh's when
        the corruption did not matter, and a clean refresh must land exactly afterwards."""
        con = self.con
        self.lake_n += 1
        p = self.work / f"lake{self.lake_n}"
        copy_table(self.lake_s2, p)
        src = "paimon:" + str(p)
        follow = case["kind"] == "lake_follow"
        try:
            con.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
            if self._lake_fp(p) != self.fp_lake_built:
                res.update(outcome="error", etype="Harness", msg="clean lake build differs from the recorded one")
                res["changed"] = "clean lake build differs from the recorded one"
                return res
            self._advance(p)
            apply_corruption(p, case["corruption"])
            sql = (
                "SELECT * FROM serving_follow(?, every := INTERVAL '10 milliseconds')"
                if follow
                else "SELECT * FROM serving_refresh(?)"
            )
            try:
                cur = con.execute(sql, [src])
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
                res.update(outcome="ok", nrows=len(rows), sample=_short(rows[:1]))
                if not follow:
                    said = dict(zip(names, rows[0], strict=True)).get("lake_snapshot")
                    meta = con.execute("SELECT lake_snapshot FROM serving_meta").fetchone()[0]
                    if said != meta:
                        res["wrong"] = (
                            f"serving_refresh succeeded on the corrupt table reporting lake_snapshot "
                            f"{said!r}, but serving_meta records {meta!r}"
                        )
            except self.duckdb.Error as e:
                res.update(outcome="error", etype=type(e).__name__, msg=str(e))
            except Exception as e:
                res.update(outcome="pyerror", etype=type(e).__name__, msg=str(e)[:4000])
            if follow:
                import time

                time.sleep(0.3)
            self._sub(res, "serving_status()", "SELECT * FROM serving_status()")
            if follow:
                self._sub(res, "serving_unfollow()", "SELECT * FROM serving_unfollow()")
            changed = []
            try:
                fp = self._lake_fp(p)
                if res["outcome"] != "ok" and fp != self.fp_lake_built:
                    changed.append(
                        "the serving layer changed although serving_refresh failed"
                        if not follow
                        else "the serving layer changed although serving_follow failed"
                    )
                elif (
                    res["outcome"] == "ok"
                    and fp != self.fp_lake_built
                    and self._lake_fp(p, counters=False)
                    not in (self.fp_lake_refreshed_content, self.fp_lake_built_content)
                ):
                    changed.append(
                        "after the call on the corrupt table the layer is neither the snapshot-2 build "
                        "nor the snapshot-3 refresh"
                    )
                # Restore the clean table at snapshot 3: a refresh must now land exactly.
                rmtree(p)
                copy_table(self.lake_s2, p)
                self._advance(p)
                if fp != self.fp_lake_refreshed:
                    con.execute("SELECT * FROM serving_refresh(?)", [src]).fetchall()
                    if self._lake_fp(p, counters=False) != self.fp_lake_refreshed_content:
                        changed.append("then, on the repaired table, a refresh does not give the snapshot-3 layer")
                if changed:
                    res["changed"] = "; ".join(changed)
            except self.duckdb.Error as e:
                res["broken"] = f"after the lake case: {type(e).__name__}: {str(e)[:2000]}"
        finally:
            try:
                con.execute("SELECT * FROM serving_unfollow()").fetchall()
            except self.duckdb.Error:
                pass
            rmtree(p)
            try:
                self.rebuild()
                if fingerprint(con) != self.fp0:
                    res["changed"] = (res.get("changed") or "") + "; rebuild from fz_base does not restore the layer"
            except self.duckdb.Error as e:
                res["broken"] = f"rebuild after the lake case failed: {type(e).__name__}: {str(e)[:2000]}"
        return res


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _short(v, limit=300) -> str:
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"...<{len(s)} chars>"


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ext", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--mode", default="plain", choices=["plain", "sandbox"])
    args = ap.parse_args()
    # Private protocol channel; whatever else writes to fd 1 ends up on stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        w = Worker(args.ext, args.root, args.mode, out)
    except Exception:
        out.write(json.dumps({"setup_failed": traceback.format_exc()}) + "\n")
        raise
    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        case = json.loads(line)
        res = w.run_case(case)
        out.write(json.dumps(res, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
