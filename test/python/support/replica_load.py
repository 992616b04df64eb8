"""Replicas at load (issue 19, item 4), shared by live/test_replicas_at_load.py (a short run that
checks behaviour) and bench/bench_scaleout.py (the full minute, with the latency targets).

One primary process builds from a Paimon fact and follows it with `publish :=` a mart table; N
replica processes build from the mart table and follow it; a pypaimon writer (in the driver)
commits `new` new and `corrected` corrected orders every `every_s` seconds. Every commit also
adds one order of the clock company CLOCK, so a replica's `serving_dashboard(CLOCK)` revenue is
the number of fact commits its mart reflects: the first time a replica sees k is when commit k
became visible there. One replica is killed (SIGKILL) mid-run and started again; it must catch
up. At the end every replica must hold the mart of the writer's final state (a pure-Python
oracle), and each replica's first build must equal one whole mart snapshot (never a mix).

Usage as a child: replica_load.py primary|replica JSON-SPEC (the driver starts them)."""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

CLOCK = "zz-clock"
COMPANIES = 40
DAYS = 400
BASE = datetime.date(2024, 1, 1)
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))


def connect(ext: str):
    import duckdb

    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    return con


def stopped(spec: dict) -> bool:
    return Path(spec["stop"]).exists()


def primary(spec: dict) -> None:
    con = connect(spec["ext"])
    con.execute("SELECT * FROM serving_build(?)", ["paimon:" + spec["fact"]]).fetchall()
    con.execute(
        f"SELECT * FROM serving_follow(?, every := INTERVAL '{spec['every_ms']} ms', publish := ?)",
        ["paimon:" + spec["fact"], "paimon:" + spec["mart"]],
    ).fetchall()
    print(json.dumps({"ready": True}), flush=True)
    while not stopped(spec):
        time.sleep(0.05)
    # Not before the last commit is applied and published (the replicas wait for it).
    commits = int(Path(spec["stop"]).read_text())
    deadline = time.time() + spec["settle_s"]
    while time.time() < deadline:
        row = con.execute("SELECT revenue FROM serving_dashboard(?)", [CLOCK]).fetchone()
        published = con.execute("SELECT published_snapshot FROM serving_status()").fetchone()[0]
        latest = con.execute("SELECT max(snapshot_id) FROM paimon_snapshots(?)", [spec["mart"]]).fetchone()[0]
        if row and int(row[0]) >= commits and published is not None and published == latest:
            break
        time.sleep(0.05)
    s = con.execute("SELECT last_error, published_snapshot FROM serving_status()").fetchone()
    con.execute("SELECT * FROM serving_unfollow()").fetchall()
    print(json.dumps({"last_error": s[0], "published_snapshot": s[1]}), flush=True)


