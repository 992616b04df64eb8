"""on_bad_rows := 'fail' | 'quarantine' (issue 37, item 7): one bad upstream row must not stall every
company's dashboard.

Under 'fail' (the default) a change set with a bad order is refused, naming the order and its problem,
and the layer is exactly as before. Under 'quarantine' every other order is applied exactly, the bad
orders are held out of fct_orders and mart_daily (an order that turns bad loses its previous version
too), listed in serving_status (count and first ids) and in serving_quarantine (with the reason), and
a good version (or a delete) of a held order brings it back and clears it. Rows without a usable
order_id are refused under either policy (they name no order that could be held out).

Also (issue 51): duplicate keys in a build source, the policy after a reopen, and a mart-only
replica's refusal of quarantine.

Oracle: plain Python over the rows written — the upstream state per order, its bad orders excluded
(`Upstream.expected`); pypaimon's own read for the lake follower."""

from __future__ import annotations

import datetime
import random
import time
from collections import defaultdict

import duckdb
import pytest
from conftest import connect, sql_literal
from support.lake_util import ORDERS, Warehouse
from support.live_util import status_dict, wait_for

D0 = datetime.date(2024, 5, 1)
COMPANIES = ["acme", "O'Reilly", "Café Zürich", "globex"]
# A change set (and the source) with text days and HUGEINT revenue, so that a day that is not a
# date and a revenue beyond BIGINT can be written.
CHANGES_DDL = "order_id BIGINT, company VARCHAR, order_day VARCHAR, revenue HUGEINT, deleted BOOLEAN"
HINT = "on_bad_rows := 'quarantine'"


def day(n: int) -> str:
    return (D0 + datetime.timedelta(days=n)).isoformat()


def problem(row) -> str | None:
    """Why the row cannot be served (None: it can), in plain Python: what the oracle excludes."""
    _, company, order_day, revenue = row
    if company is None:
        return "company is NULL"
    if order_day is None:
        return "order_day is NULL"
    try:
        datetime.date.fromisoformat(order_day)
    except ValueError:
        return f"order_day '{order_day}' is not a valid YYYY-MM-DD date"
    if revenue is None:
        return "revenue is NULL"
    if not -(2**63) <= revenue < 2**63:
        return f"revenue '{revenue}' does not fit in BIGINT"
    return None


class Upstream:
    """The source's state per order (what a merged upstream table holds), and the oracle of what
    a quarantining layer serves from it."""

    def __init__(self, rows):
        self.state = {r[0]: r for r in rows}
        self.duplicated: set = set()

    def apply(self, changes) -> None:
        """A change set: (order_id, company, day, revenue, deleted) rows; an id twice is held."""
        seen: dict = defaultdict(int)
        for r in changes:
            seen[r[0]] += 1
        for r in changes:
            if r[4]:
                self.state.pop(r[0], None)
            else:
                self.state[r[0]] = r[:4]
        # an order given twice is held until a change set gives it once (or deletes it once)
        self.duplicated = (self.duplicated - set(seen)) | {k for k, n in seen.items() if n > 1}

    def held(self) -> dict:
        out = {k: problem(r) for k, r in self.state.items() if problem(r) is not None}
        out.update(dict.fromkeys(self.duplicated, "duplicate order_id"))
        return dict(sorted(out.items()))

    def expected(self):
        """(fct_orders, mart_daily, {company: dashboard}) of the good orders, in plain Python."""
        held = self.held()
        good = sorted(
            (k, c, datetime.date.fromisoformat(d), v) for k, (_, c, d, v) in self.state.items() if k not in held
        )
        cells: dict = defaultdict(int)
        for _, c, d, v in good:
            cells[(c, d)] += v
        mart = sorted((c, d, v) for (c, d), v in cells.items())
        dash = {
            c: sorted(((d, v) for (cc, d), v in cells.items() if cc == c), key=lambda x: (-x[1], x[0]))
            for c in COMPANIES
        }
        return good, mart, dash


def layer(con):
    return (
        con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall(),
        con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall(),
        con.execute("SELECT * FROM serving_mart_counts ORDER BY ALL").fetchall(),
        con.execute("SELECT * FROM serving_quarantine ORDER BY ALL").fetchall(),
        con.execute("SELECT refreshes, lake_snapshot, on_bad_rows, quarantined FROM serving_meta").fetchall(),
    )


