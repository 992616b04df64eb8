"""The README's examples run as written (issue 23): the pypaimon recipe makes the lake table, then
the "30 seconds of SQL" block runs statement by statement from a scratch directory (its relative
`build/` and `lake/` paths resolve there), each `-- <values>` comment compared with the values the
statement returns; the whole block also runs through the duckdb CLI in its default box mode,
where the plan and the tier DDL must read as lines, not as one cell of escaped newlines; the Node
block runs with the pinned @duckdb/node-api. The wheel's Python block runs in test_wheel.py's fresh
venv (it needs the installed wheel)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import NODE_DIR, ROOT, node_env, oracle, readme_block
from support.matrix_util import run


def sql_statements(block: str) -> list[tuple[str, str | None]]:
    """(statement, the comment on its last line or on the indented comment line below it)."""
    out: list[tuple[str, str | None]] = []
    pending: list[str] = []
    for line in block.splitlines():
        if re.match(r"^\s+--", line) and out and not pending:  # a comment continuing the statement above
            stmt, comment = out[-1]
            out[-1] = (stmt, comment or line.strip()[2:].strip())
            continue
        if line.startswith("--") or not line.strip():
            continue
        m = re.match(r"^(.*;)\s*(?:--\s*(.*))?$", line)
        pending.append(m.group(1) if m else line)
        if m:
            out.append(("\n".join(pending), m.group(2)))
            pending = []
    assert not pending, f"a statement without its ';': {pending}"
    return out


def tokens(values) -> list[str]:
    def one(v):
        if v is None:
            return "NULL"
        if isinstance(v, datetime.date):
            return v.isoformat()
        return str(v)

    return [one(v) for row in values for v in row]


def expected_tokens(comment: str) -> list[str] | None:
    """The values a comment promises ('4, 3', '2026-11-01 1500, 2026-11-02 900', 'empty: ...'),
    or None for a comment in words. A trailing '(...)' explains and is not a value."""
    text = re.sub(r"\s*\(.*\)\s*$", "", comment)
    if text.startswith("empty"):
        return []
    if re.fullmatch(r"[\d\-]+(?:[,\s]+[\d\-]+)*", text):
        return re.split(r"[,\s]+", text)
    return None


@pytest.fixture
def scratch(tmp_path, ext_path):
    """A working directory where the README's relative paths resolve: `build/` is this checkout's
    (the artifact the examples LOAD), `lake/` is made by the README's own pypaimon recipe."""
    assert Path(ext_path).resolve() == (ROOT / "build/release/streamhouse.duckdb_extension").resolve(), ext_path
    (tmp_path / "build").symlink_to(ROOT / "build")
    recipe = readme_block("python", "CatalogFactory")
    run([sys.executable, "-c", recipe], cwd=tmp_path, timeout=120)
    assert (tmp_path / "lake" / "db.db" / "fct_orders" / "snapshot").is_dir()
    return tmp_path


def test_sql_block_runs_as_written_and_returns_what_its_comments_say(scratch, monkeypatch):
    monkeypatch.chdir(scratch)
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    statements = sql_statements(readme_block("sql", "serving_build('orders')"))
    assert len(statements) >= 15, statements
    checked = 0
    orders = None
    try:
        for stmt, comment in statements:
            rows = con.execute(stmt).fetchall()  # once: a writer's result is the one its comment describes
            if stmt.startswith("CREATE TABLE orders"):
                orders = con.execute("SELECT * FROM orders").fetchall()
            if comment is None:
                continue
            want = expected_tokens(comment)
            if want is not None:
                assert tokens(rows) == want, f"{stmt}\n  README says: {comment}\n  got: {rows}"
                checked += 1
            elif "serving_explain" in stmt:
                text = "\n".join(r[0] for r in rows)
                assert len(rows) > 5 and all("\n" not in r[0] for r in rows), rows
                assert "mart_daily" in text and "fct_orders" not in text, text
                checked += 1
            elif "paimon_tier_ddl" in stmt:
                assert [
                    r[0] for r in con.execute("SELECT line FROM paimon_tier_ddl('lake.accounts')").fetchall()
                ] == list(range(1, len(rows) + 1))
                text = "\n".join(r[1] for r in rows)
                assert text == con.execute("SELECT paimon_tier_ddl('lake.accounts')").fetchone()[0]
                checked += 1
        # The comments are the README's own; an independent oracle over the same orders agrees with the
        # first dashboard's comment, so a wrong comment cannot pass by agreeing with a wrong function.
        assert orders is not None
        (comment,) = [c for st, c in statements if st == "SELECT * FROM serving_dashboard('acme');"]
        assert tokens(oracle(orders)[0]["acme"]) == expected_tokens(comment), comment
    finally:
        con.close()
    assert checked >= 8, f"only {checked} statements had a checkable comment"


def test_sql_block_reads_well_in_the_cli_default_mode(scratch):
    cli = Path(sys.executable).parent / "duckdb"
    assert cli.is_file(), f"{cli} missing: run `make venv`"
    block = readme_block("sql", "serving_build('orders')")
    p = subprocess.run([cli, "-unsigned"], input=block, cwd=scratch, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Error" not in p.stdout + p.stderr, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    # the plan and the DDL are drawn as lines: no literal backslash-n anywhere in what the CLI printed
    assert "\\n" not in p.stdout, p.stdout
    assert re.search(r"│\s*│\s*1\s*│\s*CREATE TABLE `lake`\.`accounts` \(\s*│", p.stdout) or re.search(
        r"│\s*1\s*│\s*CREATE TABLE `lake`\.`accounts` \(\s*│", p.stdout
    ), p.stdout
    assert re.search(r"│[^\n]*mart_daily[^\n]*│", p.stdout), p.stdout


def test_node_block_runs_as_written(node, scratch):
    block = readme_block("js", "DuckDBInstance")
    con = duckdb.connect()
    con.execute(
        "COPY (SELECT * FROM (VALUES (1, 'acme', DATE '2026-11-01', 1200), (2, 'acme', DATE '2026-11-01', 300), "
        "(3, 'acme', DATE '2026-11-02', 900)) t(order_id, company, order_day, revenue)) "
        f"TO '{scratch / 'orders.parquet'}' (FORMAT parquet)"
    )
    con.close()
    (scratch / "node_modules").symlink_to(NODE_DIR / "node_modules")
    (scratch / "readme.mjs").write_text(block)
    p = run([node, scratch / "readme.mjs"], cwd=scratch, timeout=120, env=node_env("1.5.6"))
    assert "revenue: 1500n" in p.stdout and "revenue: 900n" in p.stdout, p.stdout
