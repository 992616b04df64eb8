"""The Node binding (@duckdb/node-api 1.5.6 and 1.4.5, exact versions in test/node/package-lock.json):
test/node/binding.mjs runs LOAD, build, dashboard, refresh, reconcile, status, errors as JavaScript
exceptions, a lake scan and a lake build, and close, checking each against its own JavaScript
oracle. Here: it must exit 0, and what it read from a Paimon table written by pypaimon must equal
pypaimon's own read of that table."""

from __future__ import annotations

import pytest
from conftest import NODE_APIS, NODE_DIR, node_env, oracle
from support.binding_util import write_orders_lake
from support.matrix_util import artifact, result_of, run


@pytest.mark.parametrize("version", list(NODE_APIS))
def test_node_binding_end_to_end(node, ext_path, tmp_path, version):
    lake, lake_rows, snapshots = write_orders_lake(tmp_path / "wh")
    cmd = [node, NODE_DIR / "binding.mjs", artifact(version, ext_path), lake]
    res = result_of(run(cmd, timeout=120, cwd=NODE_DIR, env=node_env(version)))
    assert res["version"] == version, f"{NODE_APIS[version]} runs DuckDB {res['version']}"
    # binding.mjs asserted build/dashboard/refresh/reconcile itself; these show it got that far.
    assert [r["updated"] + r["inserted"] + r["deleted"] + r["ignored_deletes"] for r in res["refreshes"]] == [600, 600]

    want_scan = [[str(oid), company, day.isoformat(), str(revenue)] for oid, company, day, revenue in lake_rows]
    assert res["lake_scan"] == want_scan, "paimon_scan through Node differs from pypaimon's read"
    assert res["lake_build"] == {"fct_rows": len(lake_rows), "lake_snapshot": snapshots}
    per_company, _ = oracle(lake_rows)
    assert res["lake_dashboards"] == {
        company: [[day.isoformat(), str(revenue)] for day, revenue in rows] for company, rows in per_company.items()
    }