def assert_serves(con, up: Upstream, what: str) -> None:
    """The layer serves exactly the good orders; the held ones are listed, with their reasons."""
    fct, mart, dash = up.expected()
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == fct, f"{what}: fct_orders"
    assert con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall() == mart, (
        f"{what}: mart_daily"
    )
    for c in COMPANIES:
        assert con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == dash[c], f"{what}: {c}"
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == [], f"{what}: reconcile"
    held = up.held()
    listed = dict(con.execute("SELECT order_id, reason FROM serving_quarantine ORDER BY order_id").fetchall())
    assert sorted(listed) == sorted(held), f"{what}: serving_quarantine"
    for k, reason in held.items():
        assert reason in listed[k], f"{what}: order {k}: {listed[k]!r} does not say {reason!r}"
    s = status_dict(con)
    assert s["quarantined"] == len(held), f"{what}: status quarantined"
    want_ids = ", ".join(str(k) for k in sorted(held)[:10]) or None
    assert s["quarantined_ids"] == want_ids, f"{what}: status quarantined_ids"
    assert s["fct_rows"] == len(fct), f"{what}: status fct_rows"


def make(con, name: str, rows) -> None:
    con.execute(f"CREATE OR REPLACE TABLE {name} ({CHANGES_DDL})")
    if rows:
        con.executemany(
            f"INSERT INTO {name} VALUES (?, ?, ?, ?, ?)", [tuple(r) + (False,) * (5 - len(r)) for r in rows]
        )


def base(n: int = 400, seed: int = 1) -> list:
    rng = random.Random(seed)
    return [(i, rng.choice(COMPANIES), day(rng.randrange(20)), rng.randint(-500, 5000)) for i in range(1, n + 1)]


def build(con, rows, policy: str | None = None) -> dict:
    make(con, "src", rows)
    con.execute("ALTER TABLE src DROP COLUMN deleted")
    arg = "" if policy is None else f", on_bad_rows := {sql_literal(policy)}"
    cur = con.execute(f"SELECT * FROM serving_build('src'{arg})")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def refresh(con, policy: str | None = None, source: str = "changes") -> dict:
    arg = "" if policy is None else f", on_bad_rows := {sql_literal(policy)}"
    cur = con.execute(f"SELECT * FROM serving_refresh({sql_literal(source)}{arg})")
    return dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))


def refused(con, sql: str, needles: list[str]) -> str:
    with pytest.raises(duckdb.Error) as e:
        con.execute(sql).fetchall()
    msg = str(e.value)
    for n in needles:
        assert n in msg, f"{n!r} not in {msg}"
    return msg


# Each kind of bad row, as (change rows for order `k`, what 'fail' says, what 'quarantine' lists).
def bad_rows(kind: str, k: int) -> list:
    return {
        "null_company": [(k, None, day(3), 7)],
        "null_day": [(k, "acme", None, 7)],
        "null_revenue": [(k, "acme", day(3), None)],
        "not_a_date": [(k, "acme", "2024-02-30", 7)],
        "revenue_beyond_bigint": [(k, "acme", day(3), 2**70)],
        "duplicate": [(k, "acme", day(3), 7), (k, "globex", day(4), 8)],
    }[kind]


FAIL_SAYS = {
    "null_company": "company is NULL",
    "null_day": "order_day is NULL",
    "null_revenue": "revenue is NULL",
    "not_a_date": "is not a valid YYYY-MM-DD date",
    "revenue_beyond_bigint": "revenue does not fit in BIGINT",
    "duplicate": "duplicate order_id",
}


