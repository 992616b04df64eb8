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

Error messages of the extension that do not name the offending value (the README's promise: every
bad source names the problem and the value), that echo a huge one back, that show a value cut at
a NUL as if whole or call a table that cannot be read missing, fail the test too (message
findings; FUZZ_STRICT_MESSAGES=0 lists them without failing, while fixing them).
test_a_vague_message_is_a_finding holds the judge to that. Every problem is listed with a
reproducer; build/fuzz-report.json has them all.
test_minimal_reproducers keeps the smallest SQL of each failure found so far.

Knobs (environment): FUZZ_SEED (1), FUZZ_CASES (random cases, 300), FUZZ_CORPUS_FRACTION (the
share of the fixed corpus run, a seeded sample; 1: all of it), FUZZ_SECONDS (stop drawing
random cases after this long), FUZZ_CASE_TIMEOUT (seconds per case, 4; x3 for lake refresh/follow
cases and 1 MB arguments), FUZZ_HANG_CAP (hangs per function and hazard before the rest of that
hazard is skipped, 1), FUZZ_THREADS (DuckDB threads per worker, 1; 0 = DuckDB's default),
FUZZ_WORKER_MEMORY_MB (6144), FUZZ_STRICT_MESSAGES (1), FUZZ_REPORT (path), FUZZ_DUMP (every outcome,
JSON lines), FUZZ_PROGRESS, FUZZ_SKIP_HAZARDS=1 (leave out FIFO / device / huge-path cases while
fixing the rest), FUZZ_TEST_TIMEOUT (900).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, require_extension, sql_literal
from support import fuzz_worker as fw
from support.fuzz_cases import Case, Generator, sandbox_cases
from support.fuzz_env import Env, build_env
from support.fuzz_runner import BAD_MESSAGE_MARKERS, Result, format_findings, run_all, short_msg, summarize

# Runs its cases in worker processes of its own, each against a time budget: make test runs it in
# its serial pass, alone (conftest.py).
pytestmark = pytest.mark.serial

# The cases, their environment, the worker processes and the judging live in support/fuzz_*.py;
# this file holds the tests and the knobs that are theirs.
SEED = int(os.environ.get("FUZZ_SEED", "1"))
N_RANDOM = int(os.environ.get("FUZZ_CASES", "300"))
CORPUS_FRACTION = float(os.environ.get("FUZZ_CORPUS_FRACTION", "1"))
STRICT_MESSAGES = os.environ.get("FUZZ_STRICT_MESSAGES", "1") != "0"
TOTAL_TIMEOUT = int(os.environ.get("FUZZ_TEST_TIMEOUT", "900"))

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


@pytest.mark.timeout(TOTAL_TIMEOUT)
def test_hostile_arguments_never_crash(env, tmp_path):
    t0 = time.monotonic()
    rng = random.Random(SEED)
    gen = Generator(env, rng)
    corpus = gen.corpus()
    if CORPUS_FRACTION < 1:  # a seeded sample of the corpus (the sandbox lane's cases kept whole)
        corpus = random.Random(SEED).sample(corpus, max(1, round(len(corpus) * CORPUS_FRACTION)))
    cases = corpus + sandbox_cases(gen)
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
    out = Path(os.environ.get("FUZZ_REPORT", ROOT / "build" / "fuzz-report.json"))
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


@pytest.mark.parametrize(
    "value,message,finding",
    [
        # The value named: no finding (a dotted name's part or the path after paimon: count too).
        ("no_such_table", "serving_build: source 'no_such_table' does not exist or cannot be read", None),
        ("paimon:/data/t", "serving_build: Paimon table '/data/t': no paimon table there", None),
        ("db.orders", "serving_build: source 'orders' does not exist", None),
        # Vague: the problem without the value.
        ("no_such_table", "serving_build: the source does not exist", "does not name the value"),
        ("paimon:/data/t", "serving_build: column 'company' is DECIMAL(100, ...)", "does not name the value"),
        # A value cut at its NUL shown as if whole; shown up to the NUL with the cut marked is fine.
        ("a\x00b", "serving_build: parameter 'source' = 'a': it contains a NUL character", "cut at its NUL"),
        ("a\x00b", "serving_build: parameter 'source' = 'a\\0…': it contains a NUL character", None),
        # A huge value echoed back.
        ("x" * 70_000, "serving_build: source '" + "x" * 70_000 + "' does not exist", "characters long"),
    ],
)
def test_a_vague_message_is_a_finding(value, message, finding):
    """The judge of the messages (support/fuzz_runner.py), on messages written here: a message of
    the extension that does not name the offending value is a finding, and so fails the fuzz."""
    case = Case(1, "SELECT * FROM serving_build(?)", [value], ["v"], "serving_build", value=value)
    hard, soft = summarize([Result(case, {"outcome": "error", "etype": "InvalidInputException", "msg": message})])
    assert hard == []
    found = [p for _, p in soft]
    if finding is None:
        assert found == [], found
    else:
        assert len(found) == 1 and finding in found[0], found


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
