"""The dashboard's fixed cost (issue 50, item 1): where the layer lives is known without a catalog
query per call. One warm `serving_dashboard` call runs exactly one statement on our connections —
the prepared mart statement — and no `serving_meta` lookup; the place it caches is dropped when a
write of ours commits, when the caller's search_path changes, or when the cached statement fails,
so the one-layer guarantee stays (a same-named table elsewhere never answers).

Oracle: DuckDB's own query log (`enable_logging('QueryLog')`, which records every statement of
every connection of the instance, ours included) and plain Python over the rows written."""

from __future__ import annotations

import duckdb
import pytest
from conftest import connect

# The watchdog's own looks (connection count, attached databases) run on our connections too.
WATCHDOG = ("duckdb_connection_count", "duckdb_databases")


def layer(con, schema: str, scale: int) -> dict:
    """A layer built in `schema` from orders whose revenue is i * scale; the dashboard of c1 by Python."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    con.execute(f"USE {schema}")
    con.execute(
        f"CREATE OR REPLACE TABLE src AS SELECT i AS order_id, 'c' || (i % 3) AS company, "
        f"DATE '2024-01-01' + CAST(i % 10 AS INTEGER) AS order_day, i * {scale} AS revenue FROM range(300) t(i)"
    )
    con.execute("SELECT * FROM serving_build('src')")
    cells: dict = {}
    for i in range(300):
        if i % 3 == 1:
            day = i % 10
            cells[day] = cells.get(day, 0) + i * scale
    return cells


def c1(con) -> dict:
    rows = con.execute("SELECT order_day, revenue FROM serving_dashboard('c1')").fetchall()
    return {(d.toordinal() - 738886): r for d, r in rows}  # days since 2024-01-01


def our_statements(con, me: int) -> list[str]:
    rows = con.execute(
        "SELECT message FROM duckdb_logs WHERE type = 'QueryLog' AND connection_id <> ?", [me]
    ).fetchall()
    return [m for (m,) in rows if not any(w in m for w in WATCHDOG)]


def test_a_warm_dashboard_call_runs_one_statement_and_no_catalog_lookup():
    con = connect()
    want = layer(con, "main", 1)
    # Every reader connection warm for this shape (its statement prepared once per connection, its
    # search_path applied).
    top3 = sorted(want.values(), reverse=True)[:3]
    for _ in range(40):
        got = con.execute("SELECT revenue FROM serving_dashboard('c1', top := 3)").fetchall()
        assert [r for (r,) in got] == top3
    con.execute("CALL enable_logging('QueryLog')")
    me = con.execute("SELECT current_connection_id()").fetchone()[0]
    con.execute("CALL truncate_duckdb_logs()")
    calls = 25
    for _ in range(calls):
        con.execute("SELECT * FROM serving_dashboard('c1', top := 3)").fetchall()
    ran = our_statements(con, me)
    assert not [m for m in ran if "serving_meta" in m], ran
    assert len([m for m in ran if "mart_daily" in m]) == calls, ran
    assert len(ran) == calls, ran


def test_the_cached_place_follows_the_search_path_and_our_builds():
    con = connect()
    main = layer(con, "main", 1)
    assert c1(con) == main and c1(con) == main
    # Another schema on the search path, another layer: the cache is per search_path.
    other = layer(con, "other", 7)
    assert c1(con) == other
    con.execute("USE main")
    assert c1(con) == main
    # A rebuild at the same place (a write of ours) is what the next call answers from.
    con.execute("UPDATE src SET revenue = revenue * 2")
    con.execute("SELECT * FROM serving_build('src')")
    assert c1(con) == {d: 2 * r for d, r in main.items()}


def test_a_layer_dropped_by_hand_is_not_answered_from_the_cached_place():
    con = connect()
    want = layer(con, "main", 1)
    assert c1(con) == want and c1(con) == want
    con.execute("DROP TABLE mart_daily")
    con.execute("DROP TABLE serving_meta")
    with pytest.raises(duckdb.Error, match=r"serving_dashboard: the serving tables do not exist yet"):
        c1(con)
