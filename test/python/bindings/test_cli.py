"""The same extension binary loads in the duckdb 1.5.6 CLI (from the duckdb-cli wheel) and serves
the oracle's answers there."""

from __future__ import annotations

import csv
import datetime
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gen_rows, oracle, oracle_summary, sql_literal, write_csv
from support.cli_util import json_results

CLI = Path(sys.executable).parent / "duckdb"
TIMEOUT = 60
COLUMNS = "{'order_id': 'BIGINT', 'company': 'VARCHAR', 'order_day': 'DATE', 'revenue': 'BIGINT'}"


@pytest.fixture(scope="module")
def cli() -> Path:
    if not CLI.is_file():
        pytest.fail(f"duckdb CLI not found at {CLI} (run `make venv`)", pytrace=False)
    return CLI


def run_cli(cli: Path, sql: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run([str(cli), "-unsigned", *args, "-c", sql], capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"duckdb CLI hung for {TIMEOUT}s: {e.stdout!r} {e.stderr!r}")
    if check:
        assert p.returncode == 0, f"CLI failed (rc={p.returncode}):\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def as_rows(result: list[dict]) -> list[tuple]:
    return [(datetime.date.fromisoformat(r["order_day"]), int(r["revenue"])) for r in result]


def test_cli_version(cli):
    p = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0
    assert p.stdout.strip().startswith("v1.5.6"), p.stdout


def test_cli_loads_and_serves_oracle_answer(cli, ext_path, tmp_path):
    rows, _companies = gen_rows(71, 20_000, 12, 120)
    csv_path = write_csv(tmp_path / "orders.csv", rows)
    per_company, _ = oracle(rows)
    asked = ["c11", "O'Reilly", "x' OR '1'='1", "東京商事", "Café Zürich"]
    assert all(c in per_company for c in asked)
    sql = (
        f"LOAD {sql_literal(ext_path)};\n"
        f"CREATE TABLE src AS SELECT * FROM read_csv({sql_literal(str(csv_path))}, header = true, "
        f"quote = '\"', escape = '\"', columns = {COLUMNS});\n"
        "SELECT fct_rows, mart_rows, companies, days, CAST(total_revenue AS VARCHAR) AS total_revenue "
        "FROM serving_build('src');\n"
    )
    for company in asked:
        sql += (
            f"SELECT CAST(order_day AS VARCHAR) AS order_day, CAST(revenue AS VARCHAR) AS revenue "
            f"FROM serving_dashboard({sql_literal(company)});\n"
        )
    sql += (
        "SELECT CAST(order_day AS VARCHAR) AS order_day, CAST(revenue AS VARCHAR) AS revenue "
        "FROM serving_olap('c11');\n"
    )
    sql += "SELECT count(*) AS n FROM serving_dashboard('nobody');\n"
    p = run_cli(cli, sql, "-json")
    results = json_results(p.stdout)
    assert len(results) == 1 + len(asked) + 2, p.stdout[:2000]
    want = oracle_summary(rows)
    summary = results[0][0]
    assert summary["fct_rows"] == want["fct_rows"]
    assert summary["mart_rows"] == want["mart_rows"]
    assert summary["companies"] == want["companies"]
    assert summary["days"] == want["days"]
    assert int(summary["total_revenue"]) == want["total_revenue"]
    for company, result in zip(asked, results[1 : 1 + len(asked)], strict=True):
        assert as_rows(result) == per_company[company], company
    assert as_rows(results[-2]) == per_company["c11"]  # serving_olap
    assert results[-1] == [{"n": 0}]


def test_cli_csv_mode_dashboard(cli, ext_path, tmp_path):
    rows = [
        (i, "c1" if i % 2 else "c2", datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 9), (i * 37) % 101 - 50)
        for i in range(1, 2001)
    ]
    csv_path = write_csv(tmp_path / "o.csv", rows)
    per_company, _ = oracle(rows)
    sql = (
        f"LOAD {sql_literal(ext_path)};\n"
        f"CREATE TABLE src AS SELECT * FROM read_csv({sql_literal(str(csv_path))}, header = true, "
        f"columns = {COLUMNS});\n"
        "SELECT count(*) AS n FROM serving_build('src');\n"
        "SELECT * FROM serving_dashboard('c1');\n"
    )
    p = run_cli(cli, sql, "-csv")
    lines = p.stdout.splitlines()
    assert lines[:2] == ["n", "1"], p.stdout
    assert lines[2] == "order_day,revenue"
    got = [(datetime.date.fromisoformat(d), int(r)) for d, r in (line.split(",") for line in lines[3:])]
    assert got == per_company["c1"]