@pytest.mark.parametrize("kind", list(FAIL_SAYS))
def test_a_bad_order_fails_the_refresh_or_is_held_out_until_fixed(con, kind):
    rows = base()
    up = Upstream(rows)
    build(con, rows)
    # good changes (an update, a move, a new order, a delete) and two bad orders: 17 existed (its
    # previous version must leave the mart too), 9001 is new
    good = [(5, "globex", day(1), 999, False), (6, "acme", day(19), -3, False), (8000, "acme", day(2), 50, False)]
    good.append((7, "acme", day(1), 1, True))  # a delete may carry values (a failed load's probes read them)
    bad = bad_rows(kind, 17) + bad_rows(kind, 9001)
    make(con, "changes", good + [(*r, False) for r in bad])
    before = layer(con)

    # 'fail': refused, naming an order and the problem; nothing changed
    msg = refused(con, "SELECT * FROM serving_refresh('changes')", [FAIL_SAYS[kind], HINT])
    assert "order_id 17" in msg or "order_id 9001" in msg, msg
    assert layer(con) == before

    # 'quarantine': every other order exact, the bad ones held out and listed
    got = refresh(con, "quarantine")
    up.apply(good + [(*r, False) for r in bad])
    assert (got["inserted"], got["updated"], got["deleted"], got["quarantined"]) == (1, 2, 1, 2), got
    assert got["fct_rows"] == len(up.expected()[0]), got
    assert_serves(con, up, "quarantined")
    assert status_dict(con)["on_bad_rows"] == "quarantine"
    since = dict(con.execute("SELECT order_id, since FROM serving_quarantine").fetchall())
    assert all(abs((t - datetime.datetime.now(datetime.UTC)).total_seconds()) < 60 for t in since.values()), since

    # fixed upstream: 17 comes back with its new version, 9001 is deleted; the list is empty
    fix = [(17, "O'Reilly", day(5), 123, False), (9001, None, None, None, True)]
    make(con, "changes", fix)
    got = refresh(con)
    up.apply(fix)
    assert (got["inserted"], got["updated"], got["deleted"], got["ignored_deletes"], got["quarantined"]) == (
        1,
        0,
        0,
        1,
        0,
    ), got
    assert up.held() == {}
    assert_serves(con, up, "fixed")


def test_many_held_orders_are_listed_first_ids_first_and_keep_their_since(con):
    rows = base(600, seed=2)
    up = Upstream(rows)
    build(con, rows, "quarantine")
    rng = random.Random(3)
    kinds = list(FAIL_SAYS)
    bad_ids = sorted(rng.sample(range(1, 601), 12))
    changes = [(k, rng.choice(COMPANIES), day(rng.randrange(20)), rng.randint(0, 9), False) for k in range(700, 760)]
    for i, k in enumerate(bad_ids):
        changes += [(*r, False) for r in bad_rows(kinds[i % len(kinds)], k)]
    rng.shuffle(changes)
    make(con, "changes", changes)
    got = refresh(con)  # the policy recorded by the build
    up.apply(changes)
    assert got["quarantined"] == 12
    assert_serves(con, up, "12 held")
    assert status_dict(con)["quarantined_ids"] == ", ".join(map(str, bad_ids[:10]))
    since = dict(con.execute("SELECT order_id, since FROM serving_quarantine").fetchall())

    # some stay bad with another problem (reason replaced, since kept), some are fixed, one deleted
    time.sleep(0.01)
    still, fixed, gone = bad_ids[:4], bad_ids[4:10], bad_ids[10]
    changes = [(k, "acme", "not a day", 1, False) for k in still]
    changes += [(k, "globex", day(2), k, False) for k in fixed] + [(gone, None, None, None, True)]
    make(con, "changes", changes)
    refresh(con)
    up.apply(changes)
    assert sorted(up.held()) == sorted([*still, bad_ids[11]])
    assert_serves(con, up, "some fixed")
    after = dict(con.execute("SELECT order_id, since FROM serving_quarantine").fetchall())
    assert {k: after[k] for k in still} == {k: since[k] for k in still}, "since must stay while an order stays held"


