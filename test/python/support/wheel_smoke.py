"""Smoke test of the installed streamhouse wheel, run by test_wheel.py with the python of a fresh venv
that holds only the pinned duckdb and the wheel (run from a scratch directory, so nothing of the
repository is importable). Usage: wheel_smoke.py EXPECTED_VERSION REPO_ROOT WORK_DIR
Prints `SMOKE OK` at the end; any failed check raises."""

import csv
import datetime
import importlib.metadata
import os
import random
import sys
from collections import defaultdict

import duckdb

import streamhouse

expected_version, repo_root, work = sys.argv[1:4]

# The installed package, not the source tree, with the version Cargo.toml has.
assert streamhouse.__version__ == expected_version, streamhouse.__version__
assert importlib.metadata.version("streamhouse") == expected_version
assert os.path.realpath(streamhouse.__file__).startswith(os.path.realpath(sys.prefix)), streamhouse.__file__
path = streamhouse.extension_path()
assert os.path.isabs(path) and os.path.isfile(path), path
assert not os.path.realpath(path).startswith(os.path.realpath(repo_root)), path

# A default connection refuses the unsigned extension: a clear error saying how to connect.
try:
    streamhouse.load(duckdb.connect())
    raise AssertionError("streamhouse.load succeeded on a connection that does not allow unsigned extensions")
except streamhouse.LoadError as e:
    message = str(e)
    assert "config={'allow_unsigned_extensions': 'true'}" in message, message
    assert isinstance(e.__cause__, duckdb.Error), repr(e.__cause__)

con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
streamhouse.load(con)
streamhouse.load(con)  # a second LOAD of the same extension is harmless

rng = random.Random(11)
companies = ["acme", "O'Reilly", "東京商事", "globex"]
start = datetime.date(2026, 11, 1)
rows = [
    (oid, rng.choice(companies), start + datetime.timedelta(days=rng.randrange(30)), rng.randrange(-1000, 10**9))
    for oid in rng.sample(range(1, 10**12), 3000)
]
csv_path = os.path.join(work, "orders.csv")
with open(csv_path, "w", newline="", encoding="utf-8") as f:
    w = csv.writer(f)
    w.writerow(["order_id", "company", "order_day", "revenue"])
    w.writerows((oid, company, day.isoformat(), revenue) for oid, company, day, revenue in rows)
con.execute(
    "CREATE TABLE orders AS SELECT * FROM read_csv(?, header = true, columns = {'order_id': 'BIGINT', "
    "'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'})",
    [csv_path],
)

# The oracle: plain arithmetic over the rows generated above.
cells = defaultdict(int)
for _oid, company, day, revenue in rows:
    cells[(company, day)] += revenue
built = con.execute("SELECT fct_rows, mart_rows, companies, total_revenue FROM serving_build('orders')").fetchone()
assert built == (len(rows), len(cells), len(companies), sum(r[3] for r in rows)), built
for company in [*companies, "nobody"]:
    want = sorted(((d, r) for (c, d), r in cells.items() if c == company), key=lambda dr: (-dr[1], dr[0]))
    got = con.execute("SELECT order_day, revenue FROM serving_dashboard(?)", [company]).fetchall()
    assert got == want, (company, got[:3], want[:3])
assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone() == (0,)
con.close()
print("SMOKE OK")
