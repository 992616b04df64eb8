"""README promises around serving_refresh that no other test checks, each against a pure-Python
oracle of the orders (a dict order_id -> row updated by the same changes):

- a refresh from a file source (`.csv`, `.tsv`, `.json`, `.parquet` and a Parquet glob), and a
  build from a `.tsv` file;
- a refresh under `USE other`: unqualified names resolve through the caller's search path and the
  refresh writes the layer where its serving_meta lives;
- tampering with `serving_mart_counts`: serving_reconcile reports it (it compares the mart *and*
  its group counts with a fresh aggregate of fct_orders); a refresh that reads the counts from
  the tables (no cached mart: another process built the layer) and would drive one negative
  refuses and changes nothing; a refresh never leaves wrong numbers served without reconcile
  saying so.
"""

from __future__ import annotations

import csv
import datetime
import json
import random
import subprocess
import sys
import textwrap

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import (
    SEES_SEARCH_PATH,
    build,
    connect,
    dashboard,
    gen_rows,
    load_table,
    oracle,
    oracle_summary,
    refuse_ambiguous_source,
    sql_literal,
)

CHANGE_COLUMNS = ["order_id", "company", "order_day", "revenue", "deleted"]
CHANGE_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
        ("deleted", pa.bool_()),
    ]
)
BASE = datetime.date(2024, 1, 15)


# ------------------------------------------------------------------------------------ oracle


