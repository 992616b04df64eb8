#!/usr/bin/env python3
"""Minimal sqllogictest runner (DuckDB dialect) on top of the ``duckdb`` Python module.

Usage:
    python scripts/sqllogictest.py --extension PATH [--extension-name streamhouse] [-v] FILE_OR_DIR...

Directories are searched recursively for ``*.test`` (sorted).  Every file runs in
a fresh in-memory database (``allow_unsigned_extensions`` on), with
``__TEST_DIR__`` replaced by a fresh temporary directory for that file.

Supported subset
----------------
* ``# ...`` comment lines between records; records are separated by blank lines.
* ``statement ok|error|maybe [conn]`` + SQL, optionally ``----`` + expected error
  text (error/maybe only).  Expected text must be *contained* in ``str(exc)``;
  ``<REGEX>:pat`` / ``<!REGEX>:pat`` means ``re.search(pat, msg, DOTALL)`` must
  (not) match.  ``conn`` names an extra connection to the same database.
  ``statement error`` also fails on an ``INTERNAL Error`` unless the expected text
  mentions it.
* ``query <types> [nosort|rowsort|valuesort] [label]`` + SQL + ``----`` + rows.
  ``len(types)`` is the expected column count.  Expected rows are tab separated
  (whitespace runs are a fallback when they give exactly the column count), or one
  value per line when the line count equals rows*cols (cols > 1, no tabs).
  A ``<REGEX>:``/``<!REGEX>:`` cell is matched by regex against that cell; if the
  *first* expected line starts with it, the whole expected text is one regex
  matched against the whole rendered result (rows by newline, cells by tab).
* ``loop VAR START END`` / ``foreach VAR v1 v2 ...`` ... ``endloop`` (nestable,
  ``${VAR}`` substituted everywhere), ``mode skip`` / ``mode unskip``, ``halt``,
  ``hash-threshold N`` (no-op), ``restart`` (reopen the database and redo the
  ``require`` loads), ``load PATH [readonly]`` (switch to a database file).
* ``require <--extension-name>`` LOADs ``--extension``; failure fails the file.
  ``require parquet|json|icu`` are no-ops (statically linked in the wheel).

Deliberate rules / omissions
----------------------------
* Values render as: None -> ``NULL``, '' -> ``(empty)``, bool -> ``true``/``false``,
  float -> ``repr()`` (compared exactly, no epsilon), int/Decimal -> ``str()``,
  date -> ISO, datetime -> ``str()``, bytes -> DuckDB blob escaping (``\\xNN``),
  anything else (lists, structs, maps, intervals, time zones) -> Python ``str()``.
  Nested/temporal-with-zone values do NOT match DuckDB's rendering: CAST them to
  VARCHAR in the test SQL.
* Results are fetched into Python even for ``statement`` records (the Python
  client streams, so execution errors only surface on fetch).
* Not supported (reported as failures, never skipped): any other ``require``,
  ``require-env``, ``concurrentloop``, ``foreach`` special groups (``<numeric>``
  etc.), ``mode`` other than skip/unskip, hashed results ("N values hashing to"),
  other directives.  Sort modes also sort expected regex cells as plain strings.
* Every executed statement/query record counts as one test (each loop iteration
  separately); directive failures (require, unknown directive, runner crash)
  count as one failed record.  Exit status is 1 if anything failed or nothing ran.
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
SINGLE_LINE = ("require", "mode", "halt", "hash-threshold", "restart", "load",
               "endloop") + LOOPS


@dataclass
class Record:
    line: int          # 1-based line number of the header
    lines: list[str]   # header line followed by the body (raw, unsubstituted)


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
            else:
                body.append(Record(start, [lines[start - 1]]))
            continue
        block = []
        while i < len(lines) and not is_blank(lines[i]):
            block.append(lines[i])
            i += 1
        body.append(Record(start, block) if word in MULTI_LINE
                    else Bad(start, f"unknown directive '{word}'"))
    if stack:
        raise FileAbort("loop without matching 'endloop'", stack[-1].line)
    return root


def render_blob(data: bytes) -> str:
    """DuckDB's BLOB -> VARCHAR rendering: printable ASCII kept, rest as \\xNN."""
    return "".join(chr(b) if 32 <= b <= 126 and chr(b) not in "\\'\"" else f"\\x{b:02X}"
                   for b in data)


