"""Live serving (issue 9): closing the database while following releases it (another process
opens the file), whatever the file holds is exactly one snapshot's state, and a reopen does not
resume following. The scenario runs in a fresh Python process (CLOSE_SCRIPT); its oracle is the
pure-Python merge of the commits it wrote (support/lake_util.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

# The child imports support.lake_util from test/python (this file's parent's parent).
TEST_PYTHON = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------
# Closing the database while following
# --------------------------------------------------------------------------------------------

CLOSE_SCRIPT = r"""
import datetime, json, os, subprocess, sys, time
import duckdb
ext, root, db, test_dir = sys.argv[1:5]
sys.path.insert(0, test_dir)
from support.lake_util import Warehouse, oracle_partial_update
import pyarrow as pa

CFG = {'allow_unsigned_extensions': 'true'}
ORDERS = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("company", pa.string()),
                    ("order_day", pa.date32()), ("revenue", pa.int64())])
D = datetime.date(2026, 11, 1)
out = {}

def open_loaded(path):
    c = duckdb.connect(path, config=CFG)
    c.execute("LOAD '" + ext.replace("'", "''") + "'")
    return c

def follower_threads():
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().startswith("streamhouse-fol")
        except OSError:
            pass
    return n

def wait(pred, timeout):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True

def snap(c):
    return c.execute("SELECT lake_snapshot FROM serving_status()").fetchone()[0]

wh = Warehouse(root)
t = wh.create("orders", ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
t.commit([{"order_id": i, "company": ["acme", "globex", "O'Reilly"][i % 3],
           "order_day": D + datetime.timedelta(days=i % 5), "revenue": i} for i in range(1, 5001)])
src = "paimon:" + wh.path("orders")

# (a) an in-memory database closed while following: its follower thread ends
m = open_loaded(":memory:")
m.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
m.execute("SELECT * FROM serving_follow(?, every := INTERVAL '20 ms')", [src]).fetchall()
# A new thread names itself once it runs: give it a moment to show up.
wait(lambda: follower_threads() == 1, 2)
out["threads_while_following"] = follower_threads()
m.close()
out["memory_follower_gone"] = wait(lambda: follower_threads() == 0, 5)

# (b) a file database: follow, catch up, then close right after a large commit (an apply is
# likely running when the user's connection goes away)
c = open_loaded(db)
c.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
c.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src]).fetchall()
t.commit([{"order_id": i, "company": None, "order_day": None, "revenue": 2 * i} for i in range(1, 5001, 7)])
out["caught_up"] = wait(lambda: snap(c) == 2, 20)
t.commit([{"order_id": i, "company": "globex", "order_day": None, "revenue": None} for i in range(1, 5001, 2)]
         + [{"order_id": i, "company": "initech", "order_day": D, "revenue": 3} for i in range(30000, 40000)])
time.sleep(0.06)
c.close()
closed_at = time.monotonic()
out["file_follower_gone"] = wait(lambda: follower_threads() == 0, 5)

# another process opens the file read-write (no extension): the lock was released
child = subprocess.run([sys.executable, "-c", '''
import duckdb, json, sys, time
db = sys.argv[1]
t0 = time.monotonic()
while True:
    try:
        c = duckdb.connect(db)
        break
    except duckdb.Error as e:
        if time.monotonic() - t0 > 10:
            print(json.dumps({"error": str(e)})); sys.exit(0)
        time.sleep(0.01)
waited = time.monotonic() - t0
snapshot = c.execute("SELECT lake_snapshot FROM serving_meta").fetchone()[0]
mart = c.execute("SELECT company, order_day::VARCHAR, revenue::VARCHAR FROM mart_daily ORDER BY ALL").fetchall()
c.close()
print(json.dumps({"waited": waited, "snapshot": snapshot, "mart": mart}))
''', db], capture_output=True, text=True, timeout=60)
out["child_started_after"] = time.monotonic() - closed_at
out["child"] = json.loads(child.stdout.strip().splitlines()[-1]) if child.stdout.strip() else {"stderr": child.stderr}

# reopen in this process: nothing follows until asked again
c = open_loaded(db)
s = c.execute("SELECT following, follow_every_ms, lake_snapshot FROM serving_status()").fetchone()
out["reopened_status"] = list(s)
t.commit([{"order_id": 70000, "company": "acme", "order_day": D, "revenue": 11}])
time.sleep(0.5)
out["after_commit"] = list(c.execute(
    "SELECT following, lake_snapshot, lake_latest_snapshot, lag_snapshots FROM serving_status()").fetchone())
out["refollow"] = list(c.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src]).fetchone())
out["refollow_caught_up"] = wait(lambda: snap(c) == 4, 20)
out["reconcile"] = c.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0]
c.close()
out["final_follower_gone"] = wait(lambda: follower_threads() == 0, 5)

def mart_at(k):
    cells = {}
    for r in oracle_partial_update(t.commits[:k], key="order_id"):
        key = (r["company"], r["order_day"].isoformat())
        cells[key] = cells.get(key, 0) + r["revenue"]
    return sorted([c, d, str(v)] for (c, d), v in cells.items())

out["oracle_marts"] = {k: mart_at(k) for k in range(1, len(t.commits) + 1)}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.timeout(120)
def test_close_while_following_releases_the_file_and_does_not_resume(ext_path, tmp_path):
    db = tmp_path / "live.duckdb"
    try:
        p = subprocess.run(
            [sys.executable, "-c", CLOSE_SCRIPT, ext_path, str(tmp_path / "wh"), str(db), str(TEST_PYTHON)],
            capture_output=True,
            text=True,
            timeout=100,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"closing while following hung (stdout={e.stdout!r}, stderr={e.stderr!r})")
    assert p.returncode == 0, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, p.stdout + p.stderr
    out = json.loads(lines[0][len("RESULT ") :])
    marts = {int(k): [tuple(r) for r in v] for k, v in out["oracle_marts"].items()}

    assert out["threads_while_following"] == 1
    assert out["memory_follower_gone"], "the follower of a closed in-memory database kept running"
    assert out["caught_up"]
    assert out["file_follower_gone"], "the follower of a closed file database kept running"
    child = out["child"]
    assert "error" not in child and "stderr" not in child, f"another process could not open the file: {child}"
    assert child["waited"] < 5, f"the file stayed locked {child['waited']:.2f} s after close"
    # Whatever the file holds is exactly one snapshot's state (the apply running at close
    # either committed whole or not at all).
    assert child["snapshot"] in (2, 3), child["snapshot"]
    assert [tuple(r) for r in child["mart"]] == marts[child["snapshot"]]

    # Reopened: not following, and it stays at what it had even as the lake moves on.
    assert out["reopened_status"] == [None, None, child["snapshot"]]
    assert out["after_commit"] == [None, child["snapshot"], 4, 4 - child["snapshot"]]
    src = out["refollow"][0]
    assert out["refollow"] == [src, 50, None, None]
    assert out["refollow_caught_up"] and out["reconcile"] == 0
    assert out["final_follower_gone"]

    con = duckdb.connect(str(db), read_only=True)  # and this process can open it too
    try:
        assert con.execute("SELECT lake_snapshot FROM serving_meta").fetchone()[0] == 4
        got = con.execute(
            "SELECT company, order_day::VARCHAR, revenue::VARCHAR FROM mart_daily ORDER BY ALL"
        ).fetchall()
        assert got == marts[4]
    finally:
        con.close()
