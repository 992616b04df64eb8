#!/usr/bin/env python3
"""Beyond one machine (part of make bench): issue 19's measurements.

  load       replicas at load: a primary follows a Paimon fact with publish := a mart table,
             four replica processes build from the mart table and follow it, a pypaimon writer
             commits 500 new + 200 corrected orders every 300 ms for 60 s
             (test/python/support/replica_load.py; one replica is killed and restarted on the
             way). Targets: fact commit -> visible on all replicas p99 <= 2 s at every := 200 ms;
             dashboard p99 on the replicas <= 50 ms. Correctness first: every replica must end
             with the mart of the writer's final state, else FAILED.
  replica    serving_build of the mart table (a replica) vs serving_build of the 10M-order fact
             it was published from (bench_scale.py's cached lake table), each in a fresh process:
             time and peak RSS; and the replica's peak RSS behind a 1M- and a 10M-order fact with
             the same-sized mart (target: < 10% apart).
  publish    serving_publish cost vs changed groups: a 182,500-group mart (50 companies x 3,650
             days), one first publish (every group), then publishes after refreshes that change
             k groups; the commit must carry exactly k groups.

  ray        streamhouse.ray.build_mart of the 10M-order fact on a Ray cluster of 1 and of 2
             one-CPU nodes (support/ray_cluster.py, its own network namespace) against
             serving_build of the same fact in a fresh process; the marts must be equal.

Every figure is a median over repeated runs where a run can be repeated. A target's line ends in
PASS or MISSED, a figure without a target in "(reported)" and no verdict; a wrong answer prints
FAILED and makes the run exit 1 (bench/summary.py gathers them).

--quick: correctness only, in seconds (`make test` runs it so the script cannot rot): 3 s of load
on 2 replicas, replica builds behind 2k- and 20k-order facts generated in a temporary directory, a
365-group publish, build_mart on one one-node Ray cluster; no target judged.

Usage: bench_scaleout.py EXTENSION [--quick] [--only load,replica,publish,ray]
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

FRESHNESS_P99_MS = 2000
DASHBOARD_P99_MS = 50
RSS_APART = 0.10
# Wrong answers: each printed with FAILED where it is found; the run exits 1.
FAILURES: list[str] = []
# A figure that has no target: its `ok` in a target tuple (no verdict word is printed for it).
REPORTED = None


def verdict(ok: bool | None, quick: bool) -> str:
    """The verdict word bench/summary.py reads: none for a reported figure or in a --quick run."""
    if ok is REPORTED:
        return ""
    if quick:
        return "quick: not judged"
    return "PASS" if ok else "MISSED"


def failed(what: str) -> None:
    FAILURES.append(what)
    print(f"  {what} FAILED", flush=True)


def load(ext: str, quick: bool) -> list:
    from support import replica_load

    seconds, replicas = (3, 2) if quick else (60, 4)
    with tempfile.TemporaryDirectory() as d:
        out = replica_load.run(
            ext, Path(d), seconds=seconds, replicas=replicas, initial=2_000 if quick else 20_000, kill=not quick
        )
    converged = all(r["mart"] == out["oracle"] for r in out["replicas"])
    print(
        f"  load: {out['commits']} fact commits in {seconds} s (median gap {out['median_commit_gap_ms']:.0f} ms), "
        f"{out['orders']:,} orders, {out['groups']:,} mart groups, {out['dashboard_queries']:,} dashboard queries "
        f"on {replicas} replicas; every replica converged to the oracle: {converged}",
        flush=True,
    )
    print(
        f"  freshness p50 {out['freshness_p50_ms']:.0f} ms  p99 {out['freshness_p99_ms']:.0f} ms   "
        f"dashboard p50 {out['dashboard_p50_ms']:.2f} ms  p99 {out['dashboard_p99_ms']:.2f} ms",
        flush=True,
    )
    print(
        "  where it goes: fact commit -> mart snapshot (primary apply + publish) "
        f"p50 {out['publish_lag_p50_ms']:.0f} ms p99 {out['publish_lag_p99_ms']:.0f} ms; "
        f"mart snapshot -> on all replicas p50 {out['replica_lag_p50_ms']:.0f} ms "
        f"p99 {out['replica_lag_p99_ms']:.0f} ms; freshness p50 first third "
        f"{out['freshness_first_third_p50_ms']:.0f} ms, last third {out['freshness_last_third_p50_ms']:.0f} ms",
        flush=True,
    )
    if not converged:
        for n, r in enumerate(out["replicas"]):
            clock = max((int(v) for v in r["seen"]), default=0)
            print(
                f"  replica {n}: mart equal {r['mart'] == out['oracle']}, clock {clock}/{out['commits']}, "
                f"{len(r['mart'])} groups, last_error {r['last_error']}",
                flush=True,
            )
        failed("replicas at load: a replica did not converge")
    return [
        (
            "replica freshness p99",
            f"{out['freshness_p99_ms']:.0f} ms",
            f"<= {FRESHNESS_P99_MS} ms",
            out["freshness_p99_ms"] <= FRESHNESS_P99_MS,
        ),
        (
            "replica dashboard p99",
            f"{out['dashboard_p99_ms']:.2f} ms",
            f"<= {DASHBOARD_P99_MS} ms",
            out["dashboard_p99_ms"] <= DASHBOARD_P99_MS,
        ),
    ]


def child(spec: dict) -> dict:
    """One serving_build (and optionally a publish) in this fresh process: time and peak RSS."""
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{spec['ext']}'")
    t = time.perf_counter()
    row = con.execute("SELECT mart_rows, fct_rows FROM serving_build(?)", [spec["source"]]).fetchone()
    took = time.perf_counter() - t
    mart = con.execute("SELECT count(*), sum(revenue)::VARCHAR FROM mart_daily").fetchone()
    if spec.get("publish"):
        con.execute("SELECT * FROM serving_publish(?)", [spec["publish"]]).fetchall()
    from bench_scale import peak_rss_mb

    return {"seconds": took, "mart_rows": row[0], "orders": row[1], "mart": list(mart), "rss_mb": peak_rss_mb()}


def run_child(spec: dict) -> dict:
    p = subprocess.run(
        [sys.executable, __file__, spec["ext"], "--child", json.dumps(spec)], capture_output=True, text=True
    )
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def replica(ext: str, quick: bool) -> list:
    from bench_scale import dataset

    sizes = [2_000, 20_000] if quick else [1_000_000, 10_000_000]
    repeat = 1 if quick else 3
    results = {}
    for rows in sizes:
        data, _meta, _cached = dataset(rows)
        fact = "paimon:" + str(data / "wh" / "db.db" / "orders")
        mart_dir = data / "mart"
        shutil.rmtree(mart_dir, ignore_errors=True)
        facts = [
            run_child({"ext": ext, "source": fact, "publish": f"paimon:{mart_dir}" if i == 0 else None})
            for i in range(repeat)
        ]
        reps = [run_child({"ext": ext, "source": f"paimon:{mart_dir}"}) for _ in range(repeat)]
        if reps[0]["mart"] != facts[0]["mart"] or reps[0]["orders"] != facts[0]["orders"]:
            failed(f"replica at {rows:,}: the replica's mart differs from the fact build's")
        f_s = statistics.median(r["seconds"] for r in facts)
        r_s = statistics.median(r["seconds"] for r in reps)
        f_rss = statistics.median(r["rss_mb"] for r in facts)
        r_rss = statistics.median(r["rss_mb"] for r in reps)
        results[rows] = (f_s, r_s, f_rss, r_rss, reps[0]["mart_rows"])
        print(
            f"  {rows:>11,} orders, {reps[0]['mart_rows']:,} groups: fact build {f_s * 1e3:8.0f} ms "
            f"(peak RSS {f_rss:5.0f} MB)   replica build {r_s * 1e3:6.0f} ms (peak RSS {r_rss:5.0f} MB)   "
            f"replica/fact time {r_s / f_s:.3f}x",
            flush=True,
        )
    small, big = (results[s] for s in sizes)
    apart = abs(big[3] - small[3]) / small[3]
    same_mart = small[4] == big[4]
    print(
        f"  replica peak RSS {small[3]:.0f} MB ({sizes[0]:,}) vs {big[3]:.0f} MB ({sizes[1]:,}); "
        f"same-sized mart: {same_mart}",
        flush=True,
    )
    return [
        (
            f"replica RSS {sizes[0]:,} vs {sizes[1]:,}-order fact",
            f"{apart * 100:.1f}% apart",
            f"< {RSS_APART * 100:.0f}% apart",
            apart < RSS_APART,
        ),
        (f"replica build vs fact build ({sizes[1]:,})", f"{big[1] / big[0]:.3f}x", "(reported)", REPORTED),
    ]


def publish(ext: str, quick: bool) -> list:
    import duckdb

    days = 73 if quick else 3650
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    con.execute(
        f"CREATE TABLE src AS SELECT i AS order_id, 'company_' || (i % 50) AS company, "
        f"DATE '2016-01-01' + ((i // 50) % {days})::INT AS order_day, (hash(i) % 1000)::BIGINT AS revenue "
        f"FROM range({50 * days * 10}) t(i)"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    groups = con.execute("SELECT count(*) FROM mart_daily").fetchone()[0]
    with tempfile.TemporaryDirectory() as d:
        target = f"paimon:{d}/mart"
        first = con.execute("SELECT elapsed_ms, upserted FROM serving_publish(?)", [target]).fetchone()
        print(f"  first publish: {first[1]:,} groups in {first[0]:.0f} ms", flush=True)
        rows = []
        next_id = 10**9
        for k in [10, 1_000, 10_000, 100_000]:
            if k > groups:
                continue
            times = []
            for _ in range(1 if quick else 3):
                # k new orders, one in each of k distinct groups: exactly k groups move.
                con.execute(
                    f"CREATE OR REPLACE TABLE changes AS SELECT {next_id} + i AS order_id, "
                    f"'company_' || (i % 50) AS company, "
                    f"DATE '2016-01-01' + ((i // 50) % {days})::INT AS order_day, 1::BIGINT AS revenue "
                    f"FROM range({k}) t(i)"
                )
                next_id += k
                con.execute("SELECT * FROM serving_refresh('changes')").fetchall()
                ms, up, dele = con.execute(
                    "SELECT elapsed_ms, upserted, deleted FROM serving_publish(?)", [target]
                ).fetchone()
                if (up, dele) != (k, 0):
                    failed(f"publish of {k} changed groups committed {up} + {dele}")
                times.append(ms)
            med = statistics.median(times)
            rows.append((k, med))
            print(
                f"  {k:>7,} changed groups: publish median {med:8.1f} ms   ({med / first[0]:.3f}x the first publish)",
                flush=True,
            )
    return [
        (f"publish {k:,} of {groups:,} groups", f"{ms:.1f} ms", "(reported: grows with the change)", REPORTED)
        for k, ms in rows
    ]


def ray(ext: str, quick: bool) -> list:
    from bench_scale import dataset
    from support.ray_cluster import Cluster

    rows = 20_000 if quick else 10_000_000
    repeat = 1 if quick else 3
    data, _meta, _cached = dataset(rows)
    fact = "paimon:" + str(data / "wh" / "db.db" / "orders")
    local = [run_child({"ext": ext, "source": fact}) for _ in range(repeat)]
    local_s = statistics.median(r["seconds"] for r in local)
    print(f"  serving_build of the {rows:,}-order fact: median {local_s:.2f} s", flush=True)
    medians = {}
    with tempfile.TemporaryDirectory() as d:
        for nodes in (1,) if quick else (1, 2):
            mart = f"paimon:{d}/wh{nodes}/db.db/mart"
            cluster = Cluster(nodes=nodes, object_store_mb=200 if quick else 2_000)
            try:
                runs = []
                for _ in range(repeat):
                    got = cluster.call({"fact": fact, "mart": mart}, timeout=3600)
                    if "result" not in got:
                        raise RuntimeError(f"build_mart on {nodes} node(s) failed: {got}")
                    runs.append(got["result"])
            finally:
                cluster.stop()
            medians[nodes] = statistics.median(r["elapsed_s"] for r in runs)
            last = runs[-1]
            check = run_child({"ext": ext, "source": mart})
            same = check["mart"] == local[0]["mart"] and check["orders"] == local[0]["orders"]
            print(
                f"  Ray {nodes} node(s): build_mart median {medians[nodes]:.2f} s "
                f"({medians[nodes] / local_s:.2f}x serving_build), reader {last['reader']}, "
                f"{last['read_tasks']} read tasks on {last['read_nodes']} node(s), {last['groups']:,} groups; "
                f"mart equals serving_build's: {same}",
                flush=True,
            )
            if not same:
                failed(f"Ray {nodes} node(s): build_mart's mart differs from serving_build's")
    out = [
        (f"Ray build_mart, {n} node(s) / serving_build", f"{m / local_s:.2f}x", "(reported)", REPORTED)
        for n, m in medians.items()
    ]
    if 2 in medians:
        speedup = medians[1] / medians[2]
        print(f"  1 -> 2 nodes: {speedup:.2f}x faster", flush=True)
        out.append(("Ray build_mart 1 -> 2 nodes", f"{speedup:.2f}x faster", "(reported)", REPORTED))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("extension")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="load,replica,publish,ray")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    ext = str(Path(args.extension).resolve())
    targets = []
    print(
        "== bench_scaleout: beyond one machine (issue 19)"
        + ("; QUICK: correctness only, no target judged" if args.quick else ""),
        flush=True,
    )
    if args.quick:  # the facts it generates go to a temporary directory, not build/bench-data
        import bench_scale

        bench_scale.DATA = Path(tempfile.mkdtemp(prefix="sh-bench-scaleout-"))
        atexit.register(shutil.rmtree, bench_scale.DATA, ignore_errors=True)
    for part in args.only.split(","):
        print(f"-- {part}", flush=True)
        targets += {"load": load, "replica": replica, "publish": publish, "ray": ray}[part](ext, args.quick)
    print("== issue 19 targets", flush=True)
    w = max(len(t[0]) for t in targets)
    for name, measured, target, ok in targets:
        print(f"  {name:<{w}}  {measured:<18} target {target:<36} {verdict(ok, args.quick)}".rstrip(), flush=True)
    if FAILURES:
        print(f"== {len(FAILURES)} wrong answer(s) FAILED: " + "; ".join(FAILURES), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
