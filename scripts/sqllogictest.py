#!/usr/bin/env python3
"""Minimal sqllogictest runner (DuckDB dialect) on top of the ``duckdb`` Python module.

Usage:
    python scripts/sqllogictest.py --extension PATH [--extension-name streamhouse]
                                   [--fail-on-skip] [-v] FILE_OR_DIR...

Directories are searched recursively for ``*.test`` (sorted).  Every file runs in
a fresh in-memory database (``allow_unsigned_extensions`` on), with
``__TEST_DIR__`` replaced by a fresh temporary directory for that file.
DuckDB's own runner (``test/sqlite`` in duckdb/duckdb) is the reference; where
this runner is stricter than it, that is said below.

Supported subset
----------------
* ``# ...`` comment lines between records; records are separated by blank lines.
* ``statement ok|error|maybe [conn]`` + SQL, optionally ``----`` + expected error
  text (error/maybe only).  ``conn`` names an extra connection to the same database.
  Expected error text:
    - if it starts with an error class, ``<Words> Error:`` (``Binder Error: ...``,
      ``Invalid Input Error: ...``, ``Permission Error: ...``), it must be a *prefix*
      of the error message: the class is pinned and the text is matched from the
      start (DuckDB messages read ``Invalid Input Error: streamhouse: ...``);
    - ``<REGEX>:pat`` / ``<!REGEX>:pat``: the regex must (not) match the *whole*
      message (``re.fullmatch``, DOTALL; DuckDB uses RE2::FullMatch);
    - any other text must be *contained* in the message.
  ``statement error`` and ``statement maybe`` fail on an error that contains
  ``INTERNAL Error`` or ``FATAL Error``, whatever the expected text says (DuckDB:
  "internal errors are never expected").
* ``query <types> [nosort|rowsort|valuesort] [label]`` + SQL + ``----`` + rows.
  ``<types>`` has one letter per result column, and each letter must fit its
  column's type (stricter than DuckDB's runner, which only counts them):
    - ``I``: integer types (TINYINT..HUGEINT, UTINYINT..UHUGEINT, BIGNUM/VARINT)
      and BOOLEAN (SQLite's logic tests treat booleans as integers, and so do
      DuckDB's suites);
    - ``R``: FLOAT, DOUBLE, DECIMAL;
    - ``T``: every other type (VARCHAR, DATE, TIME, TIMESTAMP*, INTERVAL, UUID,
      BLOB, ENUM, BIT, JSON, LIST/ARRAY/STRUCT/MAP/UNION, ...).
  Any other letter is a malformed header.  Expected rows are tab separated
  (whitespace runs are a fallback when they give exactly the column count), or one
  value per line when the line count equals rows*cols (cols > 1, no tabs).
  A ``<REGEX>:``/``<!REGEX>:`` cell is matched (fullmatch) against that cell; if
  the *first* expected line starts with it, the whole expected text is one regex
  matched against the whole rendered result (rows by newline, cells by tab).
* ``loop VAR START END`` / ``foreach VAR v1 v2 ...`` ... ``endloop`` (nestable,
  ``${VAR}`` substituted everywhere), ``mode skip`` / ``mode unskip``, ``halt``,
  ``hash-threshold N`` (no-op), ``restart`` (reopen the database and redo the
  ``require`` loads), ``load PATH [readonly]`` (switch to a database file).
* ``require <--extension-name>`` LOADs ``--extension``; failure fails the file.
  ``require parquet|json|icu`` are no-ops (statically linked in the wheel).
* ``require-env VAR [value]`` (as DuckDB's runner): if ``VAR`` is not set in the
  environment, or ``value`` is given and differs from it, the rest of the file is
  skipped and the file is reported as SKIPPED (never as passed).  Otherwise
  ``${VAR}`` and ``{VAR}`` are replaced by its value in every later line
  (SQL, expected results, expected errors).  ``require-env`` inside a loop, with
  0 or more than 2 arguments, or twice for one variable fails the file.

Skips are counted, never silent
-------------------------------
Every ``statement``/``query`` record that does not run is counted as skipped
(each loop iteration separately): records under ``mode skip``, records after
``halt``, and records after an unmet ``require-env``.  Each file with skipped
records gets a ``SKIP`` line naming the reason, the summary reports
``N passed, M failed, K skipped`` and the files skipped by ``require-env``.
``--fail-on-skip`` turns any skipped record or skipped file into a failure
(``make test`` uses it: everything must run there).

Rendering
---------
* None -> ``NULL``; a VARCHAR that could be mistaken for a marker is quoted, so
  SQL NULL and the string ``'NULL'`` never compare equal: text whose value is
  ``NULL`` or ``(empty)`` wrapped in any number of single quotes gets one more
  pair of single quotes (the string ``NULL`` renders ``'NULL'``, ``'NULL'``
  renders ``''NULL''``, ``(empty)`` renders ``'(empty)'``).  DuckDB's runner
  renders both as ``NULL``; this one does not, on purpose.
* '' -> ``(empty)``, bool -> ``true``/``false``, float -> ``repr()`` (compared
  exactly, no epsilon), int/Decimal -> ``str()``, date -> ISO, datetime -> ``str()``,
  bytes -> DuckDB blob escaping (``\\xNN``), anything else (lists, structs, maps,
  intervals, time zones) -> Python ``str()``.  Nested/temporal-with-zone values do
  NOT match DuckDB's rendering: CAST them to VARCHAR in the test SQL.
* Results are fetched into Python even for ``statement`` records (the Python
  client streams, so execution errors only surface on fetch).

Not supported (reported as failures, never skipped): any other ``require``,
``concurrentloop``, ``foreach`` special groups (``<numeric>`` etc.), ``mode``
other than skip/unskip, hashed results ("N values hashing to"), other directives.
Sort modes also sort expected regex cells as plain strings.

Counting and exit status: every executed statement/query record counts as one
test (each loop iteration separately); directive failures (require, unknown
directive, runner crash) count as one failed record.  The exit status is 1 if
anything failed or if nothing ran (a run where everything was skipped is not
green), or with ``--fail-on-skip`` if anything was skipped.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass, field

import duckdb

SORT_MODES = ("nosort", "rowsort", "valuesort")
BUILTIN_EXTENSIONS = ("parquet", "json", "icu")
REGEX, NOT_REGEX = "<REGEX>:", "<!REGEX>:"
MULTI_LINE = ("statement", "query")
LOOPS = ("loop", "foreach", "concurrentloop")
SINGLE_LINE = ("require", "require-env", "mode", "halt", "hash-threshold", "restart", "load", "endloop", *LOOPS)
# An expected error that starts with an error class is matched as a prefix of the message.
ERROR_CLASS = re.compile(r"[A-Z][A-Za-z]*(?: [A-Za-z]+)* Error:")
# Errors a test may never expect, not even with 'statement error' / 'statement maybe'.
NEVER_EXPECTED = ("INTERNAL Error", "FATAL Error")
# Column type letters: DuckDBPyType.id -> letter; every id not listed here is 'T'.
INTEGER_TYPES = frozenset(
    [
        "tinyint",
        "smallint",
        "integer",
        "bigint",
        "hugeint",
        "utinyint",
        "usmallint",
        "uinteger",
        "ubigint",
        "uhugeint",
        "bignum",
        "varint",
        "boolean",
    ]
)
REAL_TYPES = frozenset(("float", "double", "decimal"))
TYPE_LETTERS = "IRT"
# Text values that would read as the NULL / empty-string markers: quoted once more.
MARKER_TEXT = re.compile(r"'*(?:NULL|\(empty\))'*")


@dataclass
class Record:
    line: int  # 1-based line number of the header
    lines: list[str]  # header line followed by the body (raw, unsubstituted)

    @property
    def counts(self) -> bool:
        """True for the records that count as tests (statement/query)."""
        return self.lines[0].split()[0] in MULTI_LINE


@dataclass
class Loop:
    line: int
    header: str
    body: list = field(default_factory=list)


@dataclass
class Bad:
    line: int
    message: str


class FileAbort(Exception):
    """Stops the current file; the message is reported as one failure."""

    def __init__(self, message: str, line: int = 0):
        super().__init__(message)
        self.line = line


def is_blank(line: str) -> bool:
    return not line.strip()


def parse(path: str) -> list:
    """Split a file into a tree of Record / Loop / Bad nodes."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.rstrip("\r\n") for ln in f.read().split("\n")]
    root: list = []
    stack: list[Loop] = []  # currently open loops
    i = 0
    while i < len(lines):
        if is_blank(lines[i]) or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        start, word = i + 1, lines[i].split()[0]
        body = stack[-1].body if stack else root
        if word in SINGLE_LINE:  # one-line directives; the next line may start a record
            i += 1
            if word in LOOPS:
                stack.append(Loop(start, lines[start - 1]))
                body.append(stack[-1])
            elif word == "endloop":
                if not stack:
                    raise FileAbort("'endloop' without loop", start)
                stack.pop()
            elif word == "require-env" and stack:
                raise FileAbort("require-env cannot be called in a loop", start)
            else:
                body.append(Record(start, [lines[start - 1]]))
            continue
        block = []
        while i < len(lines) and not is_blank(lines[i]):
            block.append(lines[i])
            i += 1
        body.append(Record(start, block) if word in MULTI_LINE else Bad(start, f"unknown directive '{word}'"))
    if stack:
        raise FileAbort("loop without matching 'endloop'", stack[-1].line)
    return root