def render(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value if value else "(empty)"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return render_blob(bytes(value))
    if isinstance(value, datetime.datetime):
        return str(value)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)  # int, Decimal, time, nested types, ... (see module docstring)


def regex_matches(spec: str, text: str) -> bool:
    """Evaluate a '<REGEX>:' / '<!REGEX>:' spec against text."""
    if spec.startswith(NOT_REGEX):
        return re.search(spec[len(NOT_REGEX):], text, re.DOTALL) is None
    return re.search(spec[len(REGEX):], text, re.DOTALL) is not None


def value_matches(expected: str, actual: str) -> bool:
    if expected.startswith((REGEX, NOT_REGEX)):
        return regex_matches(expected, actual)
    return expected == actual


def error_matches(expected: str, message: str) -> bool:
    if expected.startswith((REGEX, NOT_REGEX)):
        return regex_matches(expected, message)
    return expected in message


def split_at_dashes(body: list[str]) -> tuple[list[str], list[str] | None]:
    """Split a record body at its '----' line: (sql lines, expected lines or None)."""
    for k, ln in enumerate(body):
        if ln.strip() == "----":
            return body[:k], body[k + 1:]
    return body, None


def split_row(line: str, ncols: int) -> list[str]:
    if "\t" in line or ncols == 1:
        return line.split("\t")
    parts = line.split()
    return parts if len(parts) == ncols else [line]


def short(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.split("\n"))


def compare_result(ncols: int, sortmode: str, expected: list[str], rows: list) -> str | None:
    """Return None if the rows match the expected lines, else a description."""
    actual = [[render(v) for v in row] for row in rows]
    if expected and expected[0].startswith((REGEX, NOT_REGEX)):
        text = "\n".join("\t".join(r) for r in actual)
        return None if regex_matches("\n".join(expected), text) else "result does not satisfy regex"
    if (ncols > 1 and expected and len(expected) == len(actual) * ncols
            and not any("\t" in ln for ln in expected)):
        exp_rows = [expected[k:k + ncols] for k in range(0, len(expected), ncols)]
    else:
        exp_rows = [split_row(ln, ncols) for ln in expected]
    for k, row in enumerate(exp_rows):
        if len(row) != ncols:
            return f"expected row {k + 1} has {len(row)} value(s) but query has {ncols} column(s)"
    if sortmode == "rowsort":
        exp_rows, actual = sorted(exp_rows), sorted(actual)
    elif sortmode == "valuesort":
        exp_rows = [sorted(v for r in exp_rows for v in r)]
        actual = [sorted(v for r in actual for v in r)]
    if len(exp_rows) != len(actual):
        return f"expected {len(exp_rows)} row(s), got {len(actual)}"
    for k, (e_row, a_row) in enumerate(zip(exp_rows, actual)):
        for e, a in zip(e_row, a_row):
            if not value_matches(e, a):
                return f"mismatch in row {k + 1}: expected {short(e)}, got {short(a)}"
    return None


