"""A lake refresh merges the new snapshots' own rows onto the orders the layer holds
(src/serving/delta.rs) where the table's merge is deduplicate or partial-update with fixed
buckets and no option that changes which row wins; anything else reads the merged state of the
changed keys. Oracles: lake_util's plain-Python merges of every commit written, never the
extension's own reads.

The delta path's cost claim is pinned by what it may not open: with every data file the build
read moved away, a refresh on that path must still give the oracle's state, while a table whose
merge it does not take (first-row) must fail on the missing file."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import connect
from support.lake_util import ORDERS, Warehouse, move_data_files, oracle_first_row
from support.live_util import assert_serves, create_orders, lake_source, merged_after, random_lake_commits


@pytest.mark.parametrize("engine", ["partial-update", "deduplicate"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_refresh_after_every_few_commits_equals_the_merged_fact(tmp_path, engine, seed):
    rng = random.Random(seed)
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "f", engine)
    commits = random_lake_commits(rng, engine, 14, first=300)
    table.commit(commits[0])
    con = connect()
    source = lake_source(wh, "f")
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    done = 1
    while done < len(commits):
        step = rng.randint(1, 3)
        for rows in commits[done : done + step]:
            table.commit(rows)
        done += step
        snapshot = con.execute("SELECT lake_snapshot FROM serving_refresh(?)", [source]).fetchone()[0]
        assert snapshot == min(done, len(commits))
        assert_serves(con, merged_after(engine, commits[:done]), f"{engine} seed {seed} after {done} commits")


def test_several_versions_of_one_order_in_one_commit_merge_in_order(tmp_path):
    """partial-update: the last non-NULL value of each column wins, also among the rows of one
    commit; deduplicate: the last row wins, a last -D deletes."""
    wh = Warehouse(tmp_path / "wh")
    pu, dd = create_orders(wh, "pu", "partial-update"), create_orders(wh, "dd", "deduplicate")
    base = random_lake_commits(random.Random(5), "partial-update", 0, first=50)[0]
    pu.commit(base)
    dd.commit([{**r, "op": "+I"} for r in base])
    cons = {}
    for name in ("pu", "dd"):
        cons[name] = connect()
        cons[name].execute("SELECT * FROM serving_build(?)", [lake_source(wh, name)]).fetchall()
    a, b = base[0], base[1]
    pu_rows = [
        {"order_id": a["order_id"], "company": "acme", "order_day": None, "revenue": 7},
        {"order_id": a["order_id"], "company": None, "order_day": None, "revenue": 9},
        {"order_id": 1000, "company": "globex", "order_day": a["order_day"], "revenue": None},
        {"order_id": 1000, "company": None, "order_day": None, "revenue": 11},
    ]
    pu.commit(pu_rows)
    dd_rows = [
        {**a, "revenue": 1, "op": "+U"},
        {**a, "revenue": 2, "op": "+U"},
        {**b, "op": "+U"},
        {**b, "op": "-D"},
        {**b, "revenue": 3, "op": "-D"},
    ]
    dd.commit(dd_rows)
    for name, table in (("pu", pu), ("dd", dd)):
        cons[name].execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, name)]).fetchall()
        engine = "partial-update" if name == "pu" else "deduplicate"
        assert_serves(cons[name], merged_after(engine, table.commits), name)
    got = cons["pu"].execute("SELECT company, revenue FROM fct_orders WHERE order_id = ?", [a["order_id"]]).fetchone()
    assert got == ("acme", 9)
    assert cons["dd"].execute("SELECT count(*) FROM fct_orders WHERE order_id = ?", [b["order_id"]]).fetchone() == (0,)


@pytest.mark.parametrize("engine", ["partial-update", "deduplicate"])
def test_the_delta_path_opens_no_data_file_the_build_read(tmp_path, engine):
    rng = random.Random(7)
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "f", engine)
    commits = random_lake_commits(rng, engine, 6, first=400)
    table.commit(commits[0])
    table.commit(commits[1])
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "f")]).fetchall()
    move_data_files(Path(wh.path("f")), tmp_path / "away")
    for rows in commits[2:]:
        table.commit(rows)
    con.execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, "f")]).fetchall()
    assert_serves(con, merged_after(engine, commits), f"{engine} with the built files gone")


def test_a_merge_the_delta_path_does_not_take_reads_the_merged_state(tmp_path):
    """first-row keeps the earliest row: its refresh must read the table's files, so with the
    build's files gone it fails (the data file is not found: the native reader names it, paimon-rust's
    storage says NotFound); with them back it equals the oracle."""
    rng = random.Random(8)
    wh = Warehouse(tmp_path / "wh")
    table = wh.create("f", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "first-row"})
    commits = random_lake_commits(rng, "partial-update", 4, first=300)
    table.commit(commits[0])
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "f")]).fetchall()
    moved = move_data_files(Path(wh.path("f")), tmp_path / "away")
    new = [
        {"order_id": 5000 + i, "company": "acme", "order_day": commits[0][0]["order_day"], "revenue": i}
        for i in range(5)
    ]
    table.commit(new + [{**r, "revenue": 1} for r in commits[0][:5]])
    with pytest.raises(Exception) as e:
        con.execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, "f")]).fetchall()
    message = str(e.value)
    assert "serving_refresh" in message and ("No such file" in message or "NotFound" in message), message
    for original, kept in moved:
        shutil.move(kept, original)
    con.execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, "f")]).fetchall()
    merged = [
        {c: r[c] for c in ("order_id", "company", "order_day", "revenue")}
        for r in oracle_first_row(table.commits, key="order_id")
    ]
    assert_serves(con, merged, "first-row")


def test_columns_in_another_order_with_more_columns(tmp_path):
    """The delta's columns are taken by name: a fact whose key comes last and that carries a
    column the serving layer does not read refreshes to the oracle's state."""
    schema = pa.schema(
        [
            ("note", pa.string()),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
            pa.field("order_id", pa.int64(), nullable=False),
        ]
    )
    rng = random.Random(9)
    commits = random_lake_commits(rng, "partial-update", 8, first=200)
    wh = Warehouse(tmp_path / "wh")
    table = wh.create("f", schema, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    noted = [[{**r, "note": rng.choice([None, "x"])} for r in rows] for rows in commits]
    table.commit(noted[0])
    con = connect()
    con.execute("SELECT * FROM serving_build(?)", [lake_source(wh, "f")]).fetchall()
    move_data_files(Path(wh.path("f")), tmp_path / "away")  # the delta path, or this fails
    for rows in noted[1:]:
        table.commit(rows)
    con.execute("SELECT * FROM serving_refresh(?)", [lake_source(wh, "f")]).fetchall()
    assert_serves(con, merged_after("partial-update", commits), "columns in another order")


def test_more_than_64_snapshots_behind_reads_the_merged_state(tmp_path):
    """The delta path takes at most 64 snapshots (README, lake refresh): 64 commits behind, a
    refresh still works with every file the build read moved away; 65 behind, it reads the merged
    state of the changed keys, so with those files gone it fails naming the missing file, and with
    them back it equals the oracle."""
    rng = random.Random(64)
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "f", "deduplicate")
    first = random_lake_commits(rng, "deduplicate", 0, first=300)[0]
    # then 129 commits of one row each: a correction or a move of an order of the first commit
    commits = [first] + [
        [{**first[rng.randrange(len(first))], "revenue": rng.randint(-500, 5000), "op": "+U"}] for _ in range(129)
    ]
    table.commit(commits[0])
    con = connect()
    source = lake_source(wh, "f")
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    moved = move_data_files(Path(wh.path("f")), tmp_path / "away")
    for rows in commits[1:65]:
        table.commit(rows)
    assert len(table.commits) == 65
    con.execute("SELECT * FROM serving_refresh(?)", [source]).fetchall()  # 64 behind: the delta path
    assert_serves(con, merged_after("deduplicate", table.commits), "64 snapshots behind, the build's files gone")
    for rows in commits[65:]:
        table.commit(rows)
    assert len(table.commits) - 65 == 65  # snapshots behind
    with pytest.raises(Exception) as e:
        con.execute("SELECT * FROM serving_refresh(?)", [source]).fetchall()
    message = str(e.value)
    assert "serving_refresh" in message and ("No such file" in message or "NotFound" in message), message
    for original, kept in moved:
        shutil.move(kept, original)
    got = con.execute("SELECT lake_snapshot FROM serving_refresh(?)", [source]).fetchone()
    assert got == (len(table.commits),), got
    assert_serves(con, merged_after("deduplicate", table.commits), "65 snapshots behind")


