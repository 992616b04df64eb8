"""Smaller traps of issue 37 (item 8): one rule for `paimon:` and `file://` prefixes in every
function, an explicit NULL snapshot refused rather than read as "latest", follower errors named by
the function that runs them. Oracle: pypaimon's own read of the same table."""

from __future__ import annotations

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