def replica(spec: dict) -> None:
    """Builds from the mart table, follows it, and until told to stop: asks the dashboard of a
    random company (timed) and the clock, noting when each clock value is first seen."""
    con = connect(spec["ext"])
    mart = "paimon:" + spec["mart"]
    while not Path(spec["mart"], "snapshot").is_dir():
        time.sleep(0.02)
    built = con.execute("SELECT lake_snapshot FROM serving_build(?)", [mart]).fetchone()[0]
    # The first build is one whole snapshot: the mart served equals that snapshot of the table.
    got = con.execute("SELECT company, order_day, revenue::HUGEINT FROM mart_daily ORDER BY ALL").fetchall()
    snap = con.execute(
        "SELECT company, order_day, revenue::HUGEINT FROM paimon_scan(?, snapshot := ?) ORDER BY ALL",
        [spec["mart"], built],
    ).fetchall()
    con.execute(f"SELECT * FROM serving_follow(?, every := INTERVAL '{spec['every_ms']} ms')", [mart]).fetchall()
    print(json.dumps({"ready": True}), flush=True)
    rng = random.Random(spec["seed"])
    seen: dict = {}
    latencies = []
    clock_q = "SELECT revenue FROM serving_dashboard(?)"
    while not stopped(spec):
        company = f"c{rng.randrange(COMPANIES):02d}"
        t = time.perf_counter()
        con.execute("SELECT * FROM serving_dashboard(?, top := 10)", [company]).fetchall()
        latencies.append((time.perf_counter() - t) * 1000)
        row = con.execute(clock_q, [CLOCK]).fetchone()
        k = int(row[0]) if row else 0
        if k not in seen:
            seen[k] = time.time()
        # ~15 dashboard views a second per replica: steady traffic that leaves the 2-core
        # machine's CPU to the six processes' real work (the clock's resolution is this pause).
        time.sleep(0.05)
    # Caught up: the clock says every commit is in.
    deadline = time.time() + spec["settle_s"]
    while time.time() < deadline:
        row = con.execute(clock_q, [CLOCK]).fetchone()
        k = int(row[0]) if row else 0
        seen.setdefault(k, time.time())
        if k >= int(Path(spec["stop"]).read_text()):
            break
        time.sleep(0.01)
    mart_rows = con.execute("SELECT company, order_day, revenue::VARCHAR FROM mart_daily ORDER BY ALL").fetchall()
    status = con.execute("SELECT mode, last_error FROM serving_status()").fetchone()
    print(
        json.dumps(
            {
                "first_build_whole": got == snap,
                "seen": seen,
                "latencies_ms": latencies,
                "mart": [[c, d.isoformat(), r] for c, d, r in mart_rows],
                "mode": status[0],
                "last_error": status[1],
            }
        ),
        flush=True,
    )


# --- the driver ---------------------------------------------------------------------------------


def order(oid: int, rng: random.Random) -> dict:
    return {
        "order_id": oid,
        "company": f"c{rng.randrange(COMPANIES):02d}",
        "order_day": BASE + datetime.timedelta(days=rng.randrange(DAYS)),
        "revenue": rng.randint(1, 10_000),
    }


def start(role: str, spec: dict) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, __file__, role, json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = p.stdout.readline()
    if not line.strip():
        raise RuntimeError(f"{role} did not start: {p.stderr.read()[-3000:]}")
    return p


def finish(p: subprocess.Popen, timeout: float) -> dict:
    out, err = p.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"a child failed (rc {p.returncode}): {err[-3000:]}")
    return json.loads(lines[-1])


def percentile(values: list, q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))]


