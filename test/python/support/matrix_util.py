"""The DuckDB version matrix: which venv holds which Python duckdb wheel, and how to run one
scenario step (test/python/support/matrix_child.py) in a fresh process of it.

The venvs are made by `make venv` (scripts/venv.sh) from scripts/requirements*.txt.
"""

from __future__ import annotations

import json
import re
import resource
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

CHILD = Path(__file__).with_name("matrix_child.py")
TIMEOUT = 60

# version -> (venv, requirements file that pins it)
VENVS = {
    "1.2.2": (".venv-duckdb-1.2.2", "scripts/requirements-duckdb-1.2.2.txt"),
    "1.3.2": (".venv-duckdb-1.3.2", "scripts/requirements-duckdb-1.3.2.txt"),
    "1.4.5": (".venv-duckdb-1.4.5", "scripts/requirements-duckdb-1.4.5.txt"),
    "1.5.6": (".venv-duckdb15", "scripts/requirements-duckdb15.txt"),
    "2.0.0": (".venv-duckdb-2.0.0", "scripts/requirements-duckdb-2.0.0.txt"),
    "2.0.1": (".venv", "scripts/requirements.txt"),
}
# The main artifact declares C API v1.5.6 (scripts/append_metadata.py): the C API functions the
# duckdb crate calls exist from that version on. DuckDB 1.4 LTS loads its own artifact
# (compat/duckdb-1.4, `make release-1.4`), pinned to exactly v1.4.5.
SUPPORTED = ["1.4.5", "1.5.6", "2.0.0", "2.0.1"]
REFUSED = ["1.2.2", "1.3.2"]
LTS = "1.4.5"
EXT14 = ROOT / "build" / "release-duckdb-1.4" / "streamhouse.duckdb_extension"


def lts_artifact() -> str:
    if not EXT14.is_file():
        pytest.fail(f"{EXT14} missing: the DuckDB 1.4 LTS artifact is built by `make release-1.4`", pytrace=False)
    return str(EXT14)


def artifact(version: str, ext_path: str) -> str:
    """The artifact DuckDB `version` loads: the 1.4 LTS one on 1.4.5, the main one elsewhere."""
    return lts_artifact() if version == LTS else ext_path


def python_of(version: str) -> Path:
    venv, req = VENVS[version]
    py = ROOT / venv / "bin" / "python"
    if not py.is_file():
        pytest.fail(f"{py} missing: the DuckDB {version} venv is made by `make venv` (from {req})", pytrace=False)
    return py


def describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"rc={rc} (killed by {signal.Signals(-rc).name})"
        except ValueError:
            return f"rc={rc} (killed by signal {-rc})"
    return f"rc={rc}"


def run_unchecked(cmd: list, timeout: int = TIMEOUT, **kw) -> subprocess.CompletedProcess:
    """Run a command; a hang fails the test with the command line to reproduce it."""
    try:
        return subprocess.run([str(a) for a in cmd], capture_output=True, text=True, timeout=timeout, check=False, **kw)
    except subprocess.TimeoutExpired as e:
        pytest.fail(
            f"hung for {timeout}s: {command_line(cmd)}\nstdout: {e.stdout!r}\nstderr: {e.stderr!r}", pytrace=False
        )


def command_line(cmd: list) -> str:
    return shlex.join(str(a) for a in cmd)


