"""serving_dashboard / serving_olap / serving_explain with top, from_day, to_day and grain.

The oracle is plain Python over the generated rows: the window filters days, ISO weeks start on
the Monday (`date - weekday()`), quarters by month, then the periods are ranked by revenue DESC,
period ASC and cut at `top`.
"""

from __future__ import annotations

import datetime
import random
import re

import duckdb
import pytest
from conftest import build, connect, gen_rows, load_table, sql_literal
from support.dashboard_oracle import by_company, expected

GRAINS = ["day", "week", "month", "quarter", "year"]
FUNCTIONS = ["serving_dashboard", "serving_olap", "serving_explain"]
START = datetime.date(2023, 11, 20)
DAYS = 800  # a little over two years: every grain has several periods, some cut by windows


def args_sql(company, top=None, from_day=None, to_day=None, grain=None) -> str:
    """The call's arguments as SQL literals, named parameters only when given."""
    parts = [sql_literal(company)]
    if top is not None:
        parts.append(f"top := {top}")
    if from_day is not None:
        parts.append(f"from_day := DATE '{from_day.isoformat()}'")
    if to_day is not None:
        parts.append(f"to_day := DATE '{to_day.isoformat()}'")
    if grain is not None:
        parts.append(f"grain := {sql_literal(grain)}")
    return ", ".join(parts)


def ask(con, function, company, **params):
    return con.execute(f"SELECT * FROM {function}({args_sql(company, **params)})").fetchall()


def plan(con, company, **params) -> str:
    rows = con.execute(
        f"SELECT explain_key, explain_value FROM serving_explain({args_sql(company, **params)}) ORDER BY line"
    )
    text = "\n".join(v for _, v in rows.fetchall())
    return re.sub(r"\s+", " ", re.sub(r"[\u2500-\u257f]", " ", text))


def assert_both(con, rows, company, **params):
    want = expected(rows, company, **params)
    for function in ("serving_dashboard", "serving_olap"):
        got = ask(con, function, company, **params)
        assert got == want, f"{function}({args_sql(company, **params)}) differs from the oracle"
    return want


@pytest.fixture(scope="module")
def built(ext_path, tmp_path_factory):
    """One build shared by the read-only tests: tricky company names, ~800 days of orders."""
    con = connect(":memory:", ext_path)
    rows, companies = gen_rows(901, 30_000, 14, DAYS, start=START)
    load_table(con, "src", rows, tmp_path_factory.mktemp("dash"))
    build(con, "src")
    yield con, rows, companies
    con.close()


@pytest.mark.parametrize("grain", GRAINS)
def test_every_grain_with_and_without_window_and_top(built, grain):
    con, rows, companies = built
    windows = [
        (None, None),
        (datetime.date(2024, 2, 14), datetime.date(2025, 5, 17)),  # cuts weeks, months, quarters, years
        (datetime.date(2024, 7, 3), None),
        (None, datetime.date(2024, 3, 31)),
    ]
    for company in companies:
        for from_day, to_day in windows:
            for top in (None, 1, 3, 10_000):
                assert_both(con, rows, company, top=top, from_day=from_day, to_day=to_day, grain=grain)


def test_grain_in_any_case(built):
    con, rows, _ = built
    for spelled in ["DAY", "Week", "MONTH", "Quarter", "yEaR"]:
        want = expected(rows, "O'Reilly", grain=spelled.lower())
        assert ask(con, "serving_dashboard", "O'Reilly", grain=spelled) == want
        assert ask(con, "serving_olap", "O'Reilly", grain=spelled) == want


def test_day_grain_is_the_plain_dashboard(built):
    """grain := 'day' and no parameters at all give exactly today's answer."""
    con, rows, companies = built
    for company in companies[:4]:
        plain = ask(con, "serving_dashboard", company)
        assert plain == ask(con, "serving_dashboard", company, grain="day") == expected(rows, company)


def test_periods_are_labelled_by_their_first_day(built):
    con, _rows, _ = built
    for grain, ok in [
        ("week", lambda d: d.weekday() == 0),
        ("month", lambda d: d.day == 1),
        ("quarter", lambda d: d.day == 1 and d.month in (1, 4, 7, 10)),
        ("year", lambda d: (d.month, d.day) == (1, 1)),
    ]:
        got = ask(con, "serving_dashboard", "東京商事", grain=grain)
        assert got and all(ok(d) for d, _ in got), (grain, got)
        types = con.execute(
            f"SELECT typeof(order_day), typeof(revenue) FROM serving_dashboard('東京商事', grain := '{grain}') LIMIT 1"
        ).fetchall()
        assert types == [("DATE", "HUGEINT")]
        cur = con.execute(f"SELECT * FROM serving_olap('東京商事', grain := '{grain}')")
        assert [d[0] for d in cur.description] == ["order_day", "revenue"]


