"""The expression gate as an allow-list (issue 51, item 1): every function a `columns :=` or
`deleted :=` expression calls must be one DuckDB itself classes as CONSISTENT
(`duckdb_functions().stability`), found the way DuckDB finds it (any case, quoted or not,
schema-qualified), or a macro whose body passes; no subquery, no table function, no aggregate.
Before this gate, quoted upper-case names passed (`"CURRENT_SETTING"('...')` read DuckDB's settings,
credentials included, into a layer that may be published) and `now()` was accepted.

Oracle: what each refused call is, named here by hand; for the accepted maps, plain Python over the
rows written."""

from __future__ import annotations

import datetime

import duckdb
import pytest
from conftest import connect

# (expression, the function the refusal must name, why it is refused)
HOSTILE = [
    # A setting that exists (a credential's would read the same way): the call itself must be refused.
    ("\"CURRENT_SETTING\"('threads')", "current_setting", "reads settings"),
    ('"RANDOM"()', "random", "volatile"),
    ('"UUID"()', "uuid", "volatile"),
    ('"RaNdOm"()', "random", "volatile"),
    ("now()", "now", "the clock"),
    ("CAST(current_date AS VARCHAR)", "current_date", "the clock (no parentheses)"),
    ("current_localtimestamp()", "current_localtimestamp", "the clock, CONSISTENT by DuckDB's classing"),
    ("main.random()", "random", "schema-qualified"),
    ('"system".main."GetEnv"(\'HOME\')', "getenv", "catalog- and schema-qualified, quoted, mixed case"),
    ('upper(customer || CAST("Gen_Random_Uuid"() AS VARCHAR))', "gen_random_uuid", "nested"),
    ("jitter(amount)", "jitter", "a user macro calling random()"),
    ("outer_m(amount)", "outer_m", "a macro calling that macro"),
    ("customer || peek()", "peek", "a user macro reading a setting"),
    ("ago(INTERVAL 1 DAY)", "ago", "a built-in macro reading the clock"),
    ("tm()", "tm", "a table macro"),
    ("sum(amount)", "sum", "an aggregate"),
    ("no_such_fn(amount)", "no_such_fn", "not a function"),
    ("(SELECT 1)", "SELECT", "a subquery"),
]


def source(con) -> None:
    con.execute("CREATE TABLE src (id BIGINT, customer VARCHAR, order_day DATE, amount BIGINT, op VARCHAR)")
    con.execute(
        "INSERT INTO src VALUES (1, 'acme', DATE '2026-11-01', 5, 'U'), (2, 'globex', DATE '2026-11-02', 7, 'D')"
    )
    con.execute("CREATE MACRO jitter(x) AS x + random()")
    con.execute("CREATE MACRO outer_m(x) AS jitter(x)")
    con.execute("CREATE MACRO peek() AS current_setting('threads')")
    con.execute("CREATE MACRO tm() AS TABLE SELECT 1 AS x")


@pytest.mark.parametrize("expr,name,why", HOSTILE, ids=[h[2] for h in HOSTILE])
def test_columns_expression_outside_the_allow_list_is_refused_naming_the_function(expr, name, why):
    con = connect()
    source(con)
    with pytest.raises(duckdb.Error, match=r"serving_build: parameter 'columns'") as e:
        con.execute(
            "SELECT * FROM serving_build('src', columns := MAP {'order_id': 'id', 'company': ?, 'revenue': 'amount'})",
            # Typed as the serving column wants it: refused for the call, never for a type.
            [f"CAST(({expr}) AS VARCHAR)"],
        )
    assert name.lower() in str(e.value).lower(), (why, e.value)
    # Nothing was built: the gate runs before any table is written.
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'fct_orders'").fetchone() == (0,)


@pytest.mark.parametrize("expr,name,why", HOSTILE, ids=[h[2] for h in HOSTILE])
def test_deleted_expression_outside_the_allow_list_is_refused_and_the_layer_kept(expr, name, why):
    con = connect()
    source(con)
    con.execute(
        "SELECT * FROM serving_build('src', columns := MAP {'order_id': 'id', 'company': 'customer', "
        "'revenue': 'amount'})"
    )
    before = con.execute("SELECT * FROM fct_orders ORDER BY order_id").fetchall()
    with pytest.raises(duckdb.Error, match=r"serving_refresh: parameter 'deleted'") as e:
        con.execute(
            "SELECT * FROM serving_refresh('src', deleted := ?)",
            [f"op = 'D' OR ({expr}) IS NULL"],
        )
    assert name.lower() in str(e.value).lower(), (why, e.value)
    assert con.execute("SELECT * FROM fct_orders ORDER BY order_id").fetchall() == before


def test_consistent_functions_and_macros_pass_in_any_spelling():
    """The allow-list does not refuse what a mapping rightly uses: quoted and qualified names of
    CONSISTENT functions, built-in macros such as nullif, a user macro over the row, types with
    parameters."""
    con = connect()
    source(con)
    con.execute("CREATE MACRO cents(x) AS CAST(round(x * 100) AS BIGINT)")
    con.execute(
        "SELECT * FROM serving_build('src', columns := MAP {'order_id': 'id', "
        "'company': 'main.\"UPPER\"(nullif(customer, ''''))', "
        "'revenue': 'cents(CAST(amount AS DECIMAL(10, 2)))'})"
    )
    got = con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders ORDER BY order_id").fetchall()
    rows = [(1, "acme", "2026-11-01", 5), (2, "globex", "2026-11-02", 7)]
    want = [(i, c.upper(), datetime.date.fromisoformat(d), a * 100) for i, c, d, a in rows]
    assert got == want
    # deleted := through a user macro over the row, as the refresh applies it.
    con.execute("CREATE MACRO is_gone(o) AS upper(o) = 'D'")
    s = con.execute(
        "SELECT inserted, updated, deleted FROM serving_refresh('src', deleted := 'is_gone(op)')"
    ).fetchone()
    assert s == (0, 1, 1), s
    assert con.execute("SELECT order_id FROM fct_orders").fetchall() == [(1,)]