def render_blob(data: bytes) -> str:
    """DuckDB's BLOB -> VARCHAR rendering: printable ASCII kept, rest as \\xNN."""
    return "".join(chr(b) if 32 <= b <= 126 and chr(b) not in "\\'\"" else f"\\x{b:02X}" for b in data)


def render(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        if not value:
            return "(empty)"
        return f"'{value}'" if MARKER_TEXT.fullmatch(value) else value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return render_blob(bytes(value))
    if isinstance(value, datetime.datetime):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)  # int, Decimal, time, nested types, ... (see module docstring)


def type_letter(duck_type) -> str:
    """The sqllogictest letter a result column of this DuckDB type must be declared with."""
    type_id = str(getattr(duck_type, "id", duck_type)).lower()
    if type_id in INTEGER_TYPES:
        return "I"
    if type_id in REAL_TYPES:
        return "R"
    return "T"


def regex_matches(spec: str, text: str) -> bool:
    """Evaluate a '<REGEX>:' / '<!REGEX>:' spec against the whole text."""
    if spec.startswith(NOT_REGEX):
        return re.fullmatch(spec[len(NOT_REGEX) :], text, re.DOTALL) is None
    return re.fullmatch(spec[len(REGEX) :], text, re.DOTALL) is not None


def value_matches(expected: str, actual: str) -> bool:
    if expected.startswith((REGEX, NOT_REGEX)):
        return regex_matches(expected, actual)
    return expected == actual


