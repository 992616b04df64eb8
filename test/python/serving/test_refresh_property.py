"""serving_refresh under random change sequences, checked after every step.

The oracle is a Python dict order_id -> (company, day, revenue) updated by the same
operations; the expected dashboard is recomputed from it from scratch each step.
"""

from __future__ import annotations

import datetime
import random
from collections import defaultdict

import pytest
from conftest import connect

COMPANIES = ["acme", "O'Reilly", "Café Zürich", "東京商事", "x' OR '1'='1", "globex"]
BASE_DAY = datetime.date(2024, 1, 1)
SEEDS = range(40)
STEPS = 60


def dashboard_oracle(state: dict, company: str) -> list:
    sums: dict = defaultdict(int)
    for c, day, rev in state.values():
        if c == company:
            sums[day] += rev
    return sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))


def put_changes(con, rows: list) -> None:
    cols = list(zip(*rows, strict=True)) if rows else [[], [], [], [], []]
    con.execute(
        "CREATE OR REPLACE TABLE changes AS SELECT unnest($1::BIGINT[]) AS order_id, "
        "unnest($2::VARCHAR[]) AS company, unnest($3::DATE[]) AS order_day, "
        "unnest($4::BIGINT[]) AS revenue, unnest($5::BOOLEAN[]) AS deleted",
        [list(c) for c in cols],
    )


def random_changes(rng: random.Random, state: dict, deleted_ids: set, next_id: list) -> list:
    rows, used = [], set()
    for _ in range(rng.randint(0, 12)):
        op = rng.choice(["insert", "correct", "zero", "move_day", "move_company", "delete", "reinsert", "ghost"])
        live = [i for i in state if i not in used]
        if op in ("correct", "zero", "move_day", "move_company", "delete") and live:
            oid = rng.choice(live)
            company, day, rev = state[oid]
            if op == "correct":
                rev = rng.randint(-500, 500)
            elif op == "zero":
                rev = 0
            elif op == "move_day":
                day = BASE_DAY + datetime.timedelta(days=rng.randint(0, 20))
            elif op == "move_company":
                company = rng.choice(COMPANIES)
            if op == "delete":
                rows.append((oid, None, None, None, True))
            else:
                rows.append((oid, company, day, rev, False))
        elif op == "reinsert" and deleted_ids - used:
            oid = rng.choice(sorted(deleted_ids - used))
            rows.append(
                (
                    oid,
                    rng.choice(COMPANIES),
                    BASE_DAY + datetime.timedelta(days=rng.randint(0, 20)),
                    rng.randint(-50, 900),
                    False,
                )
            )
        elif op == "ghost":
            oid = next_id[0] + 10_000_000  # never existed: a delete to ignore
            next_id[0] += 1
            rows.append((oid, None, None, None, True))
        else:
            oid = next_id[0]
            next_id[0] += 1
            rows.append(
                (
                    oid,
                    rng.choice(COMPANIES),
                    BASE_DAY + datetime.timedelta(days=rng.randint(0, 20)),
                    rng.randint(-100, 1000),
                    False,
                )
            )
        used.add(oid)
    return rows


def apply_oracle(state: dict, deleted_ids: set, rows: list) -> None:
    for oid, company, day, rev, deleted in rows:
        if deleted:
            if state.pop(oid, None) is not None:
                deleted_ids.add(oid)
        else:
            state[oid] = (company, day, rev)
            deleted_ids.discard(oid)


def check(con, state: dict) -> None:
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    for company in COMPANIES:
        got = con.execute("SELECT * FROM serving_dashboard($1)", [company]).fetchall()
        assert got == dashboard_oracle(state, company), company
    assert con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == len(state)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_refresh_sequences(seed):
    rng = random.Random(seed)
    con = connect()
    state = {
        i: (rng.choice(COMPANIES), BASE_DAY + datetime.timedelta(days=rng.randint(0, 20)), rng.randint(-100, 1000))
        for i in range(200)
    }
    put_changes(con, [(i, c, d, r, False) for i, (c, d, r) in state.items()])
    con.execute("CREATE TABLE src AS SELECT order_id, company, order_day, revenue FROM changes")
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    check(con, state)
    deleted_ids: set = set()
    next_id = [1000]
    for _ in range(STEPS):
        rows = random_changes(rng, state, deleted_ids, next_id)
        put_changes(con, rows)
        before_live = set(state)
        summary = con.execute(
            "SELECT inserted, updated, deleted, ignored_deletes FROM serving_refresh('changes')"
        ).fetchone()
        apply_oracle(state, deleted_ids, rows)
        expected = (
            sum(1 for r in rows if not r[4] and r[0] not in before_live),
            sum(1 for r in rows if not r[4] and r[0] in before_live),
            sum(1 for r in rows if r[4] and r[0] in before_live),
            sum(1 for r in rows if r[4] and r[0] not in before_live),
        )
        assert summary == expected
        check(con, state)


def test_killer_cases():
    con = connect()

    def d(n):
        return BASE_DAY + datetime.timedelta(days=n)

    put_changes(con, [(1, "acme", d(0), 100, False), (2, "acme", d(1), 50, False), (3, "beta", d(0), 10, False)])
    con.execute("CREATE TABLE src AS SELECT order_id, company, order_day, revenue FROM changes")
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    state = {1: ("acme", d(0), 100), 2: ("acme", d(1), 50), 3: ("beta", d(0), 10)}
    steps = [
        [(2, None, None, None, True)],  # group (acme, d1) emptied
        [(2, "acme", d(1), 7, False)],  # ... and re-filled
        [(1, "beta", d(0), 100, False)],  # moved to another company
        [(3, "beta", d(0), 0, False)],  # correction to 0: group stays
        [(4, "beta", d(5), -30, False), (1, "beta", d(0), -100, False)],  # refunds
        [(1, None, None, None, True), (3, None, None, None, True)],  # a group with sum 0 emptied
    ]
    deleted: set = set()
    for rows in steps:
        put_changes(con, rows)
        con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
        apply_oracle(state, deleted, rows)
        check(con, state)
        groups = {(c, day) for c, day, _ in state.values()}
        assert con.execute("SELECT count(*) FROM mart_daily").fetchone()[0] == len(groups)


def test_failed_refresh_changes_nothing():
    con = connect()
    put_changes(con, [(i, "acme", BASE_DAY, i, False) for i in range(50)])
    con.execute("CREATE TABLE src AS SELECT order_id, company, order_day, revenue FROM changes")
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    before = [con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("fct_orders", "mart_daily")]
    bad_sets = [
        [(1, "beta", BASE_DAY, 5, False), (2, None, None, None, True), (1, "acme", BASE_DAY, 9, False)],  # duplicate
        [(1, "beta", BASE_DAY, 5, False), (7, None, BASE_DAY, 9, False)],  # NULL company
    ]
    for rows in bad_sets:
        put_changes(con, rows)
        with pytest.raises(Exception) as err:
            con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
        assert "order_id" in str(err.value)
        after = [con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in ("fct_orders", "mart_daily")]
        assert after == before
    assert con.execute("SELECT refreshes FROM serving_status()").fetchone()[0] == 0