def test_the_policy_is_the_layers_until_another_is_given(con):
    rows = base(100, seed=4)
    up = Upstream(rows)
    assert build(con, rows)["quarantined"] == 0
    assert status_dict(con)["on_bad_rows"] == "fail"
    make(con, "changes", [(1, None, day(1), 1)])
    refused(con, "SELECT * FROM serving_refresh('changes')", ["company is NULL", "order_id 1", HINT])
    refresh(con, "quarantine")
    up.apply([(1, None, day(1), 1, False)])
    assert_serves(con, up, "quarantine given")
    # not given: the recorded policy
    make(con, "changes", [(2, "acme", None, 1)])
    assert refresh(con)["quarantined"] == 1
    up.apply([(2, "acme", None, 1, False)])
    assert_serves(con, up, "quarantine recorded")
    # 'fail' given: recorded too; what is held stays held until fixed
    make(con, "changes", [(3, "acme", day(1), None)])
    refused(con, "SELECT * FROM serving_refresh('changes', on_bad_rows := 'fail')", ["revenue is NULL", "order_id 3"])
    assert status_dict(con)["on_bad_rows"] == "quarantine", "a refused refresh records nothing"
    make(con, "changes", [(1, "acme", day(1), 10)])
    refresh(con, "fail")
    up.apply([(1, "acme", day(1), 10, False)])
    assert status_dict(con)["on_bad_rows"] == "fail"
    assert_serves(con, up, "one fixed under fail")
    make(con, "changes", [(4, None, day(1), 1)])
    refused(con, "SELECT * FROM serving_refresh('changes')", ["company is NULL", "order_id 4"])
    # a build starts afresh: 'fail' unless given, and it holds what its source has bad
    bad_source = [*rows[:50], (1000, None, day(1), 5), (1001, "acme", "2024-13-01", 5)]
    with pytest.raises(duckdb.Error, match=r"company is NULL in 1 row.*order_id 1000.*on_bad_rows := 'quarantine'"):
        build(con, bad_source)
    got = build(con, bad_source, "quarantine")
    assert (got["fct_rows"], got["quarantined"]) == (50, 2), got
    assert_serves(con, Upstream(bad_source), "built with quarantine")
    assert status_dict(con)["on_bad_rows"] == "quarantine"
    build(con, rows[:10])
    assert (status_dict(con)["on_bad_rows"], status_dict(con)["quarantined"]) == ("fail", 0)


def test_rows_without_an_order_id_are_refused_under_either_policy(con):
    rows = base(50, seed=5)
    build(con, rows, "quarantine")
    make(con, "changes", [(None, "acme", day(1), 1), (None, "acme", day(2), 2), (3, "acme", day(1), 1)])
    before = layer(con)
    msg = refused(
        con, "SELECT * FROM serving_refresh('changes')", ["2 row(s) have no usable order_id", "order_id is NULL"]
    )
    assert "cannot be held out" in msg, msg
    assert layer(con) == before
    con.execute("CREATE OR REPLACE TABLE big (order_id UBIGINT, company VARCHAR, order_day DATE, revenue BIGINT)")
    con.execute("INSERT INTO big VALUES (18446744073709551610, 'acme', DATE '2024-05-01', 1), (4, 'acme', NULL, 1)")
    refused(con, "SELECT * FROM serving_refresh('big')", ["no usable order_id", "'18446744073709551610' does not fit"])
    assert layer(con) == before
    refused(con, "SELECT * FROM serving_build('big', on_bad_rows := 'quarantine')", ["no usable order_id"])
    assert layer(con) == before


@pytest.mark.parametrize(
    "call",
    [
        "serving_build('src', on_bad_rows := 'skip')",
        "serving_refresh('changes', on_bad_rows := 'skip')",
        "serving_follow('paimon:{lake}', every := INTERVAL '1 s', on_bad_rows := 'skip')",
    ],
)
def test_an_unknown_policy_is_refused_naming_the_value_and_the_choices(con, call, tmp_path):
    # A Paimon table that exists: a follow source is opened at bind, before the parameters are read.
    wh = Warehouse(tmp_path / "wh")
    wh.create("orders", ORDERS, ["order_id"], {"bucket": "1"})
    call = call.replace("{lake}", wh.path("orders"))
    rows = base(20, seed=6)
    build(con, rows)
    make(con, "changes", [(1, "acme", day(1), 1)])
    before = layer(con)
    fn = call.split("(")[0]
    refused(con, f"SELECT * FROM {call}", [f"{fn}: parameter 'on_bad_rows' = 'skip'", "'fail'", "'quarantine'"])
    assert layer(con) == before


