#!/usr/bin/env python3
"""Fluss benchmarks (part of make bench; issue 40, item 7): serving straight from a real Apache
Fluss 0.9.1 cluster, which this script starts (scripts/fluss_cluster.py: ZooKeeper, coordinator,
one tablet server, the lake tiering service into a Paimon warehouse, in a temp dir) and stops
however it ends. Rows are written with pyfluss (Apache Fluss's Python client), one upsert per row,
flushed in large batches. Medians over repetitions.

  a build      a 1M-order primary-key table (1M new orders, then 10% corrected, 1% deleted: 1.11M
               changes, 4 buckets) built four ways, each checked against the final state computed
               natively: serving_build('fluss://...') by union read once Fluss has tiered all of it
               (the lake snapshot + an empty log tail), serving_build('fluss://...') of the same
               writes into a table without lake tiering (the whole changelog read), serving_build(
               'paimon:<the tiered table>'), and the native build: CREATE TABLE AS SELECT + GROUP BY
               of the same final rows from a Parquet file. (reported: ratios, no target)
  b freshness  a writer (a subprocess, pyfluss) sends 500 new + 200 corrected orders + 20 deletes per
               second for 60 s, in batches every 100 ms, each acknowledged (flush returned), to a
               table of 100k orders that DuckDB follows (serving_follow every 100 ms). Each batch's
               first new order is a probe (company '__probe', its own day); another connection polls
               serving_dashboard('__probe') every 5 ms: ack -> the probe's day in the dashboard.
               A third connection reads serving_dashboard(company) every 10 ms. Targets: ack ->
               visible p99 <= 1 s (stretch 0.5 s, reported), dashboard p99 <= 50 ms. At the end the
               layer must equal the writer's own record of what it wrote (last value per order).
  c apply      k = 1k and 10k changes (half new orders, 40% corrections, 10% deletes) written in one
               flush while the follower runs every 10 ms: ack -> applied (serving_status().
               fluss_offset reaches the log end), per 1k changes, vs serving_refresh of the same
               changes from a DuckDB table on a layer built natively from the same state. The two
               layers must be identical at the end. (reported)

Each target's line ends in its verdict, PASS or MISSED; a wrong answer prints FAILED and the script
exits 1 (bench/summary.py gathers them).

usage: bench_fluss.py <extension> [--quick]   (--quick: correctness only, 5k orders, 5 s of stream,
one repetition of 100 changes, no target judged: `make test` runs it so the script cannot rot)
"""

import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from bench_live import Reader, lat, pct

import bench
from bench import native_build_sql, verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import fluss_cluster as cluster
from pyfluss_session import Fluss

QUICK = False
FAILURES: list[str] = []
DATABASE, BUCKETS = "bench", 4
SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
DAY0 = datetime.date(2026, 1, 1)
PROBE, PROBE_DAY0 = "__probe", datetime.date(2030, 1, 1)
# b: per batch of the writer (every TICK s): 500 new + 200 corrected + 20 deleted per second.
TICK, NEW, CORRECTED, DELETED = 0.1, 50, 20, 2
FRESH_P99_S, FRESH_STRETCH_S, DASH_P99_MS = 1.0, 0.5, 50.0
# The generator of a's table and b's initial orders, in DuckDB SQL over i.
ORDER_SQL = """SELECT i AS order_id, 'company_' || (hash(i) % 50) AS company,
       DATE '2026-01-01' + CAST(hash(i * 7) % 365 AS INTEGER) AS order_day,
       CAST(hash(i * 13) % 100000 AS BIGINT) - 5000 AS revenue FROM range({first}, {last}) t(i)"""
CORRECTION_SQL = """SELECT i AS order_id, 'company_' || (hash(i) % 50) AS company,
       DATE '2026-01-01' + CAST(hash(i * 11) % 365 AS INTEGER) AS order_day,
       CAST(hash(i * 17) % 100000 AS BIGINT) AS revenue FROM range({n}) t(i) WHERE hash(i * 3) % 10 = 0"""
