"""The Fluss path's first hour (issue 52): what a new user met, each with a test that failed before
its fix.

- item 1: `serving_status().refreshes` counts a Fluss follower's apply once (it counted each tick
  twice: the apply's refresh and the tick's own bookkeeping each added one).
- item 2: a typo in a `columns :=` expression over a Fluss table names the table's full column list
  (the hint listed only the columns the map reads, leaving out the misspelt one).
- item 3: `lag_ms` is never NULL on a built layer that is behind: a built, unfollowed Fluss layer
  whose log moved on reports at least the time since it read the log (it showed NULL).
- (issue 49, item 5) a follower of a layer built without `lake :=` (the warehouse read from the
  cluster) whose table has a lake part rebuilds by union read: its rebuild joined the table path onto
  the table directory it had recorded ("no such directory") and stayed `failing` for good.

Oracle: pyfluss writes the orders (support.fluss_util's seeded stream, replayed in plain Python) and
the follower's own count of its applies (`serving_unfollow().applies`)."""

from __future__ import annotations

import time

import duckdb
import fluss
import pytest
from conftest import connect
from support.fluss_client import BUCKETS, DATABASE, create, end_offsets, run, wait_tiered, write
from support.fluss_util import order_stream, replay
from support.live_util import status_dict, wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("jvm")]  # JVM tests: one worker (conftest.py)


def end_total(bootstrap: str, name: str) -> int:
    return sum(end_offsets(bootstrap, name).values())


def test_a_fluss_followers_apply_counts_as_one_refresh(fluss_cluster):
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_counted"
    create(bootstrap, name)
    ops = order_stream(52, 300)
    write(bootstrap, name, ops[:100])
    source = f"fluss://{bootstrap}/{DATABASE}.{name}"
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source])
    assert status_dict(con)["refreshes"] == 0
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source])
    # Five writes, each applied before the next is written: at least five applies.
    for n in range(5):
        write(bootstrap, name, ops[100 + 40 * n : 140 + 40 * n])
        end = end_total(bootstrap, name)
        wait_for(lambda end=end: status_dict(con)["fluss_offset"] == end, 60, f"the follower to apply write {n + 1}")
    refreshes = status_dict(con)["refreshes"]
    (applies,) = con.execute("SELECT applies FROM serving_unfollow()").fetchone()
    assert applies >= 5, applies
    assert refreshes == applies, f"serving_status().refreshes = {refreshes}, the follower applied {applies} times"
    want = sorted(replay(ops[:300]).values())
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == want


def test_a_follower_of_a_layer_built_without_lake_rebuilds_from_the_lake_the_cluster_names(fluss_cluster):
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_found_lake"
    create(bootstrap, name, lake=True)
    ops = order_stream(53, 700)
    write(bootstrap, name, ops[:500])
    path = fluss.TablePath(DATABASE, name)
    run(lambda c: wait_tiered(c.get_admin(), path, BUCKETS, fluss_cluster["dir"]), bootstrap)
    source = f"fluss://{bootstrap}/{DATABASE}.{name}"
    con = connect()
    # No lake := : the warehouse is the cluster's datalake.paimon.warehouse.
    (lake_snapshot,) = con.execute("SELECT lake_snapshot FROM serving_build(?)", [source]).fetchone()
    assert lake_snapshot is not None, "premise: the build read a lake part"
    recorded = con.execute("SELECT stream_lake, stream_position FROM serving_meta").fetchone()
    assert recorded[0].endswith(f"/{DATABASE}.db/{name}"), recorded
    # A position without marks cannot be checked: the follower's first tick rebuilds by union read,
    # from the lake it recorded (the table's directory).
    unmarked = ",".join(p.split("/")[0] for p in recorded[1].split(","))
    con.execute("UPDATE serving_meta SET stream_position = ?", [unmarked])
    write(bootstrap, name, ops[500:])
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source])
    try:
        end = end_total(bootstrap, name)
        s = wait_for(
            lambda: (s := status_dict(con))["fluss_offset"] == end and s["state"] == "following" and s,
            90,
            f"the follower to rebuild and catch up (last status {status_dict(con)})",
        )
        assert "names no record to check it by" in (s["rebuilt_because"] or ""), s
        assert s["lake_snapshot"] is not None, s
        want = sorted(replay(ops).values())
        assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == want
        assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    finally:
        con.execute("SELECT * FROM serving_unfollow()")


def test_lag_ms_of_a_built_fluss_layer_behind_its_log_is_never_null(fluss_cluster):
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_behind"
    create(bootstrap, name)
    ops = order_stream(54, 800)
    write(bootstrap, name, ops[:300])
    source = f"fluss://{bootstrap}/{DATABASE}.{name}"
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [source])
    built = time.monotonic()
    s = status_dict(con)
    assert s["lag_records"] == 0 and s["lag_ms"] == 0, s
    write(bootstrap, name, ops[300:])
    end = end_total(bootstrap, name)
    time.sleep(0.3)
    waited_ms = (time.monotonic() - built) * 1000
    s = status_dict(con)
    assert s["state"] == "built" and s["lag_records"] == end - s["fluss_offset"] > 0, s
    # The oldest change not served has waited at most since the build read the log; lag_ms says that
    # bound, never NULL, never less than the time since the build.
    assert s["lag_ms"] is not None and s["lag_ms"] >= int(waited_ms) - 1, (s, waited_ms)


def test_a_typo_in_a_map_of_a_fluss_table_names_the_tables_full_column_list(fluss_cluster):
    """Item 2: the hint lists every column of the table, not only those the map reads (the misspelt
    one is not among those)."""
    bootstrap = fluss_cluster["bootstrap"]
    name = "orders_typo"
    create(bootstrap, name)
    write(bootstrap, name, order_stream(55, 50))
    source = f"fluss://{bootstrap}/{DATABASE}.{name}"
    con = connect()
    typo = "MAP {'order_id': 'order_id', 'company': 'upper(compnay)'}"
    with pytest.raises(duckdb.Error, match=r"parameter 'columns'") as e:
        con.execute(f"SELECT * FROM serving_build(?, columns := {typo})", [source])
    message = str(e.value)
    assert "compnay" in message and "order_id, company, order_day, revenue" in message, message
    assert con.execute("SELECT state FROM serving_status()").fetchone() == ("not built",)
