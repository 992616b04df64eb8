"""Smaller traps of issue 37 (item 8): one rule for `paimon:` and `file://` prefixes in every
function, an explicit NULL snapshot refused rather than read as "latest", follower errors named by
the function that runs them, one error class and wording per kind of problem with a Paimon table
in every function that names one, storage options refused on local tables (by key, never a
value). Oracles: pypaimon's own read of the same table; for errors, the exact message."""

from __future__ import annotations

import os
import random

import duckdb
import pytest
from conftest import connect
from support.lake_util import Warehouse
from support.live_util import create_orders, lake_source, random_lake_commits, status_dict, wait_for


@pytest.fixture
def table(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    t = create_orders(wh, "orders", "partial-update")
    for rows in random_lake_commits(random.Random(5), "partial-update", 1, first=50):
        t.commit(rows)
    return wh, t


def pypaimon_rows(t) -> list:
    return sorted((r["order_id"], r["company"], r["order_day"], r["revenue"]) for r in t.read())


def test_paimon_prefix_and_file_url_name_the_same_table(table):
    wh, t = table
    con = connect()
    path = wh.path("orders")
    sql = "SELECT order_id, company, order_day, revenue FROM paimon_scan(?) ORDER BY ALL"
    assert con.execute(sql, [path]).fetchall() == pypaimon_rows(t)
    assert con.execute(sql, ["paimon:" + path]).fetchall() == pypaimon_rows(t)
    row = con.execute("SELECT fct_rows, lake_snapshot FROM serving_build(?)", ["file://" + path]).fetchone()
    assert row == (len(pypaimon_rows(t)), 2), row


def test_an_explicit_null_snapshot_is_refused(table):
    wh, _ = table
    con = connect()
    with pytest.raises(duckdb.Error, match=r"paimon_scan: parameter 'snapshot' must not be NULL"):
        con.execute("SELECT count(*) FROM paimon_scan(?, snapshot := NULL)", [wh.path("orders")])
    with pytest.raises(duckdb.Error, match=r"paimon_changelog: parameter 'from_snapshot' must not be NULL"):
        con.execute("SELECT count(*) FROM paimon_changelog(?, from_snapshot := NULL)", [wh.path("orders")])
    with pytest.raises(duckdb.Error, match=r"paimon_read_plan: parameter 'snapshot' must not be NULL"):
        con.execute("SELECT count(*) FROM paimon_read_plan(?, snapshot := NULL)", [wh.path("orders")])


def test_follower_errors_are_named_by_serving_follow(table):
    wh, t = table
    con = connect()
    src = lake_source(wh, "orders")
    con.execute("SELECT * FROM serving_build(?)", [src])
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '50 ms')", [src])
    t.commit([{"order_id": 10_000, "company": None, "order_day": None, "revenue": 5}])  # a new order without a company
    s = wait_for(lambda: (lambda s: s if s["state"] == "failing" else None)(status_dict(con)), 30, "the failure")
    assert s["last_error"].startswith("serving_follow: "), s["last_error"]
    con.execute("SELECT * FROM serving_unfollow()")


# Every function that names a Paimon table, as it names it: {path} is the table's directory.
NAMING_A_TABLE = {
    "paimon_scan": "SELECT * FROM paimon_scan('{path}'{options})",
    "paimon_changelog": "SELECT * FROM paimon_changelog('{path}'{options})",
    "paimon_snapshots": "SELECT * FROM paimon_snapshots('{path}'{options})",
    "paimon_read_plan": "SELECT * FROM paimon_read_plan('{path}'{options})",
    "serving_build": "SELECT * FROM serving_build('paimon:{path}'{options})",
    "serving_refresh": "SELECT * FROM serving_refresh('paimon:{path}'{options})",
    "serving_follow": "SELECT * FROM serving_follow('paimon:{path}'{options})",
    "serving_reconcile": "SELECT * FROM serving_reconcile(fact := '{path}'{options})",
    "serving_olap": "SELECT * FROM serving_olap('acme', fact := '{path}'{options})",
}

# Kind of problem: how to make the path, and what every function says (the class included).
PROBLEMS = {
    "missing": (lambda tmp: tmp / "no" / "such" / "table", "no such directory"),
    "not_paimon": (lambda tmp: tmp, "not a Paimon table (it has no schema/ directory)"),
}


def built_layer(con) -> list:
    con.execute(
        "CREATE TABLE src AS SELECT 1::BIGINT AS order_id, 'acme' AS company, DATE '2024-01-01' AS order_day, "
        "5::BIGINT AS revenue"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    return con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall()


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
@pytest.mark.parametrize("function", sorted(NAMING_A_TABLE))
def test_one_class_and_wording_per_problem_in_every_function(tmp_path, function, problem):
    make, says = PROBLEMS[problem]
    path = str(make(tmp_path))
    con = connect()
    before = built_layer(con)
    sql = NAMING_A_TABLE[function].format(path=path, options="")
    with pytest.raises(duckdb.Error) as e:
        con.execute(sql).fetchall()
    first = str(e.value).splitlines()[0]
    assert first == f"Binder Error: {function}: Paimon table '{path}': {says}", first
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == before, "the layer changed"


def test_a_sandbox_denial_is_one_class_and_wording_in_every_function(tmp_path):
    path = str(tmp_path / "lake")
    con = connect()
    con.execute("SET enable_external_access = false")
    for function, sql in sorted(NAMING_A_TABLE.items()):
        with pytest.raises(duckdb.Error) as e:
            con.execute(sql.format(path=path, options="")).fetchall()
        first = str(e.value).splitlines()[0]
        want = (
            f"Binder Error: {function}: Paimon table '{path}': Permission Error: Cannot access \"{path}\" - file "
            "system operations are disabled by configuration (enable_external_access = false"
        )
        assert first.startswith(want), first


SECRET = "hunter2-not-to-be-shown"


def test_storage_options_on_a_local_table_are_refused_by_key_in_every_function(table):
    """Storage options configure object storage: given for a local table they would be ignored,
    so every function taking them refuses the call, naming the keys (never a value) and the
    table, before it reads or changes anything."""
    wh, _ = table
    path = wh.path("orders")
    options = {"s3.region": "eu-west-1", "s3.secret-key": SECRET}
    con = connect()
    before = built_layer(con)
    calls = {name: sql.format(path=path, options=", options := $1") for name, sql in NAMING_A_TABLE.items()}
    calls["serving_publish"] = f"SELECT * FROM serving_publish('{path}_mart', options := $1)"
    for function, sql in sorted(calls.items()):
        with pytest.raises(duckdb.Error) as e:
            con.execute(sql, [options]).fetchall()
        first = str(e.value).splitlines()[0]
        named = {
            "serving_build": f"paimon:{path}",
            "serving_refresh": f"paimon:{path}",
            "serving_follow": f"paimon:{path}",
            "serving_publish": f"{path}_mart",
        }.get(function, path)
        assert first == (
            f"Binder Error: {function}: parameter 'options' = 'MAP {{…}}': storage options ('s3.region', "
            f"'s3.secret-key') are for Paimon tables on object storage (s3://...), and '{named}' is not on "
            "object storage: leave options out"
        ), first
        assert SECRET not in str(e.value)
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == before, "the layer changed"
    assert not os.path.exists(f"{path}_mart"), "serving_publish wrote a table"
