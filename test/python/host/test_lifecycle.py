"""Database lifecycle with the extension loaded: close, reopen, locks, WAL, thread release.

Each scenario runs in a fresh Python subprocess with a timeout, because the failure modes
are hangs (a reopen waiting forever for an instance that never dies), file locks and
leaked threads, none of which a shared pytest process could observe reliably.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import gen_rows, oracle, write_csv

TIMEOUT = 60

PRELUDE = textwrap.dedent(
    """
    import datetime, json, os, subprocess, sys, time
    import duckdb
    EXT = sys.argv[1]
    CFG = {'allow_unsigned_extensions': 'true'}
    COLUMNS = "{'order_id': 'BIGINT', 'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'}"

    def lit(s):
        return "'" + s.replace("'", "''") + "'"

    def open_loaded(db):
        c = duckdb.connect(db, config=CFG)
        c.execute("LOAD " + lit(EXT))
        return c

    def load_src(c, csv_path):
        c.execute("CREATE OR REPLACE TABLE src AS SELECT * FROM read_csv(" + lit(csv_path)
                  + ", header = true, quote = '\\"', escape = '\\"', columns = " + COLUMNS + ")")

    def enc(rows):
        return [[v.isoformat() if isinstance(v, datetime.date) else (str(v) if isinstance(v, int) else v)
                 for v in r] for r in rows]

    def done(obj):
        print("RESULT " + json.dumps(obj))
    """
)


def run_py(script: str, *args, timeout: int = TIMEOUT) -> dict:
    code = PRELUDE + textwrap.dedent(script)
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"subprocess hung for {timeout}s (stdout={e.stdout!r}, stderr={e.stderr!r})")
    assert p.returncode == 0, f"subprocess failed (rc={p.returncode}):\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    results = [line[len("RESULT ") :] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, f"no result from subprocess:\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return json.loads(results[0])


def dec(rows):
    out = []
    for r in rows:
        out.append(
            tuple(
                datetime.date.fromisoformat(v)
                if isinstance(v, str) and len(v) == 10 and v[4] == "-" and v[7] == "-"
                else (int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v)
                for v in r
            )
        )
    return out


@pytest.fixture
def dataset(tmp_path):
    rows, companies = gen_rows(61, 20_000, 12, 90)
    csv_path = write_csv(tmp_path / "orders.csv", rows)
    per_company, cells = oracle(rows)
    mart = sorted((c, d, r) for (c, d), r in cells.items())
    return rows, companies, str(csv_path), per_company, mart


def wal_of(db: Path) -> Path:
    return Path(str(db) + ".wal")


def test_same_process_close_and_reopen_then_other_process(ext_path, tmp_path, dataset):
    """(a) build, close, reopen in the same process; (b) then a new process reads, no WAL left."""
    rows, _companies, csv_path, per_company, mart = dataset
    db = tmp_path / "life.duckdb"
    res = run_py(
        """
        db, csv_path = sys.argv[2], sys.argv[3]
        c = open_loaded(db)
        load_src(c, csv_path)
        summary = c.execute("SELECT fct_rows, mart_rows FROM serving_build('src')").fetchone()
        c.close()
        c = duckdb.connect(db, config=CFG)
        mart = c.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
        c.execute("LOAD " + lit(EXT))
        companies = [r[0] for r in c.execute("SELECT DISTINCT company FROM mart_daily").fetchall()]
        dash = {co: enc(c.execute("SELECT * FROM serving_dashboard(?)", [co]).fetchall()) for co in companies}
        olap = {co: enc(c.execute("SELECT * FROM serving_olap(?)", [co]).fetchall()) for co in companies}
        # Connected, streamhouse checkpoints its own writes soon after its last call; the close
        # then writes nothing (README: lifecycle).
        deadline = time.monotonic() + 3.0
        while os.path.exists(db + ".wal") and time.monotonic() < deadline:
            time.sleep(0.005)
        wal_before_close = os.path.exists(db + ".wal")
        c.close()
        time.sleep(0.2)
        done({"summary": list(summary), "mart": enc(mart), "dash": dash, "olap": olap,
              "wal_before_close": wal_before_close, "wal_after_close": os.path.exists(db + ".wal")})
        """,
        ext_path,
        db,
        csv_path,
    )
    assert res["summary"] == [len(rows), len(mart)]
    assert dec(res["mart"]) == mart
    assert set(res["dash"]) == set(per_company)
    for company, want in per_company.items():
        assert dec(res["dash"][company]) == want, company
        assert dec(res["olap"][company]) == want, company

    # (b) The layer was checkpointed while connected, and the close left no WAL behind.
    assert not res["wal_before_close"], "a .wal file 3 s after the last call: the layer was not checkpointed"
    assert not res["wal_after_close"], "a .wal file appeared after the close"
    assert not wal_of(db).exists()
    res = run_py(
        """
        db = sys.argv[2]
        c = duckdb.connect(db)  # read-write, no extension
        mart = c.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
        n_fct = c.execute("SELECT count(*) FROM fct_orders").fetchone()[0]
        meta = c.execute("SELECT source FROM serving_meta").fetchall()
        c.close()
        done({"mart": enc(mart), "n_fct": n_fct, "meta": meta})
        """,
        ext_path,
        db,
    )
    assert dec(res["mart"]) == mart
    assert res["n_fct"] == len(rows)
    assert res["meta"] == [["src"]]
    assert not wal_of(db).exists()


@pytest.mark.parametrize("reopen", ["read_only", "default_config"])
def test_same_process_reopen_with_other_settings(ext_path, tmp_path, dataset, reopen):
    """Closing the last connection closes the database within a bounded time (the watchdog's
    poll, milliseconds): a same-process reopen with different settings (read-only, or without
    allow_unsigned_extensions) then works exactly as it does without the extension loaded.
    Until then DuckDB itself refuses the different configuration (documented in the README)."""
    _rows, _companies, csv_path, _per_company, mart = dataset
    db = tmp_path / "reopen.duckdb"
    res = run_py(
        """
        db, csv_path, reopen = sys.argv[2], sys.argv[3], sys.argv[4]

        def reopen_and_read(path, table):
            deadline = time.monotonic() + 1.0
            while True:
                try:
                    if reopen == "read_only":
                        c = duckdb.connect(path, read_only=True)
                    else:
                        c = duckdb.connect(path)
                    rows = c.execute("SELECT * FROM " + table + " ORDER BY ALL").fetchall()
                    c.close()
                    return rows, None
                except duckdb.Error as e:
                    if "different configuration" not in str(e) or time.monotonic() > deadline:
                        return None, str(e)
                    time.sleep(0.002)

        # Control: the same sequence without the extension.
        control = db + ".control"
        c = duckdb.connect(control, config=CFG)
        load_src(c, csv_path)
        c.close()
        control_rows, control_error = reopen_and_read(control, "src")

        c = open_loaded(db)
        load_src(c, csv_path)
        c.execute("SELECT * FROM serving_build('src')").fetchall()
        c.close()
        mart, error = reopen_and_read(db, "mart_daily")
        done({"control_ok": control_rows is not None, "control_error": control_error,
              "mart": None if mart is None else enc(mart), "error": error})
        """,
        ext_path,
        db,
        csv_path,
        reopen,
    )
    assert res["control_ok"], f"control without the extension failed: {res['control_error']}"
    assert res["error"] is None, f"immediate reopen after close failed: {res['error']}"
    assert dec(res["mart"]) == mart


def test_child_process_opens_file_right_after_close(ext_path, tmp_path, dataset):
    """(c) The parent closes the database and immediately starts a child that opens it
    read-write: the file lock must already be released (the child does not retry)."""
    rows, _companies, csv_path, _per_company, mart = dataset
    db = tmp_path / "lock.duckdb"
    res = run_py(
        """
        db, csv_path = sys.argv[2], sys.argv[3]
        c = open_loaded(db)
        load_src(c, csv_path)
        c.execute("SELECT * FROM serving_build('src')").fetchall()
        c.close()
        child = (
            "import duckdb, sys, json\\n"
            "c = duckdb.connect(sys.argv[1])\\n"
            "n = c.execute('SELECT count(*), sum(revenue) FROM mart_daily').fetchone()\\n"
            "c.execute('CREATE TABLE child_was_here AS SELECT 1 AS x')\\n"
            "c.close()\\n"
            "print(json.dumps([n[0], str(n[1])]))\\n"
        )
        p = subprocess.run([sys.executable, "-c", child, db], capture_output=True, text=True, timeout=30)
        done({"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr})
        """,
        ext_path,
        db,
        csv_path,
    )
    assert res["rc"] == 0, f"child could not open the database after close:\n{res['stderr']}"
    n, total = json.loads(res["stdout"])
    assert n == len(mart)
    assert int(total) == sum(r for *_, r in rows)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_repeated_open_load_build_close_releases_threads(ext_path, tmp_path, kind):
    """(d) 20 cycles of open/LOAD/build/close: the extension's connection and watchdog thread
    are released each time, so the process's thread count does not grow."""
    res = run_py(
        """
        kind, tmp = sys.argv[2], sys.argv[3]

        def threads():
            with open('/proc/self/status') as f:
                for line in f:
                    if line.startswith('Threads:'):
                        return int(line.split()[1])

        def watchdogs():
            n = 0
            for t in os.listdir('/proc/self/task'):
                try:
                    with open('/proc/self/task/' + t + '/comm') as f:
                        n += f.read().startswith('streamhouse')
                except OSError:
                    pass
            return n

        def settle(limit):
            deadline = time.time() + 1
            while threads() > limit and time.time() < deadline:
                time.sleep(0.01)
            return threads()

        baseline = threads()
        counts, builds = [], []
        for i in range(20):
            db = ':memory:' if kind == 'memory' else os.path.join(tmp, 'cycle.duckdb')
            c = open_loaded(db)
            c.execute("CREATE OR REPLACE TABLE src AS SELECT i AS order_id, 'c' || (i % 7) AS company, "
                      "DATE '2024-01-01' + CAST(i % 30 AS INTEGER) AS order_day, i - 500 AS revenue "
                      "FROM range(" + str(1000 + i) + ") t(i)")
            builds.append(c.execute("SELECT fct_rows FROM serving_build('src')").fetchone()[0])
            c.close()
            counts.append(settle(baseline))
        done({"baseline": baseline, "counts": counts, "final": settle(baseline),
              "watchdogs": watchdogs(), "builds": builds})
        """,
        ext_path,
        kind,
        tmp_path,
    )
    assert res["builds"] == [1000 + i for i in range(20)]
    assert res["watchdogs"] == 0, f"{res['watchdogs']} streamhouse watchdog thread(s) still running"
    assert res["final"] <= res["baseline"], res
    assert max(res["counts"]) <= res["baseline"], f"thread count grew over the cycles: {res}"


def test_file_database_rebuild_across_processes(ext_path, tmp_path, dataset):
    """Build in one process, rebuild from another source in a second; a third sees only the second."""
    rows, _companies, csv_path, _per_company, _mart = dataset
    rows2, _companies2 = gen_rows(62, 5_000, 5, 20)
    csv2 = write_csv(tmp_path / "orders2.csv", rows2)
    per_company2, _cells2 = oracle(rows2)
    db = tmp_path / "multi.duckdb"
    script = """
        db, csv_path = sys.argv[2], sys.argv[3]
        c = open_loaded(db)
        load_src(c, csv_path)
        s = c.execute("SELECT fct_rows FROM serving_build('src')").fetchone()[0]
        c.close()
        done({"fct_rows": s})
        """
    assert run_py(script, ext_path, db, csv_path)["fct_rows"] == len(rows)
    assert run_py(script, ext_path, db, csv2)["fct_rows"] == len(rows2)
    res = run_py(
        """
        db = sys.argv[2]
        c = open_loaded(db)
        companies = [r[0] for r in c.execute("SELECT DISTINCT company FROM mart_daily").fetchall()]
        dash = {co: enc(c.execute("SELECT * FROM serving_dashboard(?)", [co]).fetchall()) for co in companies}
        c.close()
        done({"dash": dash})
        """,
        ext_path,
        db,
    )
    assert set(res["dash"]) == set(per_company2)
    for company, want in per_company2.items():
        assert dec(res["dash"][company]) == want


def test_reopen_race_never_leaves_extension_unusable(ext_path):
    """Close and reopen (same settings) a named in-memory database many times.

    README (lifecycle): the watchdog lets go only after two looks in a row (2 ms apart) found its
    connections alone, so a reopen within 1 ms of the close always gets the still-open database
    with its build ("never for x under 1 ms"); a reopen ~100 ms later finds it released (a new,
    empty database: serving_dashboard says to run serving_build). In between, a reopen may land
    in the instant of the release; the extension must then say so clearly, and closing and
    reopening must make it usable again.

    The gap is measured from close() returning to connect() returning (an upper bound of the time
    the watchdog could see its connections alone). Every reopen with a gap under 1 ms must keep
    the build: a watchdog that let go on its first look (any look 0-2 ms after the close) would
    lose roughly a quarter of them. Every reopen 150 ms later must find the database released:
    a watchdog that never lets go would keep it."""
    res = run_py(
        """
        SHORT, MAX_CYCLES, LONG = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        name = ':memory:race'
        SRC = ("CREATE OR REPLACE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, "
               "DATE '2024-01-01' + CAST(i % 5 AS INTEGER) AS order_day, i AS revenue FROM range(100) t(i)")

        def reopen(gap):
            global c
            c.close()
            t0 = time.perf_counter()
            time.sleep(gap)
            c = duckdb.connect(name, config=CFG)
            waited = time.perf_counter() - t0
            c.execute("LOAD " + lit(EXT))
            try:
                n = len(c.execute("SELECT * FROM serving_dashboard('c1')").fetchall())
                return waited, ("kept" if n == 5 else "wrong row count %d" % n)
            except duckdb.Error as e:
                if "run serving_build" in str(e):
                    return waited, "fresh"
                if "reopen the database and LOAD streamhouse again" in str(e):
                    c.close()
                    time.sleep(0.1)  # the instance is gone once its last user connection closes
                    c = open_loaded(name)
                    try:
                        c.execute("SELECT * FROM serving_dashboard('c1')").fetchall()
                        return waited, "released, then not recovered: the build was still served"
                    except duckdb.Error as e2:
                        if "run serving_build" not in str(e2):
                            return waited, "released, then not recovered: " + str(e2)
                    return waited, "released"
                return waited, "error: " + str(e)

        c = open_loaded(name)
        c.execute(SRC)
        c.execute("SELECT * FROM serving_build('src')").fetchall()
        import random
        rng = random.Random(7)
        short = {}   # outcome -> count, reopens within 1 ms of the close
        longer = {}  # the same for reopens that took longer (a busy machine)
        failures = []
        # Until SHORT reopens came within 1 ms of the close: on a loaded machine (CPU steal) many
        # take longer, and only the quick ones test the claim.
        for trial in range(MAX_CYCLES):
            if short and sum(short.values()) >= SHORT:
                break
            waited, outcome = reopen(rng.uniform(0, 0.0008))
            bucket = short if waited < 0.001 else longer
            bucket[outcome] = bucket.get(outcome, 0) + 1
            if outcome not in ("kept", "fresh", "released"):
                failures.append(outcome)
            if outcome != "kept":
                c.execute(SRC)
                c.execute("SELECT * FROM serving_build('src')").fetchall()
        late = {}
        for trial in range(LONG):
            waited, outcome = reopen(0.15)
            late[outcome] = late.get(outcome, 0) + 1
            if outcome != "kept":
                c.execute(SRC)
                c.execute("SELECT * FROM serving_build('src')").fetchall()
        c.close()
        done({"short": short, "longer": longer, "late": late, "failures": failures})
        """,
        ext_path,
        750,
        6000,
        8,
        timeout=240,
    )
    short, longer, late = res["short"], res["longer"], res["late"]
    assert res["failures"] == [], (
        f"a close/reopen cycle left the extension unusable or served wrong data (reopens within 1 ms: "
        f"{short}, slower: {longer}); first: {res['failures'][0]}"
    )
    n_short = sum(short.values())
    assert n_short >= 750, (
        f"only {n_short} of 6000 reopens came within 1 ms of the close (slower: {longer}): the machine is "
        f"too loaded for this test to show anything"
    )
    assert short == {"kept": n_short}, (
        f"README: a reopen within 1 ms of close() never finds the extension released and keeps the open "
        f"database; reopens within 1 ms: {short} (slower ones: {longer})"
    )
    assert late == {"fresh": 8}, (
        f"README: the watchdog lets go once its connections are alone on two looks in a row (a few ms); "
        f"a reopen 150 ms after close() must find a new, empty database: {late}"
    )


# The DuckDB C API of the duckdb module itself, through ctypes: a database handle can outlive
# every connection there (Python's duckdb.connect always pairs them), which is how a binding
# such as Node's DuckDBInstance or a C program holds a database.
C_API = """
    import ctypes

    def c_api():
        for m in list(sys.modules.values()):
            f = getattr(m, "__file__", None) or ""
            if f.endswith(".so") and "duckdb" in os.path.basename(f):
                try:
                    lib = ctypes.CDLL(f)
                    lib.duckdb_open_ext
                    return lib
                except (OSError, AttributeError):
                    pass
        raise SystemExit("the duckdb module exports no DuckDB C API")

    L = c_api()
    vp, P = ctypes.c_void_p, ctypes.POINTER

    class Result(ctypes.Structure):  # duckdb_result: 6 words, padded generously
        _fields_ = [("words", ctypes.c_uint64 * 16)]

    for fn, args, res in [
        ("duckdb_create_config", [P(vp)], ctypes.c_int), ("duckdb_destroy_config", [P(vp)], None),
        ("duckdb_set_config", [vp, ctypes.c_char_p, ctypes.c_char_p], ctypes.c_int),
        ("duckdb_open_ext", [ctypes.c_char_p, P(vp), vp, P(ctypes.c_char_p)], ctypes.c_int),
        ("duckdb_connect", [vp, P(vp)], ctypes.c_int), ("duckdb_disconnect", [P(vp)], None),
        ("duckdb_close", [P(vp)], None), ("duckdb_query", [vp, ctypes.c_char_p, P(Result)], ctypes.c_int),
        ("duckdb_result_error", [P(Result)], ctypes.c_char_p), ("duckdb_destroy_result", [P(Result)], None),
        ("duckdb_row_count", [P(Result)], ctypes.c_uint64), ("duckdb_column_count", [P(Result)], ctypes.c_uint64),
        ("duckdb_value_int64", [P(Result), ctypes.c_uint64, ctypes.c_uint64], ctypes.c_int64),
    ]:
        getattr(L, fn).argtypes, getattr(L, fn).restype = args, res

    def c_open(path):
        cfg, db, err = vp(), vp(), ctypes.c_char_p()
        assert L.duckdb_create_config(ctypes.byref(cfg)) == 0
        L.duckdb_set_config(cfg, b"allow_unsigned_extensions", b"true")
        state = L.duckdb_open_ext(path.encode(), ctypes.byref(db), cfg, ctypes.byref(err))
        L.duckdb_destroy_config(ctypes.byref(cfg))
        assert state == 0, err.value
        return db

    def c_connect(db):
        con = vp()
        assert L.duckdb_connect(db, ctypes.byref(con)) == 0
        return con

    def c_query(con, sql):
        # ("ok", rows of BIGINT columns) or ("error", message)
        r = Result()
        state = L.duckdb_query(con, sql.encode(), ctypes.byref(r))
        try:
            if state != 0:
                return ["error", L.duckdb_result_error(ctypes.byref(r)).decode()]
            cols, n = L.duckdb_column_count(ctypes.byref(r)), L.duckdb_row_count(ctypes.byref(r))
            return ["ok", [[L.duckdb_value_int64(ctypes.byref(r), c, i) for c in range(cols)] for i in range(n)]]
        finally:
            L.duckdb_destroy_result(ctypes.byref(r))

    def watchdogs():
        n = 0
        for t in os.listdir('/proc/self/task'):
            try:
                with open('/proc/self/task/' + t + '/comm') as f:
                    n += f.read().startswith('streamhouse')
            except OSError:
                pass
        return n
"""

RELEASED = (
    "the extension's connection to this database was released because every other connection closed; "
    "reopen the database and LOAD streamhouse again"
)


def test_connection_released_error_is_deterministic_and_reopen_recovers(ext_path, tmp_path):
    """README (lifecycle): once the extension's connections are the database's last ones the
    watchdog releases them; a serving function called after that reports that the connection was
    released, and closing every connection and reopening makes the database usable again.

    Made deterministic with a database handle that outlives its connections (the C API, as Node's
    DuckDBInstance or a C program hold one): build, disconnect the only user connection while the
    database stays open, wait until the watchdog thread has let go (it exits then), connect again
    to the same database. Every serving function must give the released error (none may run on a
    dangling connection or hang) and nothing may change; after closing the database and opening
    the file again, LOAD serves the build that was committed before, equal to a Python oracle."""
    res = run_py(
        textwrap.dedent(C_API)
        + textwrap.dedent("""
        db_path = sys.argv[2]
        DASH = ("SELECT (order_day - DATE '2024-01-01')::BIGINT, revenue::BIGINT "
                "FROM serving_dashboard('c1')")
        db = c_open(db_path)
        con = c_connect(db)
        out = {"setup": [
            c_query(con, "LOAD " + lit(EXT)),
            c_query(con, "CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, "
                         "DATE '2024-01-01' + CAST(i % 5 AS INTEGER) AS order_day, i AS revenue FROM range(100) t(i)"),
            c_query(con, "SELECT fct_rows FROM serving_build('src')"),
        ]}
        out["before"] = c_query(con, DASH)
        out["watchdogs_before"] = watchdogs()
        L.duckdb_disconnect(ctypes.byref(con))
        t0 = time.time()
        while watchdogs() and time.time() - t0 < 20:
            time.sleep(0.005)
        out["watchdogs_after"] = watchdogs()
        con = c_connect(db)  # the same, still open database
        calls = ["SELECT count(*) FROM serving_dashboard('c1')", "SELECT count(*) FROM serving_olap('c1')",
                 "SELECT count(*) FROM serving_explain('c1')", "SELECT count(*) FROM serving_status()",
                 "SELECT count(*) FROM serving_reconcile()", "SELECT count(*) FROM serving_build('src')",
                 "SELECT count(*) FROM serving_refresh('src')", "SELECT count(*) FROM serving_unfollow()"]
        out["released"] = {sql: c_query(con, sql) for sql in calls}
        out["mart_after_errors"] = c_query(con, "SELECT count(*), sum(revenue)::BIGINT FROM mart_daily")
        L.duckdb_disconnect(ctypes.byref(con))
        L.duckdb_close(ctypes.byref(db))
        db = c_open(db_path)
        con = c_connect(db)
        out["load_again"] = c_query(con, "LOAD " + lit(EXT))
        out["reopened"] = c_query(con, DASH)
        L.duckdb_disconnect(ctypes.byref(con))
        L.duckdb_close(ctypes.byref(db))
        done(out)
        """),
        ext_path,
        tmp_path / "released.duckdb",
    )
    # oracle: company c1 = orders i % 3 == 1 over range(100), day offset i % 5, revenue i
    sums: dict = {}
    for i in range(100):
        if i % 3 == 1:
            sums[i % 5] = sums.get(i % 5, 0) + i
    want = sorted(([d, r] for d, r in sums.items()), key=lambda dr: (-dr[1], dr[0]))
    assert res["setup"] == [["ok", []], ["ok", [[100]]], ["ok", [[100]]]], res["setup"]
    assert res["before"] == ["ok", want]
    assert res["watchdogs_before"] == 1
    assert res["watchdogs_after"] == 0, "the watchdog never let go of a database whose user connections all closed"
    for sql, (kind, payload) in res["released"].items():
        assert kind == "error" and RELEASED in payload, f"{sql} after the release: {kind} {payload!r}"
    assert res["mart_after_errors"] == ["ok", [[15, sum(range(100))]]]
    assert res["load_again"] == ["ok", []]
    assert res["reopened"] == ["ok", want], "close every connection and reopen: the build must be served again"


BUILD_AND_EXIT = """
    db, csv_path, load = sys.argv[2], sys.argv[3], sys.argv[4] == "load"
    c = open_loaded(db) if load else duckdb.connect(db)
    load_src(c, csv_path)
    if load:
        c.execute("SELECT * FROM serving_build('src')").fetchall()
    done({})
    # The process exits here without closing the connection.
    """


def test_process_exit_without_close_loses_nothing(ext_path, tmp_path, dataset):
    """Exiting without close: the extension runs no DuckDB code at exit (DuckDB's static state
    is being torn down; a checkpoint there crashed the CLI), so the last changes may stay in the
    WAL (README: lifecycle). Nothing may be lost and no lock may remain: a new process opens the
    file read-write and replays the WAL."""
    _rows, _companies, csv_path, _per_company, mart = dataset
    # Control: without the extension, DuckDB checkpoints on exit and leaves no WAL.
    control = tmp_path / "control.duckdb"
    run_py(BUILD_AND_EXIT, ext_path, control, csv_path, "plain")
    assert control.exists() and not wal_of(control).exists(), "control: plain DuckDB left a WAL"

    db = tmp_path / "noclose.duckdb"
    run_py(BUILD_AND_EXIT, ext_path, db, csv_path, "load")
    wal_left = wal_of(db).exists()
    # Whatever happened, no data may be lost: a new process sees the complete build.
    res = run_py(
        """
        c = duckdb.connect(sys.argv[2])
        mart = c.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall()
        c.close()
        done({"mart": enc(mart)})
        """,
        ext_path,
        db,
    )
    assert dec(res["mart"]) == mart
    # After that clean open/close the WAL has been folded into the file.
    assert not wal_of(db).exists(), f"WAL still present after a plain reopen (was left at exit: {wal_left})"