def error_matches(expected: str, message: str) -> bool:
    if expected.startswith((REGEX, NOT_REGEX)):
        return regex_matches(expected, message)
    if ERROR_CLASS.match(expected):
        return message.startswith(expected)
    return expected in message


def is_never_expected(message: str) -> bool:
    return any(marker in message for marker in NEVER_EXPECTED)


def split_at_dashes(body: list[str]) -> tuple[list[str], list[str] | None]:
    """Split a record body at its '----' line: (sql lines, expected lines or None)."""
    for k, ln in enumerate(body):
        if ln.strip() == "----":
            return body[:k], body[k + 1 :]
    return body, None


def split_row(line: str, ncols: int) -> list[str]:
    if "\t" in line or ncols == 1:
        return line.split("\t")
    parts = line.split()
    return parts if len(parts) == ncols else [line]


def short(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.split("\n"))


def compare_result(ncols: int, sortmode: str, expected: list[str], rows: list) -> str | None:
    """Return None if the rows match the expected lines, else a description."""
    actual = [[render(v) for v in row] for row in rows]
    if expected and expected[0].startswith((REGEX, NOT_REGEX)):
        text = "\n".join("\t".join(r) for r in actual)
        return None if regex_matches("\n".join(expected), text) else "result does not satisfy regex"
    if ncols > 1 and expected and len(expected) == len(actual) * ncols and not any("\t" in ln for ln in expected):
        exp_rows = [expected[k : k + ncols] for k in range(0, len(expected), ncols)]
    else:
        exp_rows = [split_row(ln, ncols) for ln in expected]
    for k, row in enumerate(exp_rows):
        if len(row) != ncols:
            return f"expected row {k + 1} has {len(row)} value(s) but query has {ncols} column(s)"
    if len(exp_rows) != len(actual):  # before valuesort folds all rows into one
        return f"expected {len(exp_rows)} row(s), got {len(actual)}"
    if sortmode == "rowsort":
        exp_rows, actual = sorted(exp_rows), sorted(actual)
    elif sortmode == "valuesort":
        exp_rows = [sorted(v for r in exp_rows for v in r)]
        actual = [sorted(v for r in actual for v in r)]
    for k, (e_row, a_row) in enumerate(zip(exp_rows, actual, strict=True)):
        for e, a in zip(e_row, a_row, strict=True):
            if not value_matches(e, a):
                return f"mismatch in row {k + 1}: expected {short(e)}, got {short(a)}"
    return None


