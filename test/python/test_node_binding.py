"""The Node binding (@duckdb/node-api at the exact version in test/node/package-lock.json):
test/node/binding.mjs runs LOAD, build, dashboard, refresh, reconcile, status, errors as JavaScript
exceptions, a lake scan and a lake build, and close, checking each against its own JavaScript
oracle. Here: it must exit 0, and what it read from a Paimon table written by pypaimon must equal
pypaimon's own read of that table."""

from __future__ import annotations

from binding_util import write_orders_lake
from conftest import NODE_DIR, oracle
from matrix_util import result_of, run


def test_node_binding_end_to_end(node, ext_path, tmp_path):
    lake, lake_rows, snapshots = write_orders_lake(tmp_path / "wh")
    res = result_of(run([node, NODE_DIR / "binding.mjs", ext_path, lake], timeout=120, cwd=NODE_DIR))
    assert res["version"] == "1.5.6", f"@duckdb/node-api runs DuckDB {res['version']}"
    # binding.mjs asserted build/dashboard/refresh/reconcile itself; these show it got that far.
    assert [r["updated"] + r["inserted"] + r["deleted"] + r["ignored_deletes"] for r in res["refreshes"]] == [600, 600]

    want_scan = [[str(oid), company, day.isoformat(), str(revenue)] for oid, company, day, revenue in lake_rows]
    assert res["lake_scan"] == want_scan, "paimon_scan through Node differs from pypaimon's read"
    assert res["lake_build"] == {"fct_rows": len(lake_rows), "lake_snapshot": snapshots}
    per_company, _ = oracle(lake_rows)
    assert res["lake_dashboards"] == {
        company: [[day.isoformat(), str(revenue)] for day, revenue in rows] for company, rows in per_company.items()
    }
