"""serving_explain shows the dashboard reading only mart_daily; planning a build never builds."""

from __future__ import annotations

import re

import duckdb
import pytest
from conftest import build, dashboard, gen_rows, load_table, oracle, sql_literal, table_exists

SERVING_TABLES = ["fct_orders", "mart_daily", "serving_meta"]


def plan_text(con, company: str) -> str:
    rows = con.execute("SELECT explain_key, explain_value FROM serving_explain(?) ORDER BY line", [company]).fetchall()
    assert rows, "serving_explain returned no rows"
    assert all(k == "physical_plan" for k, _ in rows), rows
    return "\n".join(v for _, v in rows)


def normalized(text: str) -> str:
    """The plan without box drawing, whitespace collapsed (values may sit inside boxes)."""
    text = re.sub(r"[\u2500-\u257f]", " ", text)
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("company", ["c1", "O'Reilly", "x' OR '1'='1", "Café Zürich", "東京商事"])
def test_explain_reads_only_mart_daily(con, tmp_path, company):
    rows, _ = gen_rows(41, 5_000, 12, 30)
    rows.append((7, "c1", rows[0][2], 1))
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    text = plan_text(con, company)
    flat = normalized(text)
    assert "mart_daily" in text
    assert "fct_orders" not in text.lower()
    quoted = sql_literal(company)  # how DuckDB renders a VARCHAR constant in a filter
    assert re.search(r"company\s*=\s*" + re.escape(quoted), flat), (
        f"no company filter with {quoted} in the plan:\n{text}"
    )
    # It is the plan of the dashboard statement: ordered by revenue DESC, then day ASC.
    assert re.search(r"revenue DESC,?\s*order_day ASC", flat), text
    # Aggregating would mean the plan recomputes the rollup instead of looking it up.
    assert not re.search(r"group[ _]?by|aggregate", text, re.IGNORECASE), text


def test_explain_tracks_the_bound_company(con, tmp_path):
    rows, companies = gen_rows(42, 2_000, 12, 20)
    assert "Acme" in companies and "ACME" in companies
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    a = normalized(plan_text(con, "Acme"))
    b = normalized(plan_text(con, "ACME"))
    assert "'Acme'" in a and "'ACME'" not in a
    assert "'ACME'" in b and "'Acme'" not in b


def test_explain_of_unknown_company_never_touches_fct_orders(con, tmp_path):
    rows, _ = gen_rows(47, 2_000, 12, 20)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    for company in ["nobody", "", "zz\x01", "ÿ"]:
        text = plan_text(con, company)
        assert "fct_orders" not in text.lower(), text
        # Either the mart lookup, or an empty result the optimizer proved from mart statistics.
        assert "mart_daily" in text or "Empty Result" in text, text
    # A NUL would reach us cut short (the C API passes strings NUL-terminated): refused, not cut.
    with pytest.raises(duckdb.Error, match="NUL character"):
        plan_text(con, "\x00zz")


def test_explain_before_build_says_so(con):
    with pytest.raises(duckdb.Error) as ei:
        con.execute("SELECT * FROM serving_explain('c1')").fetchall()
    assert "serving_explain" in str(ei.value) and "run serving_build" in str(ei.value)


def test_explain_of_build_does_not_build(con, tmp_path):
    rows, _ = gen_rows(43, 3_000, 6, 20)
    load_table(con, "src", rows, tmp_path)
    plan = con.execute("EXPLAIN SELECT * FROM serving_build('src')").fetchall()
    assert plan and "serving_build" in "\n".join(v for _, v in plan).lower()
    for t in SERVING_TABLES:
        assert not table_exists(con, t), f"EXPLAIN built {t}"
    con.execute("DESCRIBE SELECT * FROM serving_build('src')").fetchall()
    for t in SERVING_TABLES:
        assert not table_exists(con, t), f"DESCRIBE built {t}"


def test_prepare_of_build_does_not_build_until_executed(con, tmp_path):
    rows, companies = gen_rows(44, 3_000, 6, 20)
    load_table(con, "src", rows, tmp_path)
    con.execute("PREPARE p AS SELECT * FROM serving_build('src')")
    for t in SERVING_TABLES:
        assert not table_exists(con, t), f"PREPARE built {t}"
    # EXECUTE does build, and builds the right thing.
    summary = con.execute("EXECUTE p").fetchall()
    assert summary[0][0] == len(rows)
    per_company, _ = oracle(rows)
    for c in companies:
        assert dashboard(con, c) == per_company.get(c, [])


def test_explain_of_build_leaves_existing_build_untouched(con, tmp_path):
    rows_a, companies_a = gen_rows(45, 3_000, 6, 20)
    rows_b, _ = gen_rows(46, 1_000, 3, 10)
    load_table(con, "src_a", rows_a, tmp_path)
    load_table(con, "src_b", rows_b, tmp_path)
    build(con, "src_a")
    before = con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
    con.execute("EXPLAIN SELECT * FROM serving_build('src_b')").fetchall()
    con.execute("PREPARE q AS SELECT * FROM serving_build('src_b')")
    assert con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall() == before
    assert con.execute("SELECT source FROM serving_meta").fetchall() == [("src_a",)]
    per_company, _ = oracle(rows_a)
    for c in companies_a:
        assert dashboard(con, c) == per_company.get(c, [])


def test_explain_under_a_decoy_mart_daily_plans_the_layers_own(con, tmp_path):
    """Issue 51: a same-named mart_daily earlier on the search path never answers, and serving_explain
    shows the plan of the layer's own mart: DuckDB 2.0 names the scanned table with its schema, so the
    decoy's schema must not appear, the layer's must; the decoy holds the same company with another
    revenue, so the dashboard tells the two apart too."""
    rows, _ = gen_rows(43, 2_000, 6, 20)
    load_table(con, "src", rows, tmp_path)
    build(con, "src")
    want, _ = oracle(rows)
    company = rows[0][1]
    con.execute("CREATE SCHEMA decoy")
    con.execute(
        "CREATE TABLE decoy.mart_daily AS SELECT ? AS company, DATE '2024-01-01' AS order_day, "
        "CAST(-1 AS HUGEINT) AS revenue",
        [company],
    )
    con.execute("SET search_path = 'decoy,main'")
    flat = normalized(plan_text(con, company))
    assert re.search(r"(Seq Scan|SEQ_SCAN)\s+Table:\s*memory\.main\.mart_daily", flat), flat
    assert "decoy" not in flat, flat
    assert re.search(r"company\s*=\s*" + re.escape(sql_literal(company)), flat), flat
    assert dashboard(con, company) == want[company]