def test_a_failing_column_map_expression_holds_that_order_out(con, tmp_path):
    """The map's own expressions (here a CAST of text to DATE and a function of a NULL) are tried per
    row: the order they fail on is held, naming the expression and the source values."""
    con.execute("CREATE TABLE shop (id BIGINT, customer VARCHAR, ts VARCHAR, cents BIGINT)")
    shop = [(i, COMPANIES[i % 4], f"2026-11-{1 + i % 9:02d} 10:00:00", 100 * i) for i in range(1, 60)]
    shop += [(60, "acme", "garbage", 5), (61, None, "2026-11-02 10:00:00", 5)]
    con.executemany("INSERT INTO shop VALUES (?, ?, ?, ?)", shop)
    columns = (
        "MAP {'order_id': 'id', 'company': 'upper(customer)', 'order_day': 'CAST(CAST(ts AS TIMESTAMP) AS DATE)', "
        "'revenue': 'cents'}"
    )
    refused(con, f"SELECT * FROM serving_build('shop', columns := {columns})", ["shop"])
    got = con.execute(
        f"SELECT fct_rows, quarantined FROM serving_build('shop', columns := {columns}, on_bad_rows := 'quarantine')"
    ).fetchone()
    assert got == (59, 2)
    reasons = dict(con.execute("SELECT order_id, reason FROM serving_quarantine").fetchall())
    assert reasons[60] == "order_day := CAST(CAST(ts AS TIMESTAMP) AS DATE) is NULL or fails for ts = 'garbage'", (
        reasons
    )
    assert reasons[61] == "company := upper(customer) is NULL or fails for customer = NULL", reasons
    want = sorted((i, c.upper(), datetime.date.fromisoformat(ts[:10]), v) for i, c, ts, v in shop if i < 60)
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == want
    # the recorded map and policy serve a refresh from a file: 60 fixed, 5 turns bad
    path = tmp_path / "fix.parquet"
    con.execute(
        f"COPY (SELECT * FROM (VALUES (60, 'acme', '2026-11-03 01:00:00', 7), (5, 'globex', 'soon', 9)) "
        f"t(id, customer, ts, cents)) TO {sql_literal(str(path))}"
    )
    got = refresh(con, source=str(path))
    assert (got["inserted"], got["updated"], got["quarantined"]) == (1, 0, 1), got
    want = sorted([r for r in want if r[0] != 5] + [(60, "ACME", datetime.date(2026, 11, 3), 7)])
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == want
    reasons = dict(con.execute("SELECT order_id, reason FROM serving_quarantine").fetchall())
    assert sorted(reasons) == [5, 61] and "ts = 'soon'" in reasons[5], reasons
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []


# --------------------------------------------------------------------------------------------
# A follower of a Paimon table (pypaimon writes)
# --------------------------------------------------------------------------------------------


def lake_expected(rows: list[dict]):
    """(fct_orders, held ids) of a Paimon table's merged rows (pypaimon's own read)."""
    good = [r for r in rows if None not in (r["company"], r["order_day"], r["revenue"])]
    fct = sorted((r["order_id"], r["company"], r["order_day"], r["revenue"]) for r in good)
    return fct, sorted(r["order_id"] for r in rows if r not in good)


def assert_serves_lake(con, table, what: str) -> None:
    fct, held = lake_expected(table.read())
    assert con.execute("SELECT * FROM fct_orders ORDER BY ALL").fetchall() == fct, f"{what}: fct_orders"
    cells: dict = defaultdict(int)
    for _, c, d, v in fct:
        cells[(c, d)] += v
    assert con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY ALL").fetchall() == sorted(
        (c, d, v) for (c, d), v in cells.items()
    ), f"{what}: mart_daily"
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == [], what
    s = status_dict(con)
    assert (s["quarantined"], s["quarantined_ids"]) == (len(held), ", ".join(map(str, held[:10])) or None), what
    assert con.execute("SELECT order_id FROM serving_quarantine ORDER BY 1").fetchall() == [(k,) for k in held]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("engine", ["partial-update", "deduplicate"])