def random_changes(rng: random.Random, state: dict, companies: list, n: int, next_id: int) -> list[tuple]:
    """n changes (order_id, company, order_day, revenue, deleted), one per order: corrections,
    moves to another day or company, cancellations, deletes of orders that never existed, and
    new orders."""
    live = rng.sample(sorted(state), min(len(state), n * 3 // 4))
    out = []
    for i, oid in enumerate(live):
        company, day, revenue = state[oid]
        kind = i % 5
        if kind == 0:
            out.append((oid, None, None, None, True))
        elif kind == 1:
            out.append((oid, company, day + datetime.timedelta(days=rng.randrange(1, 9)), revenue, False))
        elif kind == 2:
            out.append((oid, rng.choice(companies), day, rng.randint(-(10**6), 10**6), False))
        else:
            out.append((oid, company, day, rng.randint(-(10**6), 10**6), False))
    for k in range(n - len(live)):
        if k % 7 == 0:
            out.append((next_id + 10**9 + k, None, None, None, True))  # a delete of nothing: ignored
        else:
            out.append(
                (
                    next_id + k,
                    rng.choice(companies),
                    BASE + datetime.timedelta(days=rng.randrange(40)),
                    rng.randint(-(10**6), 10**6),
                    False,
                )
            )
    rng.shuffle(out)
    return out


def apply_changes(state: dict, changes: list[tuple]) -> dict:
    counts = {"inserted": 0, "updated": 0, "deleted": 0, "ignored_deletes": 0}
    for oid, company, day, revenue, deleted in changes:
        if deleted:
            counts["deleted" if state.pop(oid, None) is not None else "ignored_deletes"] += 1
        else:
            counts["updated" if oid in state else "inserted"] += 1
            state[oid] = (company, day, revenue)
    return counts


def rows_of(state: dict) -> list[tuple]:
    return sorted((oid, c, d, r) for oid, (c, d, r) in state.items())


def assert_serves(con, state: dict, companies, fct="fct_orders", mart="mart_daily"):
    rows = rows_of(state)
    per_company, cells = oracle(rows)
    assert con.execute(f"SELECT order_id, company, order_day, revenue FROM {fct} ORDER BY order_id").fetchall() == rows
    assert sorted(con.execute(f"SELECT company, order_day, revenue FROM {mart}").fetchall()) == sorted(
        (c, d, r) for (c, d), r in cells.items()
    )
    for company in companies:
        assert dashboard(con, company) == per_company.get(company, []), company


# ------------------------------------------------------------------------------ file sources


def write_changes(path, fmt: str, changes: list[tuple]) -> None:
    if fmt in ("csv", "tsv"):
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter="," if fmt == "csv" else "\t")
            w.writerow(CHANGE_COLUMNS)
            for oid, company, day, revenue, deleted in changes:
                w.writerow(
                    [
                        oid,
                        "" if company is None else company,
                        "" if day is None else day.isoformat(),
                        "" if revenue is None else revenue,
                        "true" if deleted else "false",
                    ]
                )
    elif fmt == "json":
        with open(path, "w", encoding="utf-8") as f:
            for oid, company, day, revenue, deleted in changes:
                f.write(
                    json.dumps(
                        {
                            "order_id": oid,
                            "company": company,
                            "order_day": day and day.isoformat(),
                            "revenue": revenue,
                            "deleted": deleted,
                        },
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    else:
        records = [dict(zip(CHANGE_COLUMNS, c, strict=True)) for c in changes]
        pq.write_table(pa.Table.from_pylist(records, schema=CHANGE_SCHEMA), path)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "json", "parquet", "parquet_glob"])
def test_refresh_from_a_file_source(con, tmp_path, fmt):
    """README: serving_refresh takes the same sources as a build (a table, a view, or a .parquet /
    .csv / .tsv / .json path or glob) plus an optional `deleted BOOLEAN`. Two refreshes in a row
    from files, each checked in full against the oracle; the summary counts too."""
    rows, companies = gen_rows(71, 4_000, 11, 30)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    state = {oid: (c, d, r) for oid, c, d, r in rows}
    rng = random.Random(72)
    next_id = 1
    for step in range(2):
        changes = random_changes(rng, state, companies, 400, next_id)
        next_id += 1000
        if fmt == "parquet_glob":
            folder = tmp_path / f"changes{step}"
            folder.mkdir()
            write_changes(folder / "part-0.parquet", "parquet", changes[:150])
            write_changes(folder / "part-1.parquet", "parquet", changes[150:])
            source = str(folder / "*.parquet")
        else:
            source = str(tmp_path / f"changes{step}.{fmt}")
            write_changes(source, fmt, changes)
        want = apply_changes(state, changes)
        got = con.execute(
            "SELECT inserted, updated, deleted, ignored_deletes, fct_rows, source FROM serving_refresh(?)", [source]
        ).fetchone()
        assert got == (want["inserted"], want["updated"], want["deleted"], want["ignored_deletes"], len(state), source)
        assert_serves(con, state, companies)
        assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
    assert con.execute("SELECT refreshes, refresh_source FROM serving_status()").fetchone() == (2, source)


def test_build_from_tsv(con, tmp_path):
    """README: a `.tsv` path is a build source. Company names with commas, quotes and
    apostrophes must survive (tabs separate the fields)."""
    rows, companies = gen_rows(73, 3_000, 11, 50)
    path = tmp_path / "orders.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["order_id", "company", "order_day", "revenue"])
        for oid, company, day, revenue in rows:
            w.writerow([oid, company, day.isoformat(), revenue])
    summary = build(con, str(path))
    assert {k: summary[k] for k in oracle_summary(rows)} == oracle_summary(rows)
    assert summary["source"] == str(path)
    assert_serves(con, {oid: (c, d, r) for oid, c, d, r in rows}, companies)


# ----------------------------------------------------------------------- refresh under USE


def test_refresh_under_use_other_database(con, tmp_path):
    """README: unqualified names resolve through the caller's search path (`USE other`), and a
    refresh writes every table in the schema of the serving_meta it finds. A layer in memory.main
    and one in other.main; under `USE other`, serving_refresh('changes') reads other.main.changes
    (not the decoy memory.main.changes) and moves only the layer in other.main."""
    first, first_companies = gen_rows(81, 2_000, 5, 20)
    second, second_companies = gen_rows(82, 2_500, 6, 25)
    load_table(con, "memory.main.src", first, tmp_path)
    build(con, "src")
    con.execute(f"ATTACH {sql_literal(str(tmp_path / 'other.duckdb'))} AS other")
    load_table(con, "other.main.src", second, tmp_path)
    first_state = {oid: (c, d, r) for oid, c, d, r in first}
    second_state = {oid: (c, d, r) for oid, c, d, r in second}
    rng = random.Random(83)
    # the decoy: deletes every order of the second layer, were it ever read
    decoy = [(oid, None, None, None, True) for oid in second_state]
    con.execute(
        "CREATE TABLE memory.main.changes AS SELECT * FROM (SELECT unnest($1::BIGINT[]) AS order_id, "
        "NULL::VARCHAR AS company, NULL::DATE AS order_day, NULL::BIGINT AS revenue, true AS deleted)",
        [[c[0] for c in decoy]],
    )
    con.execute("USE other")
    if not SEES_SEARCH_PATH:
        refuse_ambiguous_source(con, "src", ["memory.main", "other.main"])
        assert_serves(con, first_state, [], fct="memory.main.fct_orders", mart="memory.main.mart_daily")
        return
    assert build(con, "src")["fct_rows"] == len(second)
    for step in range(2):
        changes = random_changes(rng, second_state, second_companies, 300, 10**7 * (step + 1))
        cols = [list(c) for c in zip(*changes, strict=True)]
        con.execute(
            "CREATE OR REPLACE TABLE changes AS SELECT unnest($1::BIGINT[]) AS order_id, unnest($2::VARCHAR[]) "
            "AS company, unnest($3::DATE[]) AS order_day, unnest($4::BIGINT[]) AS revenue, "
            "unnest($5::BOOLEAN[]) AS deleted",
            cols,
        )
        want = apply_changes(second_state, changes)
        got = con.execute(
            "SELECT inserted, updated, deleted, ignored_deletes FROM serving_refresh('changes')"
        ).fetchone()
        assert got == (want["inserted"], want["updated"], want["deleted"], want["ignored_deletes"])
        assert_serves(con, second_state, second_companies)
        assert_serves(con, second_state, [], fct="other.main.fct_orders", mart="other.main.mart_daily")
        assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
    assert con.execute("SELECT refreshes FROM serving_status()").fetchone()[0] == 2
    # the first layer never moved
    assert_serves(con, first_state, [], fct="memory.main.fct_orders", mart="memory.main.mart_daily")
    con.execute("USE memory")
    assert_serves(con, first_state, first_companies)
    assert con.execute("SELECT refreshes FROM serving_status()").fetchone()[0] == 0


# ----------------------------------------------------------------- tampering with the counts

TAMPER_SRC = [
    (1, "acme", datetime.date(2026, 11, 1), 10),
    (2, "acme", datetime.date(2026, 11, 1), 20),
    (3, "acme", datetime.date(2026, 11, 1), -4),
    (4, "acme", datetime.date(2026, 11, 2), 5),
    (5, "O'Reilly", datetime.date(2026, 11, 1), 7),
    (6, "O'Reilly", datetime.date(2026, 11, 3), 0),
]
GROUP = ("acme", datetime.date(2026, 11, 1))  # orders 1, 2, 3: revenue 26


def put_source(con):
    con.execute(
        "CREATE OR REPLACE TABLE src AS SELECT unnest($1::BIGINT[]) AS order_id, unnest($2::VARCHAR[]) AS company, "
        "unnest($3::DATE[]) AS order_day, unnest($4::BIGINT[]) AS revenue",
        [list(c) for c in zip(*TAMPER_SRC, strict=True)],
    )


def put_deletes(con, ids):
    con.execute(
        "CREATE OR REPLACE TABLE changes AS SELECT unnest($1::BIGINT[]) AS order_id, NULL::VARCHAR AS company, "
        "NULL::DATE AS order_day, NULL::BIGINT AS revenue, true AS deleted",
        [list(ids)],
    )


def set_group_count(con, company, day, orders):
    """A hand edit of serving_mart_counts: the count of one (company, day) group."""
    days, counts = con.execute(
        "SELECT order_days, orders FROM serving_mart_counts WHERE company = ?", [company]
    ).fetchone()
    counts = [orders if d == day else n for d, n in zip(days, counts, strict=True)]
    con.execute("UPDATE serving_mart_counts SET orders = ?::BIGINT[] WHERE company = ?", [counts, company])


def layer(con):
    return (
        con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall(),
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall(),
        con.execute(
            "SELECT company, order_days::VARCHAR, orders::VARCHAR FROM serving_mart_counts ORDER BY ALL"
        ).fetchall(),
    )


def reconcile(con):
    return sorted(con.execute("SELECT side, company, order_day, revenue, orders FROM serving_reconcile()").fetchall())


@pytest.mark.parametrize("count", [1, 7])
def test_tampered_counts_are_reported_by_reconcile(con, count):
    put_source(con)
    build(con, "src")
    assert reconcile(con) == []
    set_group_count(con, *GROUP, count)
    # the fresh aggregate of fct_orders says 3 orders / 26; what is served says `count`
    assert reconcile(con) == sorted([("fact_only", *GROUP, 26, 3), ("mart_only", *GROUP, 26, count)])
    assert con.execute("SELECT last_reconcile_clean FROM serving_status()").fetchone()[0] is False


def build_in_another_process(ext_path, db):
    """The layer is built by another process, so this one holds no cached mart for it: the next
    refresh here reads mart_daily and serving_mart_counts from the tables (README: refresh, 4)."""
    columns = [list(c) for c in zip(*TAMPER_SRC, strict=True)]
    script = textwrap.dedent(f"""
        import datetime
        import duckdb
        c = duckdb.connect({str(db)!r}, config={{'allow_unsigned_extensions': 'true'}})
        c.execute("LOAD " + {sql_literal(ext_path)!r})
        c.execute("CREATE TABLE src AS SELECT unnest($1::BIGINT[]) AS order_id, unnest($2::VARCHAR[]) AS company, "
                  "unnest($3::DATE[]) AS order_day, unnest($4::BIGINT[]) AS revenue", {columns!r})
        c.execute("SELECT * FROM serving_build('src')").fetchall()
        c.close()
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_refresh_refuses_a_count_tampered_below_zero_and_changes_nothing(ext_path, tmp_path):
    """README: a group count that would go negative (the tables were edited behind streamhouse's
    back) rolls everything back, and the refresh says so."""
    db = tmp_path / "tamper.duckdb"
    build_in_another_process(ext_path, db)
    con = connect(str(db), ext_path)
    try:
        set_group_count(con, *GROUP, 1)
        put_deletes(con, [1, 2])  # two orders leave a group that (says the tampered count) holds one
        before = layer(con)
        with pytest.raises(duckdb.Error) as err:
            con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
        msg = str(err.value)
        assert "would have a negative order count" in msg and "serving_mart_counts" in msg, msg
        assert "run serving_build" in msg, msg
        assert layer(con) == before
        assert con.execute("SELECT refreshes FROM serving_status()").fetchone()[0] == 0
        # serving_build starts over, exact again
        build(con, "src")
        assert reconcile(con) == []
    finally:
        con.close()


def test_refresh_over_a_count_tampered_upwards_is_caught_by_reconcile(ext_path, tmp_path):
    """A count raised by hand cannot go negative, so the refresh goes through; what it serves may
    then be wrong (an emptied group kept at revenue 0), and serving_reconcile must say so."""
    db = tmp_path / "tamper_up.duckdb"
    build_in_another_process(ext_path, db)
    con = connect(str(db), ext_path)
    try:
        set_group_count(con, *GROUP, 5)
        put_deletes(con, [1, 2, 3])  # the group's three real orders all leave
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
        served = con.execute(
            "SELECT revenue FROM mart_daily WHERE company = ? AND order_day = ?", list(GROUP)
        ).fetchall()
        if served:  # kept as a group of 2 orders summing to 0: wrong, and reconcile must see it
            assert served == [(0,)]
            assert reconcile(con) == [("mart_only", *GROUP, 0, 2)]
        else:
            assert reconcile(con) == []
    finally:
        con.close()


def test_refresh_after_tampering_in_the_same_process_never_serves_wrong_numbers(con):
    """In the process that built the layer, a refresh may reuse the mart it keeps in memory
    (README: refresh, 4) and so not read the hand-edited counts. Either it refuses and changes
    nothing, or everything it serves afterwards is exact (the oracle, reconcile clean)."""
    put_source(con)
    build(con, "src")
    set_group_count(con, *GROUP, 1)
    put_deletes(con, [1, 2])
    before = layer(con)
    try:
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
    except duckdb.Error as e:
        assert "would have a negative order count" in str(e), str(e)
        assert layer(con) == before
        return
    state = {oid: (c, d, r) for oid, c, d, r in TAMPER_SRC if oid not in (1, 2)}
    assert_serves(con, state, ["acme", "O'Reilly"])
    assert con.execute("SELECT company, order_days, orders FROM serving_mart_counts ORDER BY company").fetchall() == [
        ("O'Reilly", [datetime.date(2026, 11, 1), datetime.date(2026, 11, 3)], [1, 1]),
        ("acme", [datetime.date(2026, 11, 1), datetime.date(2026, 11, 2)], [1, 1]),
    ]
    assert reconcile(con) == []
