"""Reproducer: serving_status (a reader) waits for a running serving_build while another
connection's serving_follow is replacing a follower.

serving_follow holds the session's follower slot while it stops the old follower, and the old
follower's next apply is queued for the writer connection behind the build, so the stop waits
for the whole build; serving_status reads that slot (following, follow_every_ms, progress) and
waits too. Dashboards are unaffected. Without the serving_follow call in flight (control), the
same status answers in milliseconds. The wait is bounded only by the writer wait (120 s).

Usage (repo root, after `make release`): .venv/bin/python docs/repro/repro_status_waits_for_follow_replace.py
Prints the time each call took; exits 1 when serving_status waited for the build.
"""

import datetime
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from paimon_write import commit, create_table, open_warehouse

ROOT = Path(__file__).resolve().parents[2]

root = tempfile.mkdtemp()
S = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
t = create_table(open_warehouse(root), "o", S, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
commit(
    t, S, [{"order_id": i, "company": "acme", "order_day": datetime.date(2026, 1, 1), "revenue": 1} for i in range(100)]
)
src = f"paimon:{root}/db.db/o"

con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
con.execute(f"LOAD '{ROOT / 'build/release/streamhouse.duckdb_extension'}'")
con.execute(
    "CREATE VIEW slow AS SELECT i AS order_id, 'c' AS company, DATE '2024-01-01' AS order_day, "
    "(hash(md5(md5(md5(i::VARCHAR)))) % 1000)::BIGINT AS revenue FROM range(3000000) t(i)"
)
con.execute("SELECT * FROM serving_build(?)", [src]).fetchall()
con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '20 ms')", [src]).fetchall()


def run(name, sql, *params):
    c = con.cursor()
    t0 = time.perf_counter()
    c.execute(sql, list(params)).fetchall()
    took = time.perf_counter() - t0
    print(f"{name:>28}: {took:6.2f} s", flush=True)
    return took


print("-- status during a build while serving_follow replaces the follower")
b = threading.Thread(target=run, args=("serving_build('slow')", "SELECT * FROM serving_build('slow')"))
b.start()
time.sleep(0.3)  # the build holds the writer; the follower's next apply queues behind it
f = threading.Thread(
    target=run, args=("serving_follow (replace)", "SELECT * FROM serving_follow(?, every := INTERVAL '1 second')", src)
)
f.start()
time.sleep(0.2)
took = run("serving_status", "SELECT * FROM serving_status()")
run("serving_dashboard", "SELECT * FROM serving_dashboard('acme')")
b.join()
f.join()

print("-- control (no serving_follow call in flight): status during a build")
b = threading.Thread(target=run, args=("serving_build('slow')", "SELECT * FROM serving_build('slow')"))
b.start()
time.sleep(0.5)
control = run("serving_status", "SELECT * FROM serving_status()")
b.join()
con.close()
print("BUG: serving_status waited for the build" if took > 0.5 else "ok")
sys.exit(1 if took > 0.5 else 0)