def test_a_follower_holds_bad_lake_orders_out_and_serves_the_rest(tmp_path, engine):
    wh = Warehouse(tmp_path / "wh")
    options = {"bucket": "2", "merge-engine": engine}
    t = wh.create("orders", ORDERS, ["order_id"], options)
    source = "paimon:" + wh.path("orders")
    d = datetime.date(2024, 1, 1)
    first = [{"order_id": i, "company": COMPANIES[i % 4], "order_day": d, "revenue": 10 * i} for i in range(1, 60)]
    first.append({"order_id": 60, "company": None, "order_day": d, "revenue": 1})  # bad from the start
    t.commit(first)
    con = connect()
    try:
        refused(con, f"SELECT * FROM serving_build({sql_literal(source)})", ["company is NULL", "order_id 60", HINT])
        got = con.execute(
            "SELECT fct_rows, quarantined FROM serving_build(?, on_bad_rows := 'quarantine')", [source]
        ).fetchone()
        assert got == (59, 1)
        assert_serves_lake(con, t, "built")
        con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '30 ms')", [source]).fetchall()

        # a new order without its company, an order that loses its revenue, and good corrections
        bad = [
            {"order_id": 777, "company": None, "order_day": d, "revenue": 5},
            {"order_id": 900, "company": "acme", "order_day": d, "revenue": 1},
            {"order_id": 3, "company": "globex", "order_day": d, "revenue": 12345},
        ]
        if engine == "deduplicate":  # a whole new version without revenue (partial-update keeps the old)
            bad.append({"order_id": 4, "company": "acme", "order_day": d, "revenue": None})
        t.commit(bad)
        s = wait_for(lambda: (lambda s: s if s["lake_snapshot"] == 2 else None)(status_dict(con)), 20, "snapshot 2")
        assert (s["state"], s["lag_ms"], s["last_error"]) == ("following", 0, None), s
        assert_serves_lake(con, t, "after the bad commit")

        # fixed upstream: each missing column given (for partial-update: only the missing ones)
        fix = [{"order_id": 777, "company": "globex", "order_day": d, "revenue": 5}]
        fix.append(
            {
                "order_id": 60,
                "company": "acme",
                "order_day": None if engine == "partial-update" else d,
                "revenue": None if engine == "partial-update" else 1,
            }
        )
        if engine == "deduplicate":
            fix.append({"order_id": 4, "company": "acme", "order_day": d, "revenue": 44})
        t.commit(fix)
        wait_for(lambda: status_dict(con)["lake_snapshot"] == 3, 20, "snapshot 3")
        assert_serves_lake(con, t, "after the fix")
        assert status_dict(con)["quarantined"] == 0
        # the lake fact itself, its held orders left out, agrees with the mart
        assert con.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall() == []
        con.execute("SELECT * FROM serving_unfollow()").fetchall()
    finally:
        con.close()


def quarantined_lake_layer(tmp_path, orders: int):
    """A Paimon table of `orders` good acme orders on one day, and a connection whose layer was
    built from it under on_bad_rows := 'quarantine': (table, source, day, connection)."""
    wh = Warehouse(tmp_path / "wh")
    t = wh.create("orders", ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "deduplicate"})
    source = "paimon:" + wh.path("orders")
    d = datetime.date(2024, 1, 1)
    t.commit([{"order_id": i, "company": "acme", "order_day": d, "revenue": i} for i in range(1, orders + 1)])
    con = connect()
    con.execute("SELECT * FROM serving_build(?, on_bad_rows := 'quarantine')", [source]).fetchall()
    return t, source, d, con


def test_reconcile_against_the_lake_fact_leaves_the_held_orders_out(tmp_path):
    t, source, d, con = quarantined_lake_layer(tmp_path, 19)
    try:
        t.commit([{"order_id": 5, "company": None, "order_day": d, "revenue": 5}])
        assert refresh(con, source=source)["quarantined"] == 1
        assert_serves_lake(con, t, "held")
        assert con.execute("SELECT * FROM serving_reconcile(fact := ?)", [source]).fetchall() == []
        assert con.execute("SELECT * FROM serving_olap('acme', fact := ?)", [source]).fetchall() == [
            (d, sum(range(1, 20)) - 5)
        ]
    finally:
        con.close()


def test_a_rebuild_after_a_rollback_keeps_the_policy_and_holds_what_is_bad_then(tmp_path):
    """A refresh that finds the held snapshot rolled back rebuilds the layer: under the recorded
    'quarantine', from the latest state, holding exactly the orders that are bad in it."""
    t, source, d, con = quarantined_lake_layer(tmp_path, 29)
    try:
        t.commit([{"order_id": 777, "company": None, "order_day": d, "revenue": 1}])
        t.commit([{"order_id": 5, "company": "globex", "order_day": d, "revenue": None}])
        assert refresh(con, source=source)["quarantined"] == 2
        assert_serves_lake(con, t, "two held")
        # the operator backs out snapshots 2 and 3; snapshot 2 is taken again by another bad order
        t.table.rollback_to(1)
        t.commit([{"order_id": 888, "company": "acme", "order_day": None, "revenue": 1}])
        got = refresh(con, source=source)
        assert got["rebuilt_because"] and got["quarantined"] == 1, got
        assert_serves_lake(con, t, "rebuilt")
        assert con.execute("SELECT order_id FROM serving_quarantine").fetchall() == [(888,)]
        assert status_dict(con)["on_bad_rows"] == "quarantine"
    finally:
        con.close()


