"""description.yml, in the format of DuckDB's community-extensions repository (extension / repo /
docs): the fields that repository requires, consistent with Cargo.toml, and a hello_world that runs
against the artifact (Python and the duckdb CLI) with the dashboard its own rows imply."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, connect, sql_literal
from support.cli_util import json_results

DESCRIPTION = ROOT / "description.yml"
# DuckDB's platform names (what excluded_platforms may list).
PLATFORMS = {
    "linux_amd64",
    "linux_arm64",
    "linux_amd64_musl",
    "linux_arm64_musl",
    "linux_amd64_gcc4",
    "osx_amd64",
    "osx_arm64",
    "windows_amd64",
    "windows_arm64",
    "windows_amd64_mingw",
    "windows_amd64_rtools",
    "wasm_mvp",
    "wasm_eh",
    "wasm_threads",
}


@pytest.fixture(scope="module")
def desc() -> dict:
    return yaml.safe_load(DESCRIPTION.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cargo() -> dict:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]


def nonempty_str(value) -> bool:
    return isinstance(value, str) and value.strip() != ""


def test_required_fields(desc, cargo):
    assert set(desc) == {"extension", "repo", "docs"}, set(desc)
    ext = desc["extension"]
    for key in ("name", "description", "version", "language", "build", "license", "excluded_platforms"):
        assert nonempty_str(ext.get(key)), f"extension.{key} must be a non-empty string: {ext.get(key)!r}"
    assert re.fullmatch(r"[a-z0-9_-]+", ext["name"]), "extension names: lowercase letters, digits, - and _"
    assert ext["name"] == cargo["name"] == Path(ROOT / "build/release/streamhouse.duckdb_extension").stem
    assert ext["version"] == cargo["version"], "description.yml and Cargo.toml disagree on the version"
    assert ext["language"] == "Rust" and ext["build"] == "cargo"
    assert ext["license"] == cargo["license"]
    assert isinstance(ext["maintainers"], list) and ext["maintainers"], "at least one maintainer"
    assert all(nonempty_str(m) for m in ext["maintainers"])
    excluded = ext["excluded_platforms"].split(";")
    assert set(excluded) <= PLATFORMS and len(excluded) == len(set(excluded)), excluded
    assert "linux_amd64" not in excluded, "the platform the artifact is built and tested on"
    assert set(ext["requires_toolchains"].split(";")) <= {"rust", "python3"}

    repo = desc["repo"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]+/[a-zA-Z0-9_.-]+", repo["github"]), repo["github"]
    assert repo["ref"] == f"v{cargo['version']}", "ref is the release tag of this version"

    docs = desc["docs"]
    assert nonempty_str(docs["hello_world"]) and nonempty_str(docs["extended_description"])


def hello_world_oracle(orders: list[tuple], company: str) -> list[tuple]:
    cells = defaultdict(int)
    for _oid, c, day, revenue in orders:
        if c == company:
            cells[day] += revenue
    return sorted(cells.items(), key=lambda dr: (-dr[1], dr[0]))


def company_of_last_statement(sql: str) -> str:
    m = re.search(r"serving_dashboard\('((?:[^']|'')*)'\);\s*$", sql)
    assert m, "hello_world ends with a serving_dashboard call"
    return m.group(1).replace("''", "'")


@pytest.fixture(scope="module")
def hello(desc, ext_path):
    """hello_world run in Python: (its last result, the oracle over the orders it created)."""
    sql = desc["docs"]["hello_world"]
    con = connect(":memory:", ext_path)
    try:
        rows = con.execute(sql).fetchall()  # every statement runs; the last one's rows
        orders = con.execute("SELECT order_id, company, order_day, revenue FROM orders").fetchall()
    finally:
        con.close()
    return rows, hello_world_oracle(orders, company_of_last_statement(sql))


def test_hello_world_runs_against_the_artifact(hello):
    rows, want = hello
    assert rows, "hello_world returned no rows"
    assert rows == want


def test_hello_world_in_the_cli(desc, ext_path, hello):
    cli = Path(sys.executable).parent / "duckdb"
    sql = desc["docs"]["hello_world"]
    p = subprocess.run(
        [str(cli), "-unsigned", "-json", "-bail", "-c", f"LOAD {sql_literal(ext_path)};\n{sql}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0 and not p.stderr, p.stderr
    last = json_results(p.stdout)[-1]
    assert last, "hello_world returned no rows in the CLI"
    assert [(datetime.date.fromisoformat(r["order_day"]), int(r["revenue"])) for r in last] == hello[1]
