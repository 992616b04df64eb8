"""The two artifacts against the DuckDB version matrix (Python wheels 1.2.2 ... 2.0.1).

DuckDB 1.5.6, 2.0.0 and 2.0.1 load the main artifact (C API v1.5.6), DuckDB 1.4.5 the 1.4 LTS one
(compat/duckdb-1.4: unstable C API, pinned to exactly v1.4.5), and serve the oracle's answers.
Every other pairing must be refused at LOAD with DuckDB's own message (1.2.2 also has another
platform name): a clean, catchable error, never a crash. Each version runs in its own venv, in a
fresh process, through test/python/support/matrix_child.py.
"""

from __future__ import annotations

import pytest
from conftest import ROOT, gen_rows, oracle, oracle_summary, write_csv
from support.cli_util import json_results
from support.matrix_util import (
    DDL,
    LTS,
    REFUSED,
    SUPPORTED,
    UPSERT,
    artifact,
    dash_oracle,
    describe,
    lts_artifact,
    run_child,
    run_unchecked,
    squash,
)

CAPI_REFUSAL = (
    "The file was built for DuckDB C API version 'v1.5.6', but we can only load extensions "
    "built for DuckDB C API 'v1.2.0' and lower."
)
PLATFORM_REFUSAL = (
    "built for the platform 'linux_amd64', but we can only load extensions built for platform 'linux_amd64_gcc4'"
)
EXPECTED_REFUSAL = {"1.2.2": [CAPI_REFUSAL, PLATFORM_REFUSAL], "1.3.2": [CAPI_REFUSAL], "1.4.5": [CAPI_REFUSAL]}


def lts_refusal(version: str) -> list[str]:
    """DuckDB's refusal of the 1.4 LTS artifact (built for exactly v1.4.5) by another version."""
    texts = [
        "The file was built specifically for DuckDB version 'v1.4.5' and can only be loaded with that "
        f"version of DuckDB. (this version of DuckDB is 'v{version}')"
    ]
    return texts + ([PLATFORM_REFUSAL] if version == "1.2.2" else [])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rows, _companies = gen_rows(81, 3_000, 11, 40)
    csv_path = write_csv(tmp_path_factory.mktemp("versions") / "orders.csv", rows)
    per_company, _cells = oracle(rows)
    return rows, str(csv_path), per_company


def check_refused(version: str, ext: str, expected: list[str]) -> None:
    res = run_child(version, "refused", ext, ":memory:")
    for attempt, error in enumerate(res["errors"]):
        assert error is not None, f"DuckDB {version} loaded {ext} (attempt {attempt + 1})"
        assert error["type"] == "InvalidInputException", error
        assert error["message"].startswith("Invalid Input Error: Failed to load '" + ext + "'"), error
        for text in expected:
            assert text in error["message"], f"DuckDB {version}: {error['message']!r}"
    # The refusal left the connection usable and registered nothing.
    assert res["after"] == 42
    assert res["functions"] == []


@pytest.mark.parametrize("version", [*REFUSED, LTS])
def test_main_artifact_refused_below_1_5(ext_path, version):
    check_refused(version, ext_path, EXPECTED_REFUSAL[version])


@pytest.mark.parametrize("version", [v for v in [*REFUSED, *SUPPORTED] if v != LTS])
def test_lts_artifact_refused_by_any_other_version(version):
    check_refused(version, lts_artifact(), lts_refusal(version))


@pytest.mark.parametrize("version", SUPPORTED)
def test_supported_duckdb_loads_and_serves(ext_path, dataset, version):
    rows, csv_path, per_company = dataset
    res = run_child(version, "use", artifact(version, ext_path), ":memory:", csv_path, "close")
    want = oracle_summary(rows)
    assert res["summary"] == [
        want["fct_rows"],
        want["mart_rows"],
        want["companies"],
        want["days"],
        str(want["total_revenue"]),
    ]
    assert res["dash"] == dash_oracle(per_company)
    assert squash(res["ddl"]) == DDL, res["ddl"]
    assert res["upsert"] == UPSERT
    assert res["reconcile"] == 0


CLI14 = ROOT / ".venv-duckdb-cli-1.4.4" / "bin" / "duckdb"


@pytest.mark.parametrize("which", ["main", "lts"])
def test_duckdb_1_4_4_cli_refuses_both_artifacts(ext_path, which):
    """The newest 1.4 CLI wheel is 1.4.4: it must refuse the main artifact (C API v1.5.6) and the
    1.4 LTS one (pinned to exactly v1.4.5) at LOAD, with DuckDB's own message and a clean exit
    code, and go on serving plain SQL after the refusal."""
    if not CLI14.is_file():
        pytest.fail(f"{CLI14} missing: made by `make venv`", pytrace=False)
    ext = ext_path if which == "main" else lts_artifact()
    expected = [CAPI_REFUSAL] if which == "main" else lts_refusal("1.4.4")
    p = run_unchecked([CLI14, "-unsigned", "-json"], input=f"LOAD '{ext}';\nSELECT 42 AS answer;\n")
    assert p.returncode == 1, f"{describe(p.returncode)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert f"Failed to load '{ext}'" in p.stderr, p.stderr
    for text in expected:
        assert text in p.stderr, p.stderr
    assert json_results(p.stdout) == [[{"answer": 42}]], "the CLI did not go on after the refused LOAD"
