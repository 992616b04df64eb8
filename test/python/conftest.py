"""Shared fixtures and pure-Python oracles for the streamhouse Python test suite.

Everything the tests compare the extension against is computed here in plain Python from
the generated rows, never by the extension itself.
"""

from __future__ import annotations

import csv
import datetime
import os
import random
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

# The session's local Fluss cluster, the fixture `fluss_cluster` (test/python/fluss_tiering).
pytest_plugins = ["support.fluss_util"]

ROOT = Path(__file__).resolve().parents[2]
# The Node side of the binding and lifecycle tests (@duckdb/node-api pinned by its package-lock).
NODE_DIR = ROOT / "test" / "node"
# DuckDB version -> the name test/node/package.json installs its @duckdb/node-api under (1.4.5 as
# an npm alias); test/node's scripts import the one DUCKDB_NODE_API names.
NODE_APIS = {"1.5.6": "@duckdb/node-api", "1.4.5": "duckdb-node-api-1.4"}


def node_env(version: str) -> dict:
    """The environment that makes test/node's scripts run @duckdb/node-api of DuckDB `version`."""
    return {**os.environ, "DUCKDB_NODE_API": NODE_APIS[version]}


def shared_dir() -> Path:
    """The team's read-only `shared/` directory: beside this checkout, or, for a clone made
    elsewhere (a fresh clone in a temp dir), beside the local repository it was cloned from."""
    here = ROOT.parent / "shared"
    if here.is_dir():
        return here
    try:
        origin = subprocess.run(
            ["git", "-C", str(ROOT), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    if origin.startswith("file://"):
        origin = origin[len("file://") :]
    if origin and Path(origin).is_dir() and (Path(origin).resolve().parent / "shared").is_dir():
        return Path(origin).resolve().parent / "shared"
    return here  # missing: the tests that need it fail, naming this path


# The artifact under test: the main build, or another one for a DuckDB line that needs its own
# (`make test` runs a subset with the DuckDB 1.4 LTS artifact this way).
EXT_PATH = Path(os.environ.get("STREAMHOUSE_EXTENSION") or ROOT / "build" / "release" / "streamhouse.duckdb_extension")
CONFIG = {"allow_unsigned_extensions": "true"}
# DuckDB 1.4's C API does not tell an extension the caller's search_path (README, "Supported DuckDB
# versions"): its artifact keeps the serving layer in the default schema and refuses an unqualified
# source name that exists in more than one schema.
SEES_SEARCH_PATH = not duckdb.__version__.startswith("1.4.")

# Company names chosen to break naive quoting / matching: quotes, SQL injection, non-ASCII,
# LIKE wildcards, case variants, prefixes of each other, commas and double quotes (CSV).
TRICKY_COMPANIES = [
    "O'Reilly",
    "Café Zürich",
    "東京商事",
    "x' OR '1'='1",
    "x",
    "a%b",
    "a_b",
    "Acme",
    "ACME",
    'Smith, "Jones" & Co',
    "Robert'); DROP TABLE fct_orders;--",
]

ORACLE_COLUMNS = "{'order_id': 'BIGINT', 'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'}"


def readme_block(lang: str, containing: str) -> str:
    """The one fenced `lang` block of the README whose text contains `containing`."""
    import re

    blocks = re.findall(r"^```" + re.escape(lang) + r"\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"expected one ```{lang} block containing {containing!r}, found {len(found)}"
    return found[0]


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def require_extension() -> str:
    if not EXT_PATH.is_file():
        pytest.fail(
            f"streamhouse extension not built: {EXT_PATH} is missing (run `make release` first)",
            pytrace=False,
        )
    return str(EXT_PATH)


def connect(database: str = ":memory:", ext: str | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(database, config=dict(CONFIG))
    con.execute(f"LOAD {sql_literal(ext or require_extension())}")
    return con


# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`), then the tests
# marked `serial` alone (-m serial: they keep every core busy or time each case, so a neighbour
# would slow them or be slowed). A worker takes whole groups: each test file is a group of its own
# (its module fixtures are made once), unless it names one: `xdist_group("jvm")` puts the files that
# start JVMs (a Fluss cluster, Flink, Java Paimon) on one worker, one after another, so the
# session's Fluss cluster (support/fluss_util.py) is started once and no two JVM stacks compete.
@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        # A hang (deadlocked watchdog, lock wait) must fail the test, not stall the suite.
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(120))
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


@pytest.fixture(scope="session")
def ext_path() -> str:
    return require_extension()


@pytest.fixture
def con(ext_path):
    c = connect(":memory:", ext_path)
    try:
        yield c
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# Data generation and the pure-Python oracle
# --------------------------------------------------------------------------------------------


def gen_rows(seed: int, n_rows: int, n_companies: int, n_days: int, start: datetime.date = datetime.date(2024, 1, 15)):
    """Rows (order_id, company, order_day: date, revenue) with unique shuffled order ids."""
    rng = random.Random(seed)
    companies = list(TRICKY_COMPANIES[: min(n_companies, len(TRICKY_COMPANIES))])
    while len(companies) < n_companies:
        companies.append(f"c{len(companies):02d}")
    rng.shuffle(companies)
    ids = rng.sample(range(1, 2**62), n_rows)
    # Skewed company distribution: some companies are rare (few days), some dominate.
    weights = [rng.choice([1, 2, 5, 20]) for _ in companies]
    rows = []
    for oid in ids:
        company = rng.choices(companies, weights)[0]
        day = start + datetime.timedelta(days=rng.randrange(n_days))
        r = rng.random()
        if r < 0.05:
            revenue = 0
        elif r < 0.25:
            revenue = -rng.randrange(1, 10**9)
        elif r < 0.27:
            revenue = rng.choice([2**62, -(2**62), 2**63 - 1, -(2**63)])
        else:
            revenue = rng.randrange(1, 10**9)
        rows.append((oid, company, day, revenue))
    return rows, companies


def oracle(rows):
    """Per-company dashboard answers: {company: [(day, revenue), ...]} sorted (-revenue, day)."""
    cells = defaultdict(int)
    for _oid, company, day, revenue in rows:
        cells[(company, day)] += revenue
    per_company = defaultdict(list)
    for (company, day), revenue in cells.items():
        per_company[company].append((day, revenue))
    for lst in per_company.values():
        lst.sort(key=lambda dr: (-dr[1], dr[0]))
    return dict(per_company), dict(cells)


def oracle_summary(rows):
    _, cells = oracle(rows)
    return {
        "fct_rows": len(rows),
        "mart_rows": len(cells),
        "companies": len({c for c, _ in cells}),
        "days": len({d for _, d in cells}),
        "total_revenue": sum(r for *_, r in rows) if rows else None,
    }


def write_csv(path: Path, rows, day_as_text: bool = True) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(["order_id", "company", "order_day", "revenue"])
        for oid, company, day, revenue in rows:
            w.writerow([oid, company, day.isoformat() if day_as_text else day, revenue])
    return path


def load_table(con, name: str, rows, tmp_path: Path, day_type: str = "DATE") -> None:
    """CREATE TABLE name from the rows (committed, autocommit), via a CSV file for speed."""
    path = write_csv(tmp_path / f"load_{abs(hash(name))}_{len(rows)}.csv", rows)
    columns = ORACLE_COLUMNS.replace("'order_day': 'DATE'", f"'order_day': '{day_type}'")
    con.execute(
        f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM read_csv({sql_literal(str(path))}, "
        f"header = true, quote = '\"', escape = '\"', columns = {columns})"
    )
    got = con.execute(f"SELECT count(*), sum(revenue::HUGEINT) FROM {name}").fetchone()
    want = (len(rows), sum(r for *_, r in rows) if rows else None)
    assert got == want, f"harness: loading {name} via CSV lost data: {got} != {want}"


def build(con, source: str) -> dict:
    cur = con.execute(f"SELECT * FROM serving_build({sql_literal(source)})")
    names = [d[0] for d in cur.description]
    rows = cur.fetchall()
    assert len(rows) == 1, rows
    return dict(zip(names, rows[0], strict=True))


def dashboard(con, company: str, function: str = "serving_dashboard"):
    return con.execute(f"SELECT * FROM {function}(?)", [company]).fetchall()


def table_exists(con, name: str) -> bool:
    return (
        con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND NOT temporary", [name]).fetchone()[0]
        > 0
    )


@pytest.fixture(scope="module")
def node():
    """The `node` executable, with test/node's pinned packages installed (`make node-deps`)."""
    exe = shutil.which("node")
    if exe is None:
        pytest.fail("`node` is not on PATH (Node.js >= 20 is needed for test/node)", pytrace=False)
    missing = [api for api in NODE_APIS.values() if not (NODE_DIR / "node_modules" / api / "package.json").is_file()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing from {NODE_DIR / 'node_modules'}: run `make node-deps`", pytrace=False
        )
    return exe


def serving_table_places(con) -> set:
    return set(
        con.execute(
            "SELECT database_name, schema_name, table_name FROM duckdb_tables() WHERE NOT temporary "
            "AND table_name IN ('fct_orders', 'mart_daily', 'serving_mart_counts', 'serving_meta')"
        ).fetchall()
    )


def refuse_ambiguous_source(con, name: str, places: list[str]) -> None:
    """DuckDB 1.4: an unqualified source that exists in several schemas is refused, naming them."""
    before = serving_table_places(con)
    with pytest.raises(duckdb.BinderException) as e:
        build(con, name)
    message = str(e.value)
    assert message.startswith(f"Binder Error: serving_build: parameter 'source' = '{name}': "), message
    assert "does not tell extensions the caller's search_path" in message, message
    for place in places:
        assert place in message, message
    assert serving_table_places(con) == before, "a refused build changed the serving tables"
