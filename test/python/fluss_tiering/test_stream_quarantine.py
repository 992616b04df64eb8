"""on_bad_rows := 'quarantine' on a Fluss table (issue 37, item 7): the union-read build and the
follower tailing the changelog hold a bad order out (here a NULL company), serve every other order
exactly, list the held ones in serving_status, and bring an order back when a good version of it
arrives; a bad order in the lake part Fluss tiered (not only in the log) is held out too (issue 51).
Oracle: the last value per key written (plain Python), its bad orders left out."""

from __future__ import annotations

import datetime

import duckdb
import pytest
from conftest import connect
from support.live_util import status_dict, wait_for
from test_stream_serving import DAY0, ORDERS, _create, _offsets, _write, run, wait_tiered

pytestmark = pytest.mark.xdist_group("jvm")  # the session's Fluss cluster: one worker (conftest.py)

COMPANIES = ["acme", "O'Reilly", "globex", "東京商事"]


def serves(con, live: dict, what: str) -> None:
    good = sorted(tuple(r.values()) for r in live.values() if None not in r.values())
    held = sorted(k for k, r in live.items() if None in r.values())
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == good, f"{what}: fct_orders"
    cells: dict = {}
    for _, c, d, v in good:
        cells[(c, d)] = cells.get((c, d), 0) + v
    assert con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == sorted(
        (c, d, v) for (c, d), v in cells.items()
    ), f"{what}: mart_daily"
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == [], what
    s = status_dict(con)
    assert (s["quarantined"], s["quarantined_ids"]) == (len(held), ", ".join(map(str, held)) or None), what


@pytest.mark.timeout(180)
def test_a_fluss_build_and_follower_hold_bad_orders_out(fluss_cluster):
    bootstrap, name = fluss_cluster["bootstrap"], "orders_quarantine"
    run(_create(bootstrap, name, ORDERS, ["order_id"], 2, lake=False))
    live = {
        i: {
            "order_id": i,
            "company": COMPANIES[i % 4],
            "order_day": DAY0 + datetime.timedelta(days=i % 5),
            "revenue": i,
        }
        for i in range(1, 120)
    }
    live[500] = {"order_id": 500, "company": None, "order_day": DAY0, "revenue": 5}
    run(_write(bootstrap, name, [("upsert", r) for r in live.values()]))
    source = f"fluss://{bootstrap}/shop.{name}"
    con = connect()
    with pytest.raises(duckdb.Error, match=r"company is NULL in 1 row.*order_id 500.*on_bad_rows := 'quarantine'"):
        con.execute("SELECT * FROM serving_build(?)", [source])
    got = con.execute("SELECT fct_rows, quarantined FROM serving_build(?, on_bad_rows := 'quarantine')", [source])
    assert got.fetchone() == (119, 1)
    serves(con, live, "built")

    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source]).fetchall()
    changes = [
        ("upsert", {**live[7], "company": None}),  # turns bad: its previous version leaves the mart
        ("upsert", {**live[500], "company": "globex"}),  # fixed
        ("upsert", {"order_id": 600, "company": "acme", "order_day": DAY0, "revenue": 60}),
        ("delete", 8),
    ]
    run(_write(bootstrap, name, changes))
    live[7]["company"], live[500]["company"] = None, "globex"
    live[600] = changes[2][1]
    del live[8]
    end, _ = run(_offsets(bootstrap, name, 2))
    wait_for(lambda: status_dict(con)["fluss_offset"] == sum(end.values()), 60, "the follower to apply the log")
    s = status_dict(con)
    assert (s["state"], s["last_error"], s["on_bad_rows"]) == ("following", None, "quarantine"), s
    serves(con, live, "followed")
    con.execute("SELECT * FROM serving_unfollow()").fetchall()


@pytest.mark.timeout(240)
def test_bad_orders_in_the_lake_part_of_a_union_read_are_held_out(fluss_cluster):
    """Issue 51: the bad order sits in the lake part Fluss tiered (the table's first writes, every
    bucket tiered before the build), not in the log tail: the union-read build holds it out too, and
    the log tail written after the tiering is applied onto the rest."""
    bootstrap, name = fluss_cluster["bootstrap"], "orders_quarantine_lake"
    run(_create(bootstrap, name, ORDERS, ["order_id"], 2, lake=True))
    live = {
        i: {"order_id": i, "company": COMPANIES[i % 4], "order_day": DAY0 + datetime.timedelta(i % 5), "revenue": i}
        for i in range(1, 80)
    }
    live[700] = {"order_id": 700, "company": None, "order_day": DAY0, "revenue": 7}
    run(_write(bootstrap, name, [("upsert", r) for r in live.values()]))
    wait_tiered(bootstrap, name, 2, "Fluss's tiering to commit the bad order to the lake")
    tail = [("upsert", {"order_id": 900, "company": "acme", "order_day": DAY0, "revenue": 90})]
    run(_write(bootstrap, name, tail))
    live[900] = tail[0][1]
    source = f"fluss://{bootstrap}/shop.{name}"
    con = connect()
    with pytest.raises(duckdb.Error, match=r"company is NULL in 1 row.*order_id 700"):
        con.execute("SELECT * FROM serving_build(?)", [source])
    got = con.execute(
        "SELECT fct_rows, quarantined, lake_snapshot FROM serving_build(?, on_bad_rows := 'quarantine')", [source]
    ).fetchone()
    assert got[:2] == (80, 1) and got[2] is not None, got
    serves(con, live, "a union read with a bad order in its lake part")