DELETED_SQL = "SELECT i AS order_id FROM range({n}) t(i) WHERE hash(i * 5) % 100 = 0"
FINGERPRINT = "SELECT count(*), sum(hash(order_id, company, order_day, revenue))::HUGEINT FROM {}"
MART = (
    "SELECT company, order_day, CAST(SUM(revenue) AS HUGEINT) AS revenue FROM {} GROUP BY ALL "
    "ORDER BY company, order_day"
)


def fail(message: str) -> None:
    FAILURES.append(message)
    print(f"   FAILED: {message}", flush=True)


def load() -> str:
    return f"load average {os.getloadavg()[0]:.1f}"


def median_of(fn, runs: int) -> tuple[float, list]:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), times


def ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms" if x >= 0.1 else f"{x * 1e3:.1f} ms"


def rows_of(table: pa.Table) -> list:
    """Arrow rows as tuples in the table's column order (what pyfluss's upsert takes)."""
    return list(zip(*(c.to_pylist() for c in table.columns), strict=True))


def extension(ext: str):
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    return con


def same_layer(con, truth, truth_table: str, what: str) -> bool:
    """fct_orders and mart_daily of `con` equal `truth_table` of the native connection `truth` and
    its aggregate; a difference is a FAILED line."""
    fct = con.execute(FINGERPRINT.format("fct_orders")).fetchall()[0]
    want = truth.execute(FINGERPRINT.format(truth_table)).fetchall()[0]
    mart = con.execute("SELECT company, order_day, revenue FROM mart_daily ORDER BY company, order_day").fetchall()
    want_mart = truth.execute(MART.format(truth_table)).fetchall()
    if fct != want or mart != want_mart:
        fail(f"{what}: the layer differs from the oracle (fct_orders {fct} vs {want}, mart equal: {mart == want_mart})")
        return False
    return True


# ----------------------------------------------------------------------------- a build


def bench_build(ext: str, fluss: Fluss, state: dict, root: Path, orders: int, runs: int) -> None:
    print(f"\na. build from Fluss: {orders:,} orders, {BUCKETS} buckets; {load()}", flush=True)
    truth = duckdb.connect()
    truth.execute(f"CREATE TABLE orders AS {ORDER_SQL.format(first=0, last=orders)}")
    truth.execute(f"CREATE TABLE corrections AS {CORRECTION_SQL.format(n=orders)}")
    truth.execute(f"CREATE TABLE deletions AS {DELETED_SQL.format(n=orders)}")
    truth.execute("""CREATE TABLE final AS
        SELECT * FROM (SELECT * FROM orders WHERE order_id NOT IN (SELECT order_id FROM corrections)
                       UNION ALL SELECT * FROM corrections)
        WHERE order_id NOT IN (SELECT order_id FROM deletions)""")
    parquet = root / "final.parquet"
    truth.execute(f"COPY final TO '{parquet}' (FORMAT parquet)")
    changes = [("upsert", r) for r in rows_of(truth.sql("FROM orders").to_arrow_table())]
    changes += [("upsert", r) for r in rows_of(truth.sql("FROM corrections").to_arrow_table())]
    changes += [("delete", oid) for (oid,) in truth.execute("FROM deletions").fetchall()]
    final_rows = truth.execute("SELECT count(*) FROM final").fetchall()[0][0]

    tiered = fluss.create_table(DATABASE, "orders", SCHEMA, ["order_id"], BUCKETS, lake=True)
    log_only = fluss.create_table(DATABASE, "orders_log", SCHEMA, ["order_id"], BUCKETS, lake=False)
    for path in (tiered, log_only):
        t = time.perf_counter()
        fluss.write(fluss.upserter(path), changes)
        seconds = time.perf_counter() - t
        print(
            f"   pyfluss wrote {len(changes):,} changes to {path} in {seconds:.1f} s ({len(changes) / seconds:,.0f}/s)",
            flush=True,
        )
    t = time.perf_counter()
    snapshot = fluss.wait_tiered(tiered, BUCKETS, within=600)
    print(
        f"   Fluss's tiering reached every bucket's log end (lake snapshot {snapshot}) "
        f"{time.perf_counter() - t:.1f} s later"
    )

    boot, warehouse = state["bootstrap"], state["warehouse"]
    con = extension(ext)
    sources = {
        "union read, all tiered": (f"fluss://{boot}/{DATABASE}.orders", [warehouse]),
        "union read, no lake (changelog only)": (f"fluss://{boot}/{DATABASE}.orders_log", []),
        "paimon: the tiered table": (f"paimon:{warehouse}/{DATABASE}.db/orders", []),
    }
    times = {}
    for what, (source, lake) in sources.items():
        sql = "SELECT fct_rows, lake_snapshot FROM serving_build(?" + (", lake := ?" if lake else "") + ")"
        got: list = []

        def build(sql=sql, source=source, lake=lake, got=got):
            got.append(con.execute(sql, [source, *lake]).fetchall()[0])

        times[what], samples = median_of(build, runs)
        ok = same_layer(con, truth, "final", what) and got[-1][0] == final_rows
        print(
            f"   {what:<38} {ms(times[what]):>9}  (runs {', '.join(ms(s) for s in samples)}; lake snapshot "
            f"{got[-1][1]}){'  == oracle' if ok else ''}",
            flush=True,
        )
    native = duckdb.connect()
    native.execute(f"CREATE VIEW src AS SELECT * FROM read_parquet('{parquet}')")
    times["native"], samples = median_of(lambda: native.execute(native_build_sql("fct", "mart")), runs)
    same = (
        native.execute(FINGERPRINT.format("fct")).fetchall()[0]
        == truth.execute(FINGERPRINT.format("final")).fetchall()[0]
    )
    if not same:
        fail("the native build differs from the oracle")
    print(
        f"   {'native: CTAS + GROUP BY from Parquet':<38} {ms(times['native']):>9}  (runs "
        f"{', '.join(ms(s) for s in samples)})",
        flush=True,
    )
    union, log, paimon, base = (times[k] for k in [*sources, "native"])
    print(
        f"   ratios (reported): union read / paimon {union / paimon:.2f}x, union read / native {union / base:.2f}x, "
        f"changelog-only / union read {log / union:.2f}x, paimon / native {paimon / base:.2f}x",
        flush=True,
    )
    con.close()