def test_window_is_inclusive_and_cuts_periods(built):
    con, rows, _ = built
    company = max(by_company(rows), key=lambda c: len(by_company(rows)[c]))
    days = sorted({d for _o, c, d, _r in rows if c == company})
    first, last = days[0], days[-1]
    # a one-day window on a day that has orders returns exactly that day
    one = ask(con, "serving_dashboard", company, from_day=days[5], to_day=days[5])
    assert [d for d, _ in one] == [days[5]]
    # the bounds themselves are inside
    assert ask(con, "serving_dashboard", company, from_day=last) == expected(rows, company, from_day=last)
    assert [d for d, _ in ask(con, "serving_dashboard", company, to_day=first)] == [first]
    # a month cut by the window sums only its days inside it, and is still labelled by the 1st
    cut = datetime.date(2024, 6, 17)
    assert any(d.year == 2024 and d.month == 6 and d < cut for d in days), "harness: June is not cut"
    got = dict(ask(con, "serving_dashboard", company, from_day=cut, grain="month"))
    inside = sum(r for _o, c, d, r in rows if c == company and cut <= d <= datetime.date(2024, 6, 30))
    whole = sum(r for _o, c, d, r in rows if c == company and d.year == 2024 and d.month == 6)
    assert got[datetime.date(2024, 6, 1)] == inside != whole
    assert dict(ask(con, "serving_olap", company, from_day=cut, grain="month")) == got


def test_empty_windows(built):
    con, rows, companies = built
    before = START - datetime.timedelta(days=10)
    after = START + datetime.timedelta(days=DAYS + 10)
    company = companies[0]
    for params in [
        {"to_day": before},
        {"from_day": after},
        {"from_day": before, "to_day": before},
        {"from_day": after, "to_day": after, "grain": "year", "top": 3},
    ]:
        for function in ("serving_dashboard", "serving_olap"):
            assert ask(con, function, company, **params) == [], (function, params)
    # a day inside the history on which the rarest company sold nothing
    rare = min(by_company(rows), key=lambda c: len(by_company(rows)[c]))
    sold = {d for d, _r in by_company(rows)[rare]}
    quiet = next(d for d in (START + datetime.timedelta(days=i) for i in range(DAYS)) if d not in sold)
    assert ask(con, "serving_dashboard", rare, from_day=quiet, to_day=quiet) == []
    assert ask(con, "serving_olap", rare, from_day=quiet, to_day=quiet, grain="week") == []
    assert ask(con, "serving_dashboard", "no such company", top=5, grain="month") == []


@pytest.mark.parametrize("company", ["O'Reilly", "東京商事", "x' OR '1'='1", "Café Zürich"])
def test_tricky_companies(built, company):
    con, rows, _ = built
    params = {"top": 5, "from_day": datetime.date(2024, 1, 1), "to_day": datetime.date(2024, 12, 31), "grain": "week"}
    want = assert_both(con, rows, company, **params)
    assert want, f"the generated data should give {company!r} orders in 2024"
    # bound as a prepared parameter too, named parameters included
    got = con.execute(
        "SELECT * FROM serving_dashboard(?, top := ?, from_day := ?, to_day := ?, grain := ?)",
        [company, 5, datetime.date(2024, 1, 1), datetime.date(2024, 12, 31), "week"],
    ).fetchall()
    assert got == want