def check_exit(p: subprocess.CompletedProcess) -> None:
    """Exit code 0; a negative one is a signal (a crash): both with the command to reproduce it."""
    what = "crashed" if p.returncode < 0 else "failed"
    assert p.returncode == 0, (
        f"{what}, {describe(p.returncode)}: {command_line(p.args)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    )


def run(cmd: list, timeout: int = TIMEOUT, **kw) -> subprocess.CompletedProcess:
    p = run_unchecked(cmd, timeout, **kw)
    check_exit(p)
    return p


def result_of(p: subprocess.CompletedProcess) -> dict:
    results = [line[len("RESULT ") :] for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, f"expected one RESULT line:\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return json.loads(results[0])


def allow_core_dump() -> None:
    """A child's preexec_fn: a crash leaves a core file (where the kernel's core_pattern puts
    it; on these machines, `core` in the working directory) for `core_backtrace`."""
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def core_backtrace(p: subprocess.CompletedProcess, cwd: Path) -> list[str] | None:
    """The faulting thread's backtrace (frame lines) from the core file the crash of `p`
    (run in `cwd` with `allow_core_dump`) left there; None when there is no core file or gdb.
    The core file is removed."""
    cores = sorted(cwd.glob("core*"))
    gdb = shutil.which("gdb")
    try:
        if not cores or gdb is None:
            return None
        out = run_unchecked([gdb, "-q", "-batch", "-ex", "bt 40", str(p.args[0]), str(cores[-1])])
        return [line for line in out.stdout.splitlines() if line.startswith("#")] or None
    finally:
        for core in cores:
            core.unlink(missing_ok=True)


# The abort's documented words, each a line of its own: std::terminate on the thread's forced
# unwind, whose exception has no type name (2.0.1 with streamhouse and 2.0.0 without print `''`,
# 2.0.0 with streamhouse a stray byte, `'\x04'`) and glibc's report of a forced unwind that was
# caught, or (1.4.5 and 1.5.6 without streamhouse) no active exception. An exception of ours
# escaping a callback names its type (`instance of 'duckdb::InvalidInputException'`): never
# documented.
FORCED_UNWIND = "FATAL: exception not rethrown"
NO_EXCEPTION = "terminate called without an active exception"
THROWN = re.compile(r"^terminate called after throwing an instance of '(.*)'$")


def documented_abort(returncode: int, stderr: str) -> bool:
    """Whether a crash is the documented abort: SIGABRT, with one of those lines, and every
    `terminate called` line one of them (a thrown type without a letter, digit or `_` in its name)."""
    lines = [line.strip() for line in stderr.splitlines()]
    terminates = [line for line in lines if line.startswith("terminate called")]
    nameless = [m for line in terminates if (m := THROWN.match(line)) and not re.search(r"\w", m.group(1))]
    return (
        returncode == -signal.SIGABRT
        and (FORCED_UNWIND in lines or NO_EXCEPTION in lines or bool(nameless))
        and len(nameless) + terminates.count(NO_EXCEPTION) == len(terminates)
    )


def duckdb_python_finalization_fault(frames: list[str]) -> bool:
    """Whether a faulting thread's backtrace is DuckDB's Python package calling back into an
    interpreter that has finalized (its signal check takes the GIL of a dead interpreter), with
    no frame of ours: the crash site streamhouse cannot cause or prevent."""
    text = "\n".join(frames)
    ours = "streamhouse.duckdb_extension" in text or "streamhouse::" in text
    return "PyGILState_Ensure" in text and "_duckdb" in text and not ours


# The header of the README's function table (README.md, or a page under docs/ it moves to).
FUNCTION_TABLE_HEADER = re.compile(r"^\|\s*function\s*\|\s*returns\s*\|")
FUNCTION_ROW = re.compile(r"^\|\s*`([a-z_][a-z0-9_]*)\(")


def documented_functions() -> set[str]:
    """The SQL functions the function table documents: the name of every row whose first cell
    is a call (`name(...)`), read from README.md and any docs/*.md that holds such a table."""
    names: set[str] = set()
    tables = 0
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        in_table = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if FUNCTION_TABLE_HEADER.match(line):
                in_table, tables = True, tables + 1
            elif in_table and not line.startswith("|"):
                in_table = False
            elif in_table and (m := FUNCTION_ROW.match(line)):
                names.add(m.group(1))
    assert tables >= 1 and len(names) >= 10, f"no function table found ({tables} tables, names {sorted(names)})"
    return names


def child_cmd(version: str, step: str, *args) -> list:
    return [python_of(version), CHILD, step, *args]


def run_child(version: str, step: str, *args, timeout: int = TIMEOUT) -> dict:
    res = result_of(run(child_cmd(version, step, *args), timeout=timeout))
    assert res["version"] == version, f"venv for {version} runs duckdb {res['version']}"
    return res


def dash_oracle(per_company: dict) -> dict:
    """The dashboards as matrix_child.py reports them: every company plus one that has no rows."""
    out = {c: [[d.isoformat(), str(r)] for d, r in rows] for c, rows in per_company.items()}
    out["nobody"] = []
    return out


def mart_oracle(cells: dict) -> list:
    return sorted([c, d.isoformat(), str(r)] for (c, d), r in cells.items())


# What `paimon_tier_ddl('lake.accounts')` and `paimon_tier_upsert('lake.accounts', 7, -3)` return in
# matrix_child.py's `use` step (and the CLI flow of host/test_lifecycle_matrix.py), on every version.
DDL = (
    "CREATE TABLE `lake`.`accounts` (id INT, bal INT, PRIMARY KEY (id) NOT ENFORCED) "
    "WITH ('bucket' = '1', 'merge-engine' = 'deduplicate', 'changelog-producer' = 'input')"
)
UPSERT = "INSERT INTO `lake`.`accounts` (id, bal) VALUES (7, -3)"


def squash(sql: str) -> str:
    """Whitespace-insensitive form of a statement: layout is not part of the contract."""
    sql = re.sub(r"\s+", " ", sql.strip())
    return re.sub(r"\( ", "(", re.sub(r" \)", ")", sql))