# ----------------------------------------------------------------------------- b freshness


def writer_main(bootstrap: str, table: str, seconds: float, initial: int, out: str) -> None:
    """The freshness writer (a subprocess): a batch every TICK s for `seconds`; one JSON line per
    acknowledged batch on stdout; every change it made written to `out` (JSON lines) at the end."""
    rng = random.Random(40)
    live = list(range(initial))  # correctable and deletable orders (probes excluded)
    where = {oid: i for i, oid in enumerate(live)}
    next_id, log = initial, []

    def drop(oid: int) -> None:
        i = where.pop(oid)
        last = live.pop()
        if last != oid:
            live[i], where[last] = last, i

    def order(oid: int) -> tuple:
        return (
            oid,
            f"company_{rng.randrange(50)}",
            DAY0 + datetime.timedelta(days=rng.randrange(365)),
            rng.randrange(100_000) - 5000,
        )

    import fluss

    with Fluss(bootstrap) as client:
        upserter = client.upserter(fluss.TablePath(DATABASE, table))
        began, tick = time.monotonic(), 0
        while time.monotonic() - began < seconds:
            changes = [("upsert", (next_id, PROBE, PROBE_DAY0 + datetime.timedelta(days=tick), 1))]
            next_id += 1
            for _ in range(NEW - 1):
                changes.append(("upsert", order(next_id)))
                live.append(next_id)
                where[next_id] = len(live) - 1
                next_id += 1
            for oid in rng.sample(live, CORRECTED):
                changes.append(("upsert", order(oid)))
            for oid in rng.sample(live, DELETED):
                if oid not in {v[0] for k, v in changes if k == "upsert"}:
                    drop(oid)
                    changes.append(("delete", oid))
            acked = client.write(upserter, changes)
            print(json.dumps({"tick": tick, "acked": acked}), flush=True)
            log.extend(changes)
            tick += 1
            time.sleep(max(0.0, began + tick * TICK - time.monotonic()))
    with open(out, "w") as f:
        for kind, value in log:
            oid, company, day, revenue = (value, None, None, None) if kind == "delete" else value
            day = day and day.isoformat()
            record = {"kind": kind, "order_id": oid, "company": company, "order_day": day, "revenue": revenue}
            f.write(json.dumps(record) + "\n")