class FileRunner:
    """Runs one .test file against a fresh database."""

    def __init__(self, path: str, opts: argparse.Namespace):
        self.path, self.opts = path, opts
        self.passed = self.failed = self.skipped = 0
        self.skip_counts: dict[str, int] = {}  # reason -> skipped records
        self.skipping: str | None = None  # reason while under 'mode skip'
        self.stopped: str | None = None  # reason once 'halt' or an unmet require-env stops the file
        self.file_skip: str | None = None  # the unmet require-env, if any
        self.env_vars: dict[str, str] = {}  # variables declared by require-env
        self.loaded: list[str] = []  # extension paths to re-LOAD after restart
        self.db_path, self.read_only = ":memory:", False
        self.con = None
        self.named: dict[str, duckdb.DuckDBPyConnection] = {}
        self.test_dir = ""

    # -- reporting ---------------------------------------------------------
    def fail(self, line: int, what: str, sql: str | None = None, **sections: str) -> None:
        self.failed += 1
        out = [f"FAIL {self.path}:{line}: {what}" if line else f"FAIL {self.path}: {what}"]
        if sql is not None:
            out += ["  SQL:", indent(sql)]
        for name, text in sections.items():
            out += [f"  {name}:", indent(text)]
        print("\n".join(out), flush=True)

    def skip_record(self) -> None:
        reason = self.stopped or self.skipping
        self.skipped += 1
        self.skip_counts[reason] = self.skip_counts.get(reason, 0) + 1

    def report_skips(self) -> None:
        if self.file_skip and self.file_skip not in self.skip_counts:
            self.skip_counts[self.file_skip] = 0
        for reason, n in self.skip_counts.items():
            print(f"SKIP {self.path}: {n} record(s) not run: {reason}", flush=True)

    # -- connection handling -------------------------------------------------
    def connect(self) -> None:
        self.close()
        self.con = duckdb.connect(self.db_path, read_only=self.read_only, config={"allow_unsigned_extensions": "true"})
        for ext in self.loaded:
            self.load_extension(ext)

    def close(self) -> None:
        for c in [*self.named.values(), self.con]:
            if c is not None:
                try:
                    c.close()
                except duckdb.Error:
                    pass
        self.named, self.con = {}, None

    def load_extension(self, ext: str) -> None:
        try:
            self.con.execute("LOAD '{}'".format(ext.replace("'", "''")))
        except duckdb.Error as exc:
            raise FileAbort(f"LOAD of extension '{ext}' failed: {exc}") from None

    def connection(self, name: str | None):
        if name is None:
            return self.con
        if name not in self.named:
            self.named[name] = self.con.cursor()
        return self.named[name]

    def execute(self, sql: str, conn: str | None = None):
        """Run SQL (possibly several statements); return (column types, rows) of the last."""
        con = self.connection(conn)
        con.execute(sql)
        if con.description is None:
            return [], []
        return [d[1] for d in con.description], con.fetchall()

    # -- driver --------------------------------------------------------------
    def run(self) -> None:
        self.test_dir = tempfile.mkdtemp(prefix="slt_")
        try:
            nodes = parse(self.path)
            self.connect()
            self.run_nodes(nodes, {})
        except FileAbort as exc:
            self.fail(exc.line, str(exc))
        except Exception:  # runner bug or unexpected Python error: fail this file only
            self.fail(0, "runner exception", traceback=traceback.format_exc().rstrip())
        finally:
            self.close()
            shutil.rmtree(self.test_dir, ignore_errors=True)
        self.report_skips()

    def substitute(self, text: str, env: dict[str, str]) -> str:
        text = text.replace("__TEST_DIR__", self.test_dir)
        for var, val in env.items():
            text = text.replace(f"${{{var}}}", val)
        for var, val in self.env_vars.items():  # as DuckDB's ReplaceKeywords: ${VAR} and {VAR}
            text = text.replace(f"${{{var}}}", val).replace(f"{{{var}}}", val)
        return text

    def run_nodes(self, nodes: list, env: dict[str, str]) -> None:
        for node in nodes:
            if isinstance(node, Bad):
                self.fail(node.line, node.message)
            elif isinstance(node, Loop):
                for value in self.loop_values(node, env):
                    self.run_nodes(node.body, {**env, node.header.split()[1]: value})
            elif self.stopped:  # after 'halt' / an unmet require-env: count, never run
                if node.counts:
                    self.skip_record()
            else:
                lines = [self.substitute(ln, env) for ln in node.lines]
                try:
                    self.run_record(node.line, lines)
                except FileAbort as exc:
                    exc.line = exc.line or node.line
                    raise
                except Exception as exc:  # e.g. a value Python cannot convert on fetch
                    self.fail(node.line, f"runner error: {type(exc).__name__}: {exc}", "\n".join(lines[1:]))

    def loop_values(self, node: Loop, env: dict[str, str]) -> list[str]:
        tokens = self.substitute(node.header, env).split()
        if tokens[0] == "concurrentloop":
            self.fail(node.line, "unsupported directive 'concurrentloop'")
            return []
        if tokens[0] == "loop":
            if len(tokens) != 4 or not all(re.fullmatch(r"-?\d+", t) for t in tokens[2:]):
                self.fail(node.line, "malformed loop, expected 'loop VAR START END'")
                return []
            return [str(k) for k in range(int(tokens[2]), int(tokens[3]))]
        if len(tokens) < 3:
            self.fail(node.line, "malformed foreach, expected 'foreach VAR VALUE...'")
            return []
        special = [t for t in tokens[2:] if re.fullmatch(r"<\w+>", t)]
        if special:
            self.fail(node.line, f"unsupported foreach group(s): {' '.join(special)}")
            return []
        return tokens[2:]

    def run_record(self, line: int, lines: list[str]) -> None:
        tokens = lines[0].split()
        word, args = tokens[0], tokens[1:]
        if self.skipping:
            if word == "mode" and args == ["unskip"]:
                self.skipping = None
            elif word in MULTI_LINE:
                self.skip_record()
            return
        if word == "statement":
            self.run_statement(line, args, lines[1:])
        elif word == "query":
            self.run_query(line, args, lines[1:])
        elif word == "require":
            self.require(args)
        elif word == "require-env":
            self.require_env(line, args)
        elif word == "mode":
            if args == ["skip"]:
                self.skipping = f"under 'mode skip' (line {line})"
            elif args != ["unskip"]:
                self.fail(line, f"unsupported mode '{' '.join(args)}'")
        elif word == "halt":
            self.stopped = f"after 'halt' (line {line})"
        elif word == "hash-threshold":
            pass
        elif word == "restart":
            self.connect()
        elif word == "load":
            if not args or len(args) > 2 or args[1:] not in ([], ["readonly"]):
                self.fail(line, "malformed load, expected 'load PATH [readonly]'")
                return
            self.db_path, self.read_only = args[0], args[1:] == ["readonly"]
            self.connect()

    def require(self, args: list[str]) -> None:
        if len(args) != 1:
            raise FileAbort(f"malformed require: {' '.join(args)!r}")
        name = args[0]
        if name in BUILTIN_EXTENSIONS:
            return
        if name != self.opts.extension_name:
            raise FileAbort(f"unsupported require '{name}'")
        ext = self.opts.extension
        if not ext:
            raise FileAbort(f"require {name}: no --extension PATH given")
        if not os.path.isfile(ext):
            raise FileAbort(f"require {name}: extension file not found: {ext}")
        ext = os.path.abspath(ext)
        self.load_extension(ext)
        self.loaded.append(ext)

    def require_env(self, line: int, args: list[str]) -> None:
        """DuckDB's require-env: skip the rest of the file unless VAR is set (to value)."""
        if len(args) not in (1, 2):
            raise FileAbort("require-env requires 1 argument: <env name> [optional: <expected env val>]")
        name = args[0]
        value = os.environ.get(name)
        if value is None or (len(args) == 2 and value != args[1]):
            self.file_skip = self.stopped = f"require-env {' '.join(args)} (line {line})"
            return
        if name in self.env_vars:
            raise FileAbort(f"Environment variable '{name}' has already been defined")
        self.env_vars[name] = value

    # -- records -------------------------------------------------------------
    def run_statement(self, line: int, args: list[str], body: list[str]) -> None:
        if not args or args[0] not in ("ok", "error", "maybe") or len(args) > 2:
            self.fail(line, f"malformed statement header: 'statement {' '.join(args)}'")
            return
        kind, conn = args[0], (args[1] if len(args) > 1 else None)
        body, exp_lines = split_at_dashes(body)
        if kind == "ok" and exp_lines is not None:
            self.fail(line, "'statement ok' must not have an expected '----' section")
            return
        sql, expected = "\n".join(body), "\n".join(exp_lines or [])
        if not sql.strip():
            self.fail(line, "statement without SQL")
            return
        try:
            self.execute(sql, conn)
            error = None
        except duckdb.Error as exc:
            error = str(exc)
        if kind == "ok" and error is not None:
            self.fail(line, "statement failed", sql, error=error)
        elif kind == "error" and error is None:
            self.fail(
                line,
                "statement succeeded but an error was expected",
                sql,
                **({"expected error": expected} if expected else {}),
            )
        elif error is not None and is_never_expected(error):
            self.fail(line, f"statement {kind} raised an internal error (never expected)", sql, error=error)
        elif error is not None and expected and not error_matches(expected, error):
            how = "from its start" if ERROR_CLASS.match(expected) else "as a substring"
            self.fail(
                line,
                f"error message does not match (expected text is matched {how})",
                sql,
                **{"expected error": expected, "actual error": error},
            )
        else:
            self.passed += 1

    def run_query(self, line: int, args: list[str], body: list[str]) -> None:
        if not args or not re.fullmatch(f"[{TYPE_LETTERS}]+", args[0]) or len(args) > 3:
            self.fail(
                line,
                f"malformed query header: 'query {' '.join(args)}' (column letters: I, R or T, one per column)",
            )
            return
        letters = args[0]
        sortmode = args[1] if len(args) > 1 and args[1] in SORT_MODES else "nosort"
        sql_lines, expected = split_at_dashes(body)
        if expected is None:
            self.fail(line, "query without '----' expected-result section")
            return
        sql = "\n".join(sql_lines)
        try:
            types, rows = self.execute(sql)
        except duckdb.Error as exc:
            self.fail(line, "query failed", sql, error=str(exc))
            return
        if len(types) != len(letters):
            self.fail(line, f"column count mismatch: header '{letters}' has {len(letters)}, got {len(types)}", sql)
            return
        wrong = [
            f"column {k + 1} is {t} (needs '{type_letter(t)}', header says '{ch}')"
            for k, (ch, t) in enumerate(zip(letters, types, strict=True))
            if type_letter(t) != ch
        ]
        if wrong:
            self.fail(line, f"column type letter mismatch in 'query {letters}': " + "; ".join(wrong), sql)
            return
        problem = compare_result(len(letters), sortmode, expected, rows)
        if problem is None:
            self.passed += 1
            return
        actual = "\n".join("\t".join(render(v) for v in row) for row in rows)
        self.fail(
            line,
            f"wrong result ({problem})",
            sql,
            expected="\n".join(expected) or "(no rows)",
            actual=actual or "(no rows)",
        )