def run(
    ext: str,
    work: Path,
    *,
    seconds: float,
    replicas: int = 4,
    initial: int = 20_000,
    new: int = 500,
    corrected: int = 200,
    every_s: float = 0.3,
    every_ms: int = 200,
    kill: bool = True,
) -> dict:
    """Runs the scenario; returns what the checks and the benchmark need."""
    import pyarrow as pa
    from paimon_write import commit, create_table, open_warehouse

    schema = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    catalog = open_warehouse(str(work / "wh"))
    fact = create_table(catalog, "fct_orders", schema, ["order_id"], {"bucket": "4", "merge-engine": "partial-update"})
    rng = random.Random(4)
    state: dict = {}
    rows = [order(i, rng) for i in range(1, initial + 1)]
    for r in rows:
        state[r["order_id"]] = r
    commit(fact, schema, rows)
    spec = {
        "ext": ext,
        "fact": str(work / "wh" / "db.db" / "fct_orders"),
        "mart": str(work / "wh" / "db.db" / "mart_daily"),
        "stop": str(work / "stop"),
        "every_ms": every_ms,
        "settle_s": 60,
    }
    prim = start("primary", spec)
    reps = [start("replica", {**spec, "seed": n}) for n in range(replicas)]
    commit_times: dict = {}
    next_id = initial + 1
    k = 0
    t0 = time.time()
    killed_at = restarted = None
    while time.time() - t0 < seconds:
        tick = time.time()
        k += 1
        batch = []
        for _ in range(new):
            r = order(next_id, rng)
            next_id += 1
            batch.append(r)
        for oid in rng.sample(range(1, next_id - new), corrected):
            r = dict(state[oid])
            r["revenue"] = rng.randint(1, 10_000)
            if rng.random() < 0.3:
                r["order_day"] = BASE + datetime.timedelta(days=rng.randrange(DAYS))
            batch.append(r)
        clock = {"order_id": -k, "company": CLOCK, "order_day": BASE, "revenue": 1}
        batch.append(clock)
        for r in batch:
            state[r["order_id"]] = r
        commit(fact, schema, batch)
        commit_times[k] = time.time()
        if kill and killed_at is None and time.time() - t0 > seconds / 3:
            reps[-1].send_signal(signal.SIGKILL)
            reps[-1].wait()
            killed_at = time.time()
        if kill and killed_at is not None and restarted is None and time.time() - killed_at > seconds / 6:
            reps[-1] = start("replica", {**spec, "seed": replicas - 1})
            restarted = time.time()
        time.sleep(max(0.0, every_s - (time.time() - tick)))
    # The stop file carries the number of commits (written whole, then renamed into place).
    Path(spec["stop"] + ".tmp").write_text(str(k))
    os.replace(spec["stop"] + ".tmp", spec["stop"])
    outs = []
    for p in reps:
        outs.append(finish(p, 180))
    prim_out = finish(prim, 60)
    cells: dict = defaultdict(int)
    for r in state.values():
        cells[(r["company"], r["order_day"].isoformat())] += r["revenue"]
    oracle = sorted([c, d, str(v)] for (c, d), v in cells.items())
    # Freshness: commit k visible on all replicas = the latest first sighting of a value >= k
    # among the replicas that ran the whole time.
    whole = outs[: replicas - 1] if kill else outs
    lags = []
    for i in range(1, k + 1):
        firsts = []
        for o in whole:
            times = [t for v, t in o["seen"].items() if int(v) >= i]
            firsts.append(min(times) if times else float("inf"))
        lags.append((max(firsts) - commit_times[i]) * 1000)
    # Where the time goes: commit k -> the first mart snapshot holding it (the primary's apply
    # and publish), and that snapshot -> visible on every replica (the replicas' applies).
    con = connect(ext)
    published_at: dict = {}
    for sid, millis in con.execute(
        "SELECT snapshot_id, epoch_ms(commit_time) FROM paimon_snapshots(?) ORDER BY snapshot_id", [spec["mart"]]
    ).fetchall():
        row = con.execute(
            "SELECT revenue FROM paimon_scan(?, snapshot := ?) WHERE company = ?", [spec["mart"], sid, CLOCK]
        ).fetchone()
        for i in range(1, (int(row[0]) if row else 0) + 1):
            published_at.setdefault(i, millis / 1000)
    publish_lag = [(published_at[i] - commit_times[i]) * 1000 for i in range(1, k + 1) if i in published_at]
    replica_lag = [
        lags[i - 1] - publish_lag[i - 1] for i in range(1, k + 1) if i in published_at and len(publish_lag) >= i
    ]
    dash = [x for o in outs for x in o["latencies_ms"]]
    return {
        "publish_lag_p50_ms": percentile(publish_lag, 0.5),
        "publish_lag_p99_ms": percentile(publish_lag, 0.99),
        "replica_lag_p50_ms": percentile(replica_lag, 0.5),
        "replica_lag_p99_ms": percentile(replica_lag, 0.99),
        "freshness_first_third_p50_ms": percentile(lags[: k // 3], 0.5),
        "freshness_last_third_p50_ms": percentile(lags[-(k // 3) :], 0.5),
        "commits": k,
        "orders": len(state),
        "groups": len(oracle),
        "oracle": oracle,
        "replicas": outs,
        "primary": prim_out,
        "freshness_ms": lags,
        "freshness_p50_ms": percentile(lags, 0.5),
        "freshness_p99_ms": percentile(lags, 0.99),
        "dashboard_p50_ms": percentile(dash, 0.5),
        "dashboard_p99_ms": percentile(dash, 0.99),
        "dashboard_queries": len(dash),
        "restarted": restarted is not None,
        "median_commit_gap_ms": statistics.median(
            [(commit_times[i + 1] - commit_times[i]) * 1000 for i in range(1, k)] or [0]
        ),
    }


if __name__ == "__main__":
    role, spec = sys.argv[1], json.loads(sys.argv[2])
    {"primary": primary, "replica": replica}[role](spec)