def test_an_overwrite_commit_replaces_the_whole_fact(tmp_path):
    """An OVERWRITE snapshot (the whole table rewritten) never takes the delta path: after the
    refresh the layer holds exactly the overwrite's rows — orders it left out are gone — and the
    refresh says it read the table whole. (Found by issue 39's coverage: the refresh applied
    nothing yet recorded the snapshot; now a regression test.)"""
    rng = random.Random(65)
    wh = Warehouse(tmp_path / "wh")
    table = create_orders(wh, "f", "partial-update")
    commits = random_lake_commits(rng, "partial-update", 3, first=200)
    for rows in commits:
        table.commit(rows)
    con = connect()
    source = lake_source(wh, "f")
    con.execute("SELECT * FROM serving_build(?)", [source]).fetchall()
    kept = merged_after("partial-update", commits)[::3]  # a third of the orders, revenue changed
    rewritten = [{**r, "revenue": r["revenue"] + 1} for r in kept]
    wb = table.table.new_batch_write_builder().overwrite()
    w, c = wb.new_write(), wb.new_commit()
    try:
        w.write_arrow(pa.Table.from_pylist(rewritten, schema=ORDERS))
        c.commit(w.prepare_commit())
    finally:
        w.close()
        c.close()
    snapshot = table.table.snapshot_manager().get_latest_snapshot()
    assert snapshot.commit_kind == "OVERWRITE", snapshot.commit_kind
    got = con.execute("SELECT lake_snapshot, rebuilt_because FROM serving_refresh(?)", [source]).fetchone()
    assert got[0] == snapshot.id and "OVERWRITE" in got[1].upper(), got
    assert_serves(con, rewritten, "after an OVERWRITE commit")