def bench_freshness(ext: str, fluss: Fluss, state: dict, root: Path, initial: int, seconds: float):
    print(
        f"\nb. freshness: {NEW * 10} new + {CORRECTED * 10} corrected + {DELETED * 10} deleted orders per second for "
        f"{seconds:.0f} s onto {initial:,} orders; serving_follow every 100 ms; {load()}",
        flush=True,
    )
    truth = duckdb.connect()
    truth.execute(f"CREATE TABLE initial AS {ORDER_SQL.format(first=0, last=initial)}")
    path = fluss.create_table(DATABASE, "live", SCHEMA, ["order_id"], BUCKETS, lake=True)
    fluss.write(fluss.upserter(path), [("upsert", r) for r in rows_of(truth.sql("FROM initial").to_arrow_table())])
    source = f"fluss://{state['bootstrap']}/{DATABASE}.live"
    con = extension(ext)
    built = con.execute("SELECT fct_rows, elapsed_ms FROM serving_build(?, lake := ?)", [source, state["warehouse"]])
    print(f"   built {built.fetchall()[0]} (orders, ms) by union read", flush=True)
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '100 ms')", [source]).fetchall()

    seen: dict[datetime.date, float] = {}
    probe_samples, stop, errors = [], threading.Event(), []

    def poll_probes():
        cur = con.cursor()
        while not stop.is_set():
            t = time.monotonic()
            try:
                rows = cur.execute("SELECT order_day FROM serving_dashboard(?)", [PROBE]).fetchall()
            except duckdb.Error as e:
                errors.append(str(e))
                rows = []
            done = time.monotonic()
            probe_samples.append(done - t)
            for (day,) in rows:
                seen.setdefault(day, done)
            time.sleep(max(0.0, 0.005 - (time.monotonic() - t)))
        cur.close()

    poller = threading.Thread(target=poll_probes, daemon=True)
    dash = Reader(con, "SELECT * FROM serving_dashboard($1)", pace=0.01)
    poller.start()
    dash.start()
    out = root / "writer.jsonl"
    writer = subprocess.Popen(
        [sys.executable, __file__, "--writer", state["bootstrap"], "live", str(seconds), str(initial), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acks = [json.loads(line) for line in writer.stdout]
    if writer.wait() != 0:
        fail(f"the writer exited with {writer.returncode}")
    ends = sum(fluss.end_offsets(path, BUCKETS).values())
    deadline = time.monotonic() + 60
    status = con.cursor()
    while status.execute("SELECT fluss_offset FROM serving_status()").fetchall()[0][0] != ends:
        if time.monotonic() > deadline:
            fail(f"the follower did not reach the log end {ends} within 60 s")
            break
        time.sleep(0.05)
    time.sleep(0.1)
    stop.set()
    poller.join()
    dash.finish()
    st = status.execute(
        "SELECT state, fluss_offset, lag_records, refreshes, last_error FROM serving_status()"
    ).fetchall()
    status.close()
    con.execute("SELECT * FROM serving_unfollow()").fetchall()

    fresh, never = [], 0
    for a in acks:
        day = PROBE_DAY0 + datetime.timedelta(days=a["tick"])
        if day in seen:
            fresh.append(max(0.0, seen[day] - a["acked"]))
        else:
            never += 1
    f, d, p = lat(fresh), lat([e - s for s, e in dash.samples]), lat(probe_samples)
    print(
        f"   {len(acks)} batches acknowledged; follower: {st[0][3]} refreshes, state {st[0][0]}, fluss_offset "
        f"{st[0][1]}, lag_records {st[0][2]}, last_error {st[0][4]!r}"
    )
    third = max(1, len(fresh) // 3)
    print(
        f"   ack -> visible in serving_dashboard: p50 {ms(f['p50'])}, p99 {ms(f['p99'])}, max {ms(f['max'])} "
        f"({f['n']} probes{f', {never} NEVER VISIBLE' if never else ''}); by third of the run (p50 / p99): "
        + ", ".join(
            f"{ms(pct(fresh[k : k + third], 50))} / {ms(pct(fresh[k : k + third], 99))}"
            for k in range(0, third * 3, third)
        )
    )
    print(
        f"   ack -> visible p99 {f['p99']:.3f} s (target <= {FRESH_P99_S} s: {verdict(f['p99'] <= FRESH_P99_S)}; "
        f"stretch <= {FRESH_STRETCH_S} s: {'met' if f['p99'] <= FRESH_STRETCH_S else 'not met'})"
    )
    print(
        f"   dashboard every 10 ms meanwhile: p50 {ms(d['p50'])}, p99 {ms(d['p99'])}, max {ms(d['max'])} ({d['n']} "
        f"reads; the probe poll p99 {ms(p['p99'])}) (target p99 <= {DASH_P99_MS:.0f} ms: "
        f"{verdict(d['p99'] * 1e3 <= DASH_P99_MS)})",
        flush=True,
    )
    if never:
        fail(f"{never} acknowledged probes never became visible")
    if errors or dash.errors:
        fail(f"dashboards failed while following: {(errors + dash.errors)[0]}")
    truth.execute(
        "CREATE TABLE changes (kind VARCHAR, order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT)"
    )
    truth.execute(
        f"INSERT INTO changes SELECT * FROM read_json('{out}', format = 'newline_delimited', columns = "
        "{kind: 'VARCHAR', order_id: 'BIGINT', company: 'VARCHAR', order_day: 'DATE', revenue: 'BIGINT'})"
    )
    # The oracle: the last upsert of each order (initial orders first), deleted orders removed.
    truth.execute("""CREATE TABLE final AS
        WITH seq AS (SELECT *, 0 AS n FROM initial UNION ALL
                     SELECT order_id, company, order_day, revenue, rowid + 1 FROM changes WHERE kind = 'upsert')
        SELECT order_id, company, order_day, revenue FROM seq
        WHERE order_id NOT IN (SELECT order_id FROM changes WHERE kind = 'delete')
        QUALIFY row_number() OVER (PARTITION BY order_id ORDER BY n DESC) = 1""")
    if same_layer(con, truth, "final", "the followed layer"):
        print("   the followed layer == the writer's record (last value per order, then the rollup)", flush=True)
    return con, truth, path, source


# ----------------------------------------------------------------------------- c apply


def bench_apply(ext: str, fluss: Fluss, con, truth, path, source: str, sizes, runs: int) -> None:
    print(f"\nc. apply cost: k changes in one flush, follower every 10 ms; {load()}", flush=True)
    base = extension(ext)
    base.register("final_rows", truth.sql("FROM final").to_arrow_table())
    base.execute("CREATE TABLE src AS FROM final_rows")
    base.execute("SELECT * FROM serving_build('src')").fetchall()
    con.execute("SELECT * FROM serving_follow(?, every := INTERVAL '10 ms')", [source]).fetchall()
    live = [oid for (oid,) in truth.execute("SELECT order_id FROM final WHERE company <> ?", [PROBE]).fetchall()]
    rng, next_id = random.Random(41), 10**9
    reader = con.cursor()
    for k in sizes:
        fluss_s, local_s, ticks_used = [], [], []
        for _ in range(runs):
            new = [
                (next_id + i, f"company_{rng.randrange(50)}", DAY0 + datetime.timedelta(days=rng.randrange(365)), 7)
                for i in range(k // 2)
            ]
            next_id += k // 2
            picked = rng.sample(live, k // 2)
            corrected = [
                (oid, f"company_{rng.randrange(50)}", DAY0 + datetime.timedelta(days=rng.randrange(365)), 9)
                for oid in picked[: k * 2 // 5]
            ]
            deleted = picked[k * 2 // 5 :]
            gone = set(deleted)
            live = [oid for oid in live if oid not in gone] + [r[0] for r in new]
            # The same changes through serving_refresh of a DuckDB table first: its result is the oracle
            # the followed layer must reach.
            rows = [(*r, False) for r in new + corrected] + [(o, None, None, None, True) for o in deleted]
            names = [*SCHEMA.names, "deleted"]
            columns = zip(*rows, strict=True)
            base.register("change_rows", pa.table({n: list(c) for n, c in zip(names, columns, strict=True)}))
            base.execute(
                "CREATE OR REPLACE TABLE changes AS SELECT order_id::BIGINT AS order_id, company::VARCHAR AS company, "
                "order_day::DATE AS order_day, revenue::BIGINT AS revenue, deleted FROM change_rows"
            )
            base.unregister("change_rows")
            t = time.perf_counter()
            base.execute("SELECT * FROM serving_refresh('changes')").fetchall()
            local_s.append(time.perf_counter() - t)
            want = base.execute(FINGERPRINT.format("fct_orders")).fetchall()[0]
            ticks = reader.execute("SELECT refreshes FROM serving_status()").fetchall()[0][0]
            acked = fluss.write(
                fluss.upserter(path), [("upsert", r) for r in new + corrected] + [("delete", o) for o in deleted]
            )
            # Applied: the followed fct_orders holds exactly the refreshed one's rows (a local query, so
            # the wait asks nothing of the cluster).
            while reader.execute(FINGERPRINT.format("fct_orders")).fetchall()[0] != want:
                if time.monotonic() - acked > 60:
                    fail(f"{k} changes were not applied within 60 s")
                    break
                time.sleep(0.002)
            fluss_s.append(time.monotonic() - acked)
            ticks = reader.execute("SELECT refreshes FROM serving_status()").fetchall()[0][0] - ticks
            ticks_used.append(ticks)
        f, loc = statistics.median(fluss_s), statistics.median(local_s)
        print(
            f"   {k:>6,} changes: ack -> applied {ms(f)} ({ms(f / (k / 1000))} per 1k changes; runs "
            f"{', '.join(ms(x) for x in fluss_s)}, in {'/'.join(map(str, ticks_used))} follower applies); "
            f"serving_refresh of the same changes from a DuckDB table {ms(loc)} ({ms(loc / (k / 1000))} per 1k): "
            f"{f / loc:.1f}x (reported)",
            flush=True,
        )
    reader.close()
    con.execute("SELECT * FROM serving_unfollow()").fetchall()
    fct = con.execute(FINGERPRINT.format("fct_orders")).fetchall()[0]
    want = base.execute(FINGERPRINT.format("fct_orders")).fetchall()[0]
    mart = con.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall()
    if fct != want or mart != base.execute("SELECT * FROM mart_daily ORDER BY ALL").fetchall():
        fail(f"the followed layer and the natively refreshed one differ ({fct} vs {want})")
    else:
        print("   the followed layer == the layer refreshed from DuckDB tables (fct_orders, mart_daily)", flush=True)


def main() -> int:
    global QUICK
    if sys.argv[1:2] == ["--writer"]:
        bootstrap, table, seconds, initial, out = sys.argv[2:7]
        writer_main(bootstrap, table, float(seconds), int(initial), out)
        return 0
    args = [a for a in sys.argv[1:] if a != "--quick"]
    if len(args) != 1:
        sys.exit(__doc__)
    QUICK = bench.QUICK = "--quick" in sys.argv[1:]  # bench.verdict judges nothing in a --quick run
    ext = str(Path(args[0]).resolve())
    print(
        f"bench_fluss: duckdb {duckdb.__version__}, {os.cpu_count()} cores, "
        f"{'QUICK: correctness only, no target judged' if QUICK else 'full run'}; {load()}",
        flush=True,
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sh-fluss-bench-") as tmp:
        root = Path(tmp)
        with (
            cluster.running(root / "cluster", say=lambda m: print("   " + m, flush=True)) as state,
            Fluss(state["bootstrap"]) as fluss,
        ):
            bench_build(ext, fluss, state, root, 5_000 if QUICK else 1_000_000, 1 if QUICK else 3)
            con, truth, path, source = bench_freshness(
                ext, fluss, state, root, 2_000 if QUICK else 100_000, 5 if QUICK else 60
            )
            bench_apply(ext, fluss, con, truth, path, source, (100,) if QUICK else (1_000, 10_000), 1 if QUICK else 3)
            con.close()
    print(f"\n(bench_fluss total {time.perf_counter() - started:.0f} s; {load()})")
    if FAILURES:
        print("\nCORRECTNESS FAILURES (FAILED):\n  " + "\n  ".join(FAILURES))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