def collect(paths: list[str]) -> tuple[list[str], list[str]]:
    """Expand arguments into test files; return (files, missing paths)."""
    files, missing = [], []
    for p in paths:
        if os.path.isdir(p):
            found = [os.path.join(root, f) for root, _, names in os.walk(p) for f in names if f.endswith(".test")]
            files.extend(sorted(found))
        elif os.path.isfile(p):
            files.append(p)
        else:
            missing.append(p)
    return files, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run DuckDB-style sqllogictest files.")
    ap.add_argument("--extension", metavar="PATH", help="extension binary LOADed by 'require <extension-name>'")
    ap.add_argument("--extension-name", default="streamhouse")
    ap.add_argument(
        "--fail-on-skip",
        action="store_true",
        help="exit 1 if any record or file was skipped (mode skip, halt, unmet require-env)",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    opts = ap.parse_args(argv)

    files, missing = collect(opts.paths)
    passed = failed = skipped = 0
    skipped_files: list[tuple[str, str]] = []
    for p in missing:
        print(f"FAIL {p}: no such file or directory")
        failed += 1
    for path in files:
        runner = FileRunner(path, opts)
        runner.run()
        passed, failed, skipped = passed + runner.passed, failed + runner.failed, skipped + runner.skipped
        if runner.file_skip:
            skipped_files.append((path, runner.file_skip))
        if opts.verbose:
            state = f", SKIPPED ({runner.file_skip})" if runner.file_skip else ""
            print(
                f"{path}: {runner.passed} passed, {runner.failed} failed, {runner.skipped} skipped{state}",
                flush=True,
            )
    summary = f"{passed} passed, {failed} failed, {skipped} skipped"
    if skipped_files:
        summary += f"; {len(skipped_files)} file(s) SKIPPED: " + ", ".join(path for path, _ in skipped_files)
    print(summary)
    if passed + failed == 0:
        print("no tests ran", file=sys.stderr)
        return 1
    if opts.fail_on_skip and (skipped or skipped_files):
        print("skipped tests with --fail-on-skip", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
