"""Replicas at load (issue 19, item 4), the behaviour half (the latency targets are measured by
`make bench`, bench/bench_scaleout.py, over the full minute): a primary follows a Paimon fact and
publishes its mart after every apply; four replica processes build from the mart table and
follow it; a pypaimon writer commits 500 new + 200 corrected orders every 300 ms. One replica is
killed mid-run and started again. Every replica converges to the mart of the writer's final
state (a pure-Python oracle), every first build is one whole mart snapshot, and each commit
becomes visible on the replicas that ran throughout. Driver: support/replica_load.py."""

from __future__ import annotations

import math

from conftest import EXT_PATH
from support import replica_load


def test_four_replicas_follow_a_publishing_primary_under_a_steady_writer(tmp_path):
    out = replica_load.run(str(EXT_PATH), tmp_path, seconds=15, replicas=4, initial=20_000)
    assert out["commits"] >= 20, out["commits"]
    assert out["restarted"], "the killed replica was not started again"
    assert out["primary"]["last_error"] is None, out["primary"]
    for n, r in enumerate(out["replicas"]):
        assert r["mode"] == "mart" and r["last_error"] is None, (n, r["mode"], r["last_error"])
        assert r["first_build_whole"], f"replica {n}'s first build is not one whole mart snapshot"
        assert r["mart"] == out["oracle"], f"replica {n} did not converge to the oracle's mart"
        assert r["latencies_ms"], f"replica {n} asked no dashboard"
    # Every commit reached every replica that ran throughout (a finite freshness for each).
    assert len(out["freshness_ms"]) == out["commits"]
    assert all(math.isfinite(x) and x >= 0 for x in out["freshness_ms"]), out["freshness_ms"]