class FileRunner:
    """Runs one .test file against a fresh database."""

    def __init__(self, path: str, opts: argparse.Namespace):
        self.path, self.opts = path, opts
        self.passed = self.failed = 0
        self.skipping = self.halted = False
        self.loaded: list[str] = []   # extension paths to re-LOAD after restart
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

    # -- connection handling -------------------------------------------------
    def connect(self) -> None:
        self.close()
        self.con = duckdb.connect(self.db_path, read_only=self.read_only,
                                  config={"allow_unsigned_extensions": "true"})
        for ext in self.loaded:
            self.load_extension(ext)

    def close(self) -> None:
        for c in list(self.named.values()) + [self.con]:
            if c is not None:
                try:
                    c.close()
                except duckdb.Error:
                    pass
        self.named, self.con = {}, None

    def load_extension(self, ext: str) -> None:
        try:
            self.con.execute("LOAD '%s'" % ext.replace("'", "''"))
        except duckdb.Error as exc:
            raise FileAbort(f"LOAD of extension '{ext}' failed: {exc}") from None

    def connection(self, name: str | None):
        if name is None:
            return self.con
        if name not in self.named:
            self.named[name] = self.con.cursor()
        return self.named[name]

    def execute(self, sql: str, conn: str | None = None):
        """Run SQL (possibly several statements); return (ncols, rows) of the last."""
        con = self.connection(conn)
        con.execute(sql)
        if con.description is None:
            return 0, []
        return len(con.description), con.fetchall()

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

    def substitute(self, text: str, env: dict[str, str]) -> str:
        text = text.replace("__TEST_DIR__", self.test_dir)
        for var, val in env.items():
            text = text.replace("${%s}" % var, val)
        return text

    def run_nodes(self, nodes: list, env: dict[str, str]) -> None:
        for node in nodes:
            if self.halted:
                return
            if isinstance(node, Bad):
                self.fail(node.line, node.message)
            elif isinstance(node, Loop):
                for value in self.loop_values(node, env):
                    self.run_nodes(node.body, {**env, node.header.split()[1]: value})
            else:
                lines = [self.substitute(ln, env) for ln in node.lines]
                try:
                    self.run_record(node.line, lines)
                except FileAbort as exc:
                    exc.line = exc.line or node.line
                    raise
                except Exception as exc:  # e.g. a value Python cannot convert on fetch
                    self.fail(node.line, f"runner error: {type(exc).__name__}: {exc}",
                              "\n".join(lines[1:]))

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
                self.skipping = False
            return
        if word == "statement":
            self.run_statement(line, args, lines[1:])
        elif word == "query":
            self.run_query(line, args, lines[1:])
        elif word == "require":
            self.require(args)
        elif word == "mode":
            if args == ["skip"]:
                self.skipping = True
            elif args != ["unskip"]:
                self.fail(line, f"unsupported mode '{' '.join(args)}'")
        elif word == "halt":
            self.halted = True
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
            self.fail(line, "statement succeeded but an error was expected", sql,
                      **({"expected error": expected} if expected else {}))
        elif (kind == "error" and error.startswith("INTERNAL Error")
              and "INTERNAL" not in (expected or "")):
            self.fail(line, "statement raised an internal error", sql, error=error)
        elif error is not None and expected and not error_matches(expected, error):
            self.fail(line, "error message does not match", sql,
                      **{"expected error": expected, "actual error": error})
        else:
            self.passed += 1

    def run_query(self, line: int, args: list[str], body: list[str]) -> None:
        if not args or not re.fullmatch(r"[A-Za-z]+", args[0]) or len(args) > 3:
            self.fail(line, f"malformed query header: 'query {' '.join(args)}'")
            return
        ncols = len(args[0])
        sortmode = args[1] if len(args) > 1 and args[1] in SORT_MODES else "nosort"
        sql_lines, expected = split_at_dashes(body)
        if expected is None:
            self.fail(line, "query without '----' expected-result section")
            return
        sql = "\n".join(sql_lines)
        try:
            got_cols, rows = self.execute(sql)
        except duckdb.Error as exc:
            self.fail(line, "query failed", sql, error=str(exc))
            return
        if got_cols != ncols:
            self.fail(line, f"column count mismatch: expected {ncols}, got {got_cols}", sql)
            return
        problem = compare_result(ncols, sortmode, expected, rows)
        if problem is None:
            self.passed += 1
            return
        actual = "\n".join("\t".join(render(v) for v in row) for row in rows)
        self.fail(line, f"wrong result ({problem})", sql,
                  expected="\n".join(expected) or "(no rows)",
                  actual=actual or "(no rows)")


def collect(paths: list[str]) -> tuple[list[str], list[str]]:
    """Expand arguments into test files; return (files, missing paths)."""
    files, missing = [], []
    for p in paths:
        if os.path.isdir(p):
            found = [os.path.join(root, f) for root, _, names in os.walk(p)
                     for f in names if f.endswith(".test")]
            files.extend(sorted(found))
        elif os.path.isfile(p):
            files.append(p)
        else:
            missing.append(p)
    return files, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run DuckDB-style sqllogictest files.")
    ap.add_argument("--extension", metavar="PATH",
                    help="extension binary LOADed by 'require <extension-name>'")
    ap.add_argument("--extension-name", default="streamhouse")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    opts = ap.parse_args(argv)

    files, missing = collect(opts.paths)
    passed, failed = 0, 0
    for p in missing:
        print(f"FAIL {p}: no such file or directory")
        failed += 1
    for path in files:
        runner = FileRunner(path, opts)
        runner.run()
        passed, failed = passed + runner.passed, failed + runner.failed
        if opts.verbose:
            print(f"{path}: {runner.passed} passed, {runner.failed} failed", flush=True)
    print(f"{passed} passed, {failed} failed")
    if passed + failed == 0:
        print("no tests ran", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