def test_cli_file_database_persists_between_invocations(cli, ext_path, tmp_path):
    rows, _companies = gen_rows(72, 5_000, 7, 30)
    csv_path = write_csv(tmp_path / "orders.csv", rows)
    per_company, cells = oracle(rows)
    db = str(tmp_path / "cli.duckdb")
    run_cli(
        cli,
        f"LOAD {sql_literal(ext_path)}; "
        f"CREATE TABLE src AS SELECT * FROM read_csv({sql_literal(str(csv_path))}, header = true, "
        f"quote = '\"', escape = '\"', columns = {COLUMNS}); "
        "SELECT * FROM serving_build('src');",
        db,
    )
    # Second invocation: the build is there, and the extension serves it after LOAD.
    company = "O'Reilly"
    p = run_cli(
        cli,
        f"LOAD {sql_literal(ext_path)}; "
        "SELECT count(*) AS n FROM mart_daily; "
        "SELECT CAST(order_day AS VARCHAR) AS order_day, CAST(revenue AS VARCHAR) AS revenue "
        f"FROM serving_dashboard({sql_literal(company)});",
        db,
        "-json",
    )
    results = json_results(p.stdout)
    assert results[0] == [{"n": len(cells)}]
    assert as_rows(results[1]) == per_company[company]


def test_cli_error_message_is_clean(cli, ext_path, tmp_path):
    p = run_cli(cli, f"LOAD {sql_literal(ext_path)}; SELECT * FROM serving_build('no_such_table');", check=False)
    assert p.returncode != 0
    err = p.stderr + p.stdout
    assert "serving_build: source 'no_such_table' does not exist" in err, err
    assert "Error code" not in err and "Unknown error code" not in err, err
    p = run_cli(cli, f"LOAD {sql_literal(ext_path)}; SELECT * FROM serving_dashboard('a');", check=False)
    assert p.returncode != 0
    assert "run serving_build(source) first" in p.stderr + p.stdout


def test_cli_exit_keeps_file_database_intact(cli, ext_path, tmp_path):
    """The CLI exits right after closing its database: the extension's exit handler lets go of
    the instance with DuckDB's shutdown checkpoint (docs/lifecycle.md), so, as with the plain CLI,
    no WAL is left and the next open finds everything with no lock left."""
    create = (
        "CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, "
        "DATE '2024-01-01' + CAST(i % 5 AS INTEGER) AS order_day, i AS revenue FROM range(1000) t(i);"
    )
    control = tmp_path / "control.duckdb"
    run_cli(cli, create, str(control))
    assert control.exists() and not Path(str(control) + ".wal").exists(), "control: plain CLI left a WAL"

    db = tmp_path / "built.duckdb"
    run_cli(cli, f"LOAD {sql_literal(ext_path)}; {create} SELECT * FROM serving_build('src');", str(db))
    assert not Path(str(db) + ".wal").exists(), "the CLI with streamhouse left a WAL at exit; the plain CLI does not"
    p = run_cli(cli, "SELECT count(*) AS n, CAST(sum(revenue) AS VARCHAR) AS s FROM mart_daily;", str(db), "-json")
    assert json_results(p.stdout) == [[{"n": 15, "s": str(sum(range(1000)))}]]