def test_ties_at_the_top_n_boundary(con, tmp_path):
    """Equal revenues are ordered by period ASC, so `top` keeps the earlier periods."""
    d = datetime.date
    rows = [
        # days: 300 on the 2nd, 5th and 9th; 100 on the 1st
        (1, "t", d(2025, 1, 9), 300),
        (2, "t", d(2025, 1, 2), 200),
        (3, "t", d(2025, 1, 2), 100),
        (4, "t", d(2025, 1, 5), 300),
        (5, "t", d(2025, 1, 1), 100),
        # months: February and April tie with January's 1000 (400 + 600 in April)
        (6, "t", d(2025, 4, 30), 400),
        (7, "t", d(2025, 4, 1), 600),
        (8, "t", d(2025, 2, 14), 1000),
        (9, "t", d(2025, 3, 3), -5),
    ]
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    top2 = ask(con, "serving_dashboard", "t", top=2, to_day=d(2025, 1, 31))
    assert top2 == [(d(2025, 1, 2), 300), (d(2025, 1, 5), 300)]
    assert top2 == expected(rows, "t", top=2, to_day=d(2025, 1, 31))
    assert ask(con, "serving_dashboard", "t", top=3, to_day=d(2025, 1, 31))[2] == (d(2025, 1, 9), 300)
    months = ask(con, "serving_dashboard", "t", top=2, grain="month")
    assert months == [(d(2025, 1, 1), 1000), (d(2025, 2, 1), 1000)] == expected(rows, "t", top=2, grain="month")
    assert ask(con, "serving_olap", "t", top=2, grain="month") == months
    assert ask(con, "serving_dashboard", "t", top=3, grain="month")[2] == (d(2025, 4, 1), 1000)
    # the quarter and the year hold everything
    assert ask(con, "serving_dashboard", "t", grain="quarter") == [(d(2025, 1, 1), 1995), (d(2025, 4, 1), 1000)]
    assert ask(con, "serving_dashboard", "t", grain="year", top=1) == [(d(2025, 1, 1), 2995)]


def test_iso_weeks_across_the_year_boundary(con, tmp_path):
    d = datetime.date
    # 2024-12-30 is the Monday of ISO week 2025-W01; 2026-01-01 is a Thursday in 2026-W01 (Mon 2025-12-29).
    rows = [(1, "w", d(2024, 12, 29), 1), (2, "w", d(2024, 12, 30), 10), (3, "w", d(2025, 1, 5), 100)]
    rows += [(4, "w", d(2025, 12, 29), 7), (5, "w", d(2026, 1, 1), 7), (6, "w", d(2026, 1, 4), 7)]
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    want = [(d(2024, 12, 30), 110), (d(2025, 12, 29), 21), (d(2024, 12, 23), 1)]
    assert ask(con, "serving_dashboard", "w", grain="week") == want == expected(rows, "w", grain="week")
    assert ask(con, "serving_olap", "w", grain="week") == want


def test_random_parameters_dashboard_equals_olap_equals_oracle(built):
    """Property: for random companies and parameters, the mart, the fact and Python agree."""
    con, rows, companies = built
    rng = random.Random(20261201)
    for _ in range(300):
        company = rng.choice([*companies, "nobody"])
        params = {"grain": rng.choice([None, *GRAINS, "Month", "WEEK"])}
        if rng.random() < 0.6:
            params["top"] = rng.choice([1, 2, 5, 10, rng.randrange(1, 1000)])
        bounds = sorted(START + datetime.timedelta(days=rng.randrange(-30, DAYS + 30)) for _ in range(2))
        if rng.random() < 0.6:
            params["from_day"] = bounds[0]
        if rng.random() < 0.6:
            params["to_day"] = bounds[1]
        want = expected(rows, company, **{k: v for k, v in params.items() if v is not None})
        dash = ask(con, "serving_dashboard", company, **params)
        olap = ask(con, "serving_olap", company, **params)
        assert dash == olap == want, (company, params)


def test_refresh_moves_windowed_answers(con, tmp_path):
    d = datetime.date
    rows = [(1, "r", d(2025, 3, 1), 10), (2, "r", d(2025, 3, 20), 20), (3, "r", d(2025, 5, 2), 5)]
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    assert ask(con, "serving_dashboard", "r", grain="month", from_day=d(2025, 3, 10)) == [
        (d(2025, 3, 1), 20),
        (d(2025, 5, 1), 5),
    ]
    con.execute(
        "CREATE TABLE changes AS SELECT * FROM (VALUES (2, 'r', DATE '2025-05-20', 20, false), "
        "(4, 'r', DATE '2025-03-15', 1, false)) t(order_id, company, order_day, revenue, deleted)"
    )
    con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
    after = [(1, "r", d(2025, 3, 1), 10), (2, "r", d(2025, 5, 20), 20), (3, "r", d(2025, 5, 2), 5)]
    after.append((4, "r", d(2025, 3, 15), 1))
    want = expected(after, "r", grain="month", from_day=d(2025, 3, 10))
    assert want == [(d(2025, 5, 1), 25), (d(2025, 3, 1), 1)]
    assert ask(con, "serving_dashboard", "r", grain="month", from_day=d(2025, 3, 10)) == want
    assert ask(con, "serving_olap", "r", grain="month", from_day=d(2025, 3, 10)) == want


# --------------------------------------------------------------------------------------------
# Bad input: refused at bind, naming the parameter and the value
# --------------------------------------------------------------------------------------------

