"""Self-test of scripts/sqllogictest.py: each strict rule fails what it should.

Small .test files are written to a temporary directory and run through the runner as
`make sqllogictest` runs it (a subprocess; exit status and report checked). None of them needs
the extension: plain DuckDB SQL is enough to prove the runner's rules.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[3]  # test/python/tooling/ -> the repository
RUNNER = ROOT / "scripts" / "sqllogictest.py"
UNSET = "STREAMHOUSE_SLT_SELFTEST_UNSET"
SET = "STREAMHOUSE_SLT_SELFTEST_SET"


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return path


def run(*paths: Path, args: tuple[str, ...] = (), env: dict[str, str] | None = None):
    full_env = {k: v for k, v in os.environ.items() if k not in (UNSET, SET)}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, str(RUNNER), *args, *map(str, paths)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


def summary(out: str) -> str:
    return [ln for ln in out.splitlines() if " passed, " in ln][-1]


def test_a_correct_file_passes(tmp_path):
    f = write(
        tmp_path,
        "ok.test",
        """
        statement ok
        CREATE TABLE t AS SELECT 1 AS i, 1.5::DOUBLE AS d, 2.25::DECIMAL(5, 2) AS m, 'x' AS s, true AS b,
            DATE '2024-01-02' AS day, NULL::VARCHAR AS n, 'NULL' AS literal_null, '' AS e

        query IRRTITTTT
        SELECT * FROM t
        ----
        1	1.5	2.25	x	true	2024-01-02	NULL	'NULL'	(empty)

        statement error
        SELECT * FROM no_such_table
        ----
        Catalog Error: Table with name no_such_table does not exist

        statement error
        SELECT * FROM no_such_table
        ----
        no_such_table does not exist

        query T
        SELECT 'mart_daily'
        ----
        <REGEX>:mart.*
        """,
    )
    rc, out = run(f)
    assert rc == 0, out
    assert summary(out) == "5 passed, 0 failed, 0 skipped"


@pytest.mark.parametrize(
    "header, sql, why",
    [
        ("T", "SELECT 1", "column type letter mismatch"),  # integer declared as text
        ("I", "SELECT 'x'", "column type letter mismatch"),  # text declared as integer
        ("I", "SELECT 1.5::DOUBLE", "column type letter mismatch"),  # double declared as integer
        ("R", "SELECT 1", "column type letter mismatch"),  # integer declared as real
        ("I", "SELECT 2.5", "column type letter mismatch"),  # DECIMAL literal declared as integer
        ("I", "SELECT DATE '2024-01-01'", "column type letter mismatch"),  # date is T
        ("T", "SELECT true", "column type letter mismatch"),  # boolean is I
        ("II", "SELECT 1", "column count mismatch"),  # more letters than columns
        ("I", "SELECT 1, 2", "column count mismatch"),  # fewer letters than columns
        ("B", "SELECT true", "malformed query header"),  # only I, R, T exist
    ],
)
def test_wrong_type_letters_fail(tmp_path, header, sql, why):
    f = write(tmp_path, "letters.test", f"query {header}\n{sql}\n----\n<REGEX>:.*\n")
    rc, out = run(f)
    assert rc == 1, out
    assert why in out, out
    assert summary(out) == "0 passed, 1 failed, 0 skipped"


@pytest.mark.parametrize(
    "sql, expected, ok",
    [
        ("SELECT 'NULL'", "NULL", False),  # the string 'NULL' is not SQL NULL
        ("SELECT NULL::VARCHAR", "'NULL'", False),  # and SQL NULL is not the string
        ("SELECT NULL::VARCHAR", "NULL", True),
        ("SELECT 'NULL'", "'NULL'", True),
        ("SELECT '''NULL'''", "''NULL''", True),  # quoting stays one-to-one
        ("SELECT '(empty)'", "(empty)", False),  # the marker of '' is not the text '(empty)'
        ("SELECT ''", "(empty)", True),
    ],
)
def test_null_and_the_string_null_differ(tmp_path, sql, expected, ok):
    f = write(tmp_path, "null.test", f"query T\n{sql}\n----\n{expected}\n")
    rc, out = run(f)
    assert rc == (0 if ok else 1), out
    assert summary(out) == ("1 passed, 0 failed, 0 skipped" if ok else "0 passed, 1 failed, 0 skipped")


@pytest.mark.parametrize(
    "sql, expected, ok",
    [
        ("SELECT * FROM no_such_table", "Catalog Error: Table with name no_such_table", True),
        ("SELECT * FROM no_such_table", "Binder Error: Table with name no_such_table", False),  # wrong class
        ("SELECT * FROM no_such_table", "Catalog Error: no_such_table does not exist", False),  # not from start
        # an error class inside the message: a substring, but not a prefix
        ("SELECT error('wrapped (Binder Error: inner)')", "Binder Error: inner", False),
        ("SELECT error('wrapped (Binder Error: inner)')", "wrapped (Binder Error: inner)", True),
        ("SELECT error('wrapped (Binder Error: inner)')", "Invalid Input Error: wrapped (Binder", True),
        ("SELECT error('boom')", "<REGEX>:Invalid Input Error: boom", True),
        ("SELECT error('boom')", "<REGEX>:boom", False),  # regexes match the whole message
    ],
)
def test_error_class_is_matched_from_the_start(tmp_path, sql, expected, ok):
    f = write(tmp_path, "errors.test", f"statement error\n{sql}\n----\n{expected}\n")
    rc, out = run(f)
    assert rc == (0 if ok else 1), out
    if not ok:
        assert "error message does not match" in out, out


def test_require_env_unset_skips_the_file_and_is_not_green(tmp_path):
    f = write(
        tmp_path,
        "gated.test",
        f"""
        require-env {UNSET}

        statement ok
        SELECT * FROM '${{{UNSET}}}/x.parquet'

        query I
        SELECT 1
        ----
        1
        """,
    )
    rc, out = run(f)
    assert rc == 1, out  # nothing ran: not green
    assert summary(out) == f"0 passed, 0 failed, 2 skipped; 1 file(s) SKIPPED: {f}"
    assert f"SKIP {f}: 2 record(s) not run: require-env {UNSET}" in out
    assert "no tests ran" in out

    # next to a file that runs: the run is green, the skip still reported and counted...
    g = write(tmp_path, "plain.test", "query I\nSELECT 1\n----\n1\n")
    rc, out = run(f, g)
    assert rc == 0, out
    assert summary(out) == f"1 passed, 0 failed, 2 skipped; 1 file(s) SKIPPED: {f}"
    # ...and with --fail-on-skip (make test) it is a failure
    rc, out = run(f, g, args=("--fail-on-skip",))
    assert rc == 1, out


def test_require_env_value_and_substitution(tmp_path):
    body = f"""
        require-env {SET} wanted

        query TT
        SELECT '${{{SET}}}', '{{{SET}}}'
        ----
        wanted	wanted
        """
    f = write(tmp_path, "value.test", body)
    rc, out = run(f, env={SET: "wanted"})
    assert rc == 0, out
    assert summary(out) == "1 passed, 0 failed, 0 skipped"
    rc, out = run(f, env={SET: "other"})  # set, but to another value: skipped
    assert rc == 1, out
    assert summary(out) == f"0 passed, 0 failed, 1 skipped; 1 file(s) SKIPPED: {f}"


@pytest.mark.parametrize(
    "body, why",
    [
        (f"loop i 0 2\n\nrequire-env {SET}\n\nendloop\n", "require-env cannot be called in a loop"),
        ("require-env\n", "require-env requires 1 argument"),
        (f"require-env {SET}\n\nrequire-env {SET}\n", "has already been defined"),
    ],
)
def test_require_env_misuse_fails(tmp_path, body, why):
    f = write(tmp_path, "misuse.test", body + "\nquery I\nSELECT 1\n----\n1\n")
    rc, out = run(f, env={SET: "x"})
    assert rc == 1, out
    assert why in out, out


def test_mode_skip_and_halt_are_counted_as_skipped(tmp_path):
    f = write(
        tmp_path,
        "skips.test",
        """
        mode skip

        query I
        SELECT 'wrong letter and wrong value'
        ----
        42

        loop i 0 3

        statement ok
        this is not SQL

        endloop

        mode unskip

        query I
        SELECT 1
        ----
        1

        halt

        statement ok
        this is not SQL either

        query I
        SELECT 2
        ----
        3
        """,
    )
    rc, out = run(f)
    assert rc == 0, out
    assert summary(out) == "1 passed, 0 failed, 6 skipped"
    assert "4 record(s) not run: under 'mode skip' (line 1)" in out
    assert "2 record(s) not run: after 'halt' (line 22)" in out
    rc, out = run(f, args=("--fail-on-skip",))
    assert rc == 1, out


def load_runner_module(monkeypatch):
    spec = importlib.util.spec_from_file_location("slt_runner_under_test", RUNNER)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind", ["maybe", "error"])
@pytest.mark.parametrize("expected", ["", "INTERNAL Error: invariant broken"])
def test_statement_maybe_and_error_fail_on_an_internal_error(tmp_path, monkeypatch, capsys, kind, expected):
    # A real INTERNAL error cannot be provoked on purpose in a release DuckDB: raise one in place
    # of the execution and check that no expectation lets it pass.
    slt = load_runner_module(monkeypatch)

    def internal(self, sql, conn=None):
        raise duckdb.InternalException("INTERNAL Error: invariant broken")

    monkeypatch.setattr(slt.FileRunner, "execute", internal)
    f = write(tmp_path, "internal.test", f"statement {kind}\nSELECT 1\n" + (f"----\n{expected}\n" if expected else ""))
    assert slt.main([str(f)]) == 1
    out = capsys.readouterr().out
    assert "raised an internal error" in out, out
    assert "0 passed, 1 failed, 0 skipped" in out