def test_cli_script_build_refresh_reconcile_lake(cli, ext_path, tmp_path):
    """The whole flow as one SQL script run by the CLI (`duckdb -unsigned -json -bail -f script.sql`):
    build, dashboards, a refresh of corrected/moved/cancelled/late orders, the dashboards again,
    reconcile, status, and a paimon_scan of a table written by pypaimon. Oracles: the rows and
    changes generated here, applied in plain Python, and pypaimon's own read of the table."""
    from support.binding_util import apply_changes, random_changes, write_orders_lake

    rows, companies = gen_rows(74, 8_000, 10, 60)
    state = {oid: (company, day, revenue) for oid, company, day, revenue in rows}
    days = sorted({day for _, _, day, _ in rows})
    changes = random_changes(random.Random(74), state, companies, days, next_id=2**62 + 1)
    counts = apply_changes(state, changes)
    after, _ = oracle([(oid, *v) for oid, v in state.items()])
    before, _ = oracle(rows)
    lake, lake_rows, _ = write_orders_lake(tmp_path / "wh")

    orders_csv = write_csv(tmp_path / "orders.csv", rows)
    changes_csv = tmp_path / "changes.csv"
    with open(changes_csv, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["order_id", "company", "order_day", "revenue", "deleted"])
        for oid, company, day, revenue, deleted in changes:
            w.writerow([oid, company, day.isoformat() if day else None, revenue, str(deleted).lower()])
    dash = (
        "SELECT CAST(order_day AS VARCHAR) AS order_day, CAST(revenue AS VARCHAR) AS revenue "
        "FROM serving_dashboard({});\n"
    )
    script = (
        f"LOAD {sql_literal(ext_path)};\n"
        f"CREATE TABLE src AS SELECT * FROM read_csv({sql_literal(str(orders_csv))}, header = true, "
        f"quote = '\"', escape = '\"', columns = {COLUMNS});\n"
        "SELECT fct_rows, mart_rows FROM serving_build('src');\n"
        + "".join(dash.format(sql_literal(c)) for c in companies)
        + f"CREATE TABLE changes AS SELECT * FROM read_csv({sql_literal(str(changes_csv))}, header = true, "
        f"quote = '\"', escape = '\"', columns = {COLUMNS[:-1]}, 'deleted': 'BOOLEAN'}});\n"
        "SELECT inserted, updated, deleted, ignored_deletes FROM serving_refresh('changes');\n"
        + "".join(dash.format(sql_literal(c)) for c in companies)
        + "SELECT count(*) AS n FROM serving_reconcile();\n"
        "SELECT refreshes, last_reconcile_clean FROM serving_status();\n"
        "SELECT order_id, company, CAST(order_day AS VARCHAR) AS order_day, revenue "
        f"FROM paimon_scan({sql_literal(lake)}) ORDER BY order_id;\n"
    )
    script_path = tmp_path / "flow.sql"
    script_path.write_text(script, encoding="utf-8")
    try:
        p = subprocess.run(
            [str(cli), "-unsigned", "-json", "-bail", "-f", str(script_path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"duckdb CLI hung for {TIMEOUT}s on {script_path}: {e.stdout!r} {e.stderr!r}")
    assert p.returncode == 0 and not p.stderr, f"rc={p.returncode}\nstderr:\n{p.stderr}"
    results = json_results(p.stdout)
    n = len(companies)
    assert len(results) == 1 + n + 1 + n + 3, p.stdout[:2000]
    assert results[0] == [{"fct_rows": len(rows), "mart_rows": sum(len(v) for v in before.values())}]
    for company, result in zip(companies, results[1 : 1 + n], strict=True):
        assert as_rows(result) == before[company], f"before refresh: {company}"
    refreshed = results[1 + n]
    assert [tuple(r.values()) for r in refreshed] == [counts]
    for company, result in zip(companies, results[2 + n : 2 + 2 * n], strict=True):
        assert as_rows(result) == after.get(company, []), f"after refresh: {company}"
    assert results[-3] == [{"n": 0}]
    assert results[-2] == [{"refreshes": 1, "last_reconcile_clean": True}]
    assert [
        (r["order_id"], r["company"], datetime.date.fromisoformat(r["order_day"]), r["revenue"]) for r in results[-1]
    ] == lake_rows