def test_duplicate_keys_in_a_build_source_are_refused_or_held(con):
    """Issue 51: an order twice in a build source fails the build naming it, or, under quarantine, is
    held out (both rows) while every other order is served."""
    rows = base(60, seed=21)
    dup = [*rows, (5, "globex", day(2), 99)]
    make(con, "src", dup)
    con.execute("ALTER TABLE src DROP COLUMN deleted")
    refused(con, "SELECT * FROM serving_build('src')", ["duplicate order_id 5 (2 rows)", HINT])
    got = build(con, dup, "quarantine")
    assert (got["fct_rows"], got["quarantined"]) == (59, 1), got
    up = Upstream([r for r in rows if r[0] != 5])
    up.duplicated = {5}
    up.state[5] = rows[4]
    assert_serves(con, up, "a build source with an order twice")


def test_the_policy_survives_a_reopen(tmp_path):
    """Issue 51: the recorded policy is the layer's after the database is closed and opened again."""
    path = str(tmp_path / "q.duckdb")
    con = connect(path)
    rows = base(40, seed=22)
    build(con, rows, "quarantine")
    con.close()
    con = connect(path)
    assert status_dict(con)["on_bad_rows"] == "quarantine"
    make(con, "changes", [(3, None, day(1), 1), (4, "acme", day(2), 5)])
    got = refresh(con)
    assert got["quarantined"] == 1, got
    up = Upstream(rows)
    up.apply([(3, None, day(1), 1, False), (4, "acme", day(2), 5, False)])
    assert_serves(con, up, "quarantine after a reopen")


def test_a_mart_only_replica_refuses_quarantine(tmp_path):
    """Issue 51: a replica has no orders to hold out: a build of a mart table and a replica's follower
    refuse on_bad_rows := 'quarantine', saying why; the replica is left as it was."""
    wh = Warehouse(tmp_path / "wh")
    fact = wh.create("fct", ORDERS, ["order_id"], {"bucket": "1"})
    fact.commit([{"order_id": 1, "company": "acme", "order_day": D0, "revenue": 5}])
    writer = connect()
    writer.execute("SELECT * FROM serving_build(?)", ["paimon:" + wh.path("fct")])
    mart = "paimon:" + wh.path("mart")
    writer.execute("SELECT * FROM serving_publish(?)", [mart])
    replica = connect()
    refused(
        replica,
        f"SELECT * FROM serving_build({sql_literal(mart)}, on_bad_rows := 'quarantine')",
        ["is a mart table", "a mart-only replica has no orders to hold out"],
    )
    replica.execute("SELECT * FROM serving_build(?)", [mart])
    before = replica.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
    refused(
        replica,
        f"SELECT * FROM serving_follow({sql_literal(mart)}, on_bad_rows := 'quarantine')",
        ["serving_follow", "this layer is a mart-only replica"],
    )
    assert replica.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == before == [("acme", D0, 5)]
    assert status_dict(replica)["following"] is None


def test_a_failing_order_id_expression_is_refused_under_either_policy(con):
    """Issue 51: a row whose order_id := expression fails names no order that could be held out: the
    build is refused under 'fail' (DuckDB's conversion error, naming the value) and under 'quarantine'
    (naming the expression and the value it was given), and nothing is built."""
    con.execute(
        "CREATE TABLE codes AS SELECT * FROM (VALUES ('1', 'acme', DATE '2024-01-01', 5), "
        "('x2', 'acme', DATE '2024-01-02', 6), ('3', 'globex', DATE '2024-01-01', 7)) "
        "t(code, company, order_day, revenue)"
    )
    key = "columns := MAP {'order_id': 'CAST(code AS BIGINT)'}"
    refused(con, f"SELECT * FROM serving_build('codes', {key})", ["Could not convert string 'x2'"])
    refused(
        con,
        f"SELECT * FROM serving_build('codes', on_bad_rows := 'quarantine', {key})",
        ["1 row(s) have no usable order_id", "order_id := CAST(code AS BIGINT) is NULL or fails for code = 'x2'"],
    )
    assert con.execute("SELECT state FROM serving_status()").fetchone() == ("not built",)