BAD = [
    ("top := 0", "parameter 'top' = '0': must be a positive integer (the number of rows to keep)"),
    ("top := -3", "parameter 'top' = '-3': must be a positive integer (the number of rows to keep)"),
    ("top := NULL", "parameter 'top' must not be NULL"),
    ("from_day := NULL", "parameter 'from_day' must not be NULL"),
    ("to_day := NULL", "parameter 'to_day' must not be NULL"),
    ("grain := NULL", "parameter 'grain' must not be NULL"),
    (
        "from_day := DATE '2025-03-02', to_day := DATE '2025-03-01'",
        "parameter 'from_day' = '2025-03-02': is after to_day '2025-03-01' "
        "(the window bounds order_day inclusively, from_day <= to_day)",
    ),
    (
        "grain := 'fortnight'",
        "parameter 'grain' = 'fortnight': not one of day, week, month, quarter, year (in any case)",
    ),
    ("grain := 'days'", "parameter 'grain' = 'days': not one of day, week, month, quarter, year (in any case)"),
    ("grain := ''", "parameter 'grain' = '': not one of day, week, month, quarter, year (in any case)"),
]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("named,message", BAD, ids=[b[0] for b in BAD])
def test_bad_parameters_are_refused_at_bind(built, function, named, message):
    con, _rows, _ = built
    with pytest.raises(duckdb.BinderException) as e:
        con.execute(f"SELECT * FROM {function}('O''Reilly', {named})").fetchall()
    # the first line; DuckDB adds the caret context below it
    assert str(e.value).splitlines()[0] == f"Binder Error: {function}: {message}"
    # at bind: PREPARE alone refuses it too
    with pytest.raises(duckdb.BinderException):
        con.execute(f"PREPARE bad AS SELECT * FROM {function}('O''Reilly', {named})")


def test_bad_parameters_as_prepared_values(built):
    con, _rows, _ = built
    with pytest.raises(duckdb.BinderException, match=r"parameter 'top' = '0': must be a positive integer"):
        con.execute("SELECT * FROM serving_dashboard(?, top := ?)", ["O'Reilly", 0]).fetchall()
    with pytest.raises(duckdb.BinderException, match=r"parameter 'top' must not be NULL"):
        con.execute("SELECT * FROM serving_olap(?, top := ?)", ["O'Reilly", None]).fetchall()
    with pytest.raises(duckdb.BinderException, match=r"parameter 'grain' = 'Fortnight': not one of day, week"):
        con.execute("SELECT * FROM serving_explain(?, grain := ?)", ["O'Reilly", "Fortnight"]).fetchall()


def test_unknown_named_parameter_is_still_refused(built):
    con, _rows, _ = built
    with pytest.raises(duckdb.BinderException, match="days"):
        con.execute("SELECT * FROM serving_dashboard('O''Reilly', days := 3)").fetchall()


# --------------------------------------------------------------------------------------------
# The plan: mart_daily with the company and the window in its scan, never fct_orders
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grain", GRAINS)
def test_explain_shows_the_windowed_mart_scan(built, grain):
    con, _rows, _ = built
    window = {"from_day": datetime.date(2024, 2, 1), "to_day": datetime.date(2024, 11, 30)}
    text = plan(con, "O'Reilly", top=10, grain=grain, **window)
    assert "mart_daily" in text and "fct_orders" not in text.lower(), text
    scan = text[text.index("mart_daily") :]
    assert re.search(r"company\s*=\s*'O''Reilly'", scan), text
    assert re.search(r"order_day\s*>=\s*'2024-02-01'", scan), text
    assert re.search(r"order_day\s*<=\s*'2024-11-30'", scan), text
    # top is a Top-N over revenue DESC, period ASC, not a sort of the whole history
    assert re.search(r"(Top N|TOP_N).*revenue DESC,?\s*order_day ASC", text), text
    # only the day grain reads the mart without aggregating it
    assert bool(re.search(r"group[ _]?by|aggregate", text, re.IGNORECASE)) == (grain != "day"), text


def test_explain_of_one_bound_tracks_it(built):
    con, _rows, _ = built
    text = plan(con, "東京商事", from_day=datetime.date(2024, 5, 6))
    assert re.search(r"company\s*=\s*'東京商事'.*order_day\s*>=\s*'2024-05-06'", text), text
    assert not re.search(r"order_day\s*<=", text), text
    text = plan(con, "東京商事", to_day=datetime.date(2024, 5, 7), grain="quarter")
    assert re.search(r"order_day\s*<=\s*'2024-05-07'", text) and not re.search(r"order_day\s*>=", text), text
    assert "fct_orders" not in text, text
