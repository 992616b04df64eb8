"""Live serving (issue 9): readers beside writers, serialized writers, and the reconcile outcome.

Every answer is compared with an independent oracle: pure-Python sums over the generated rows.

- Readers (dashboard, OLAP, status, reconcile on separate cursors, i.e. separate DuckDB
  connections) run while a writer thread alternates builds and refreshes between two datasets
  A and B: each answer is exactly A's or B's, and reads complete while a build runs.
- Two concurrent writers both succeed and the last one to finish is what is served.
- serving_reconcile's recorded outcome belongs to the state it checked.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest
from conftest import connect
from support.live_util import BASE_DAY, COMPANIES, status_dict

EPOCH = datetime.date(1970, 1, 1)
DAYS = 60


# --------------------------------------------------------------------------------------------
# Datasets A / B for the concurrency tests (numpy only to generate quickly; the oracle below
# is plain Python over the same values)
# --------------------------------------------------------------------------------------------


class Dataset:
    """order_id -> (company index, day index, revenue), as parallel numpy arrays."""

    def __init__(self, ids, comp, day, rev):
        self.ids, self.comp, self.day, self.rev = ids, comp, day, rev

    def __len__(self):
        return len(self.ids)

    def arrow(self, deleted=None) -> pa.Table:
        cols = {
            "order_id": pa.array(self.ids, pa.int64()),
            "company": pa.array(np.array(COMPANIES, dtype=object)[self.comp]),
            "order_day": pa.array((self.day + (BASE_DAY - EPOCH).days).astype(np.int32), pa.int32()).cast(pa.date32()),
            "revenue": pa.array(self.rev, pa.int64()),
        }
        if deleted is not None:
            cols["deleted"] = pa.array(deleted, pa.bool_())
        return pa.table(cols)

    def oracle(self):
        """(per-company dashboard, fct rows, mart rows) by plain Python sums."""
        cells: dict = defaultdict(int)
        for c, d, r in zip(self.comp.tolist(), self.day.tolist(), self.rev.tolist(), strict=True):
            cells[(COMPANIES[c], BASE_DAY + datetime.timedelta(days=d))] += r
        per: dict = defaultdict(list)
        for (c, d), r in cells.items():
            per[c].append((d, r))
        dash = {c: sorted(per.get(c, []), key=lambda dr: (-dr[1], dr[0])) for c in COMPANIES}
        return dash, len(self), len(cells)


def make_datasets(seed: int, n: int):
    """A, B (= A with 15% revenue corrections, 10% company moves, 5% day moves, 5% deletes,
    5% new orders) and the change sets turning A into B (`ab`) and B into A (`ba`)."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.arange(1, 8 * n, dtype=np.int64), size=n, replace=False)
    comp = rng.integers(0, len(COMPANIES), n)
    day = rng.integers(0, DAYS, n)
    rev = rng.integers(-(10**6), 10**9, n)
    a = Dataset(ids, comp, day, rev)

    perm = rng.permutation(n)
    k = n // 20
    corr, movc, movd, dele = perm[: 3 * k], perm[3 * k : 5 * k], perm[5 * k : 6 * k], perm[6 * k : 7 * k]
    b_comp, b_day, b_rev = comp.copy(), day.copy(), rev.copy()
    b_rev[corr] = rng.integers(-(10**6), 10**9, len(corr))
    b_comp[movc] = (comp[movc] + rng.integers(1, len(COMPANIES), len(movc))) % len(COMPANIES)
    b_day[movd] = (day[movd] + rng.integers(1, DAYS, len(movd))) % DAYS
    keep = np.ones(n, bool)
    keep[dele] = False
    m = k // 2  # new orders, some on days A never had (so the two differ in size too)
    new_ids = np.arange(8 * n, 8 * n + m, dtype=np.int64)
    new_comp, new_day, new_rev = (
        rng.integers(0, len(COMPANIES), m),
        rng.integers(0, DAYS + 5, m),
        rng.integers(-(10**6), 10**9, m),
    )
    b = Dataset(
        np.concatenate([ids[keep], new_ids]),
        np.concatenate([b_comp[keep], new_comp]),
        np.concatenate([b_day[keep], new_day]),
        np.concatenate([b_rev[keep], new_rev]),
    )

    changed = np.concatenate([corr, movc, movd])
    zk, zm = np.zeros(k, np.int64), np.zeros(m, np.int64)
    ab = Dataset(
        np.concatenate([ids[changed], new_ids, ids[dele]]),
        np.concatenate([b_comp[changed], new_comp, zk]),
        np.concatenate([b_day[changed], new_day, zk]),
        np.concatenate([b_rev[changed], new_rev, zk]),
    )
    ab_deleted = np.concatenate([np.zeros(len(changed) + m, bool), np.ones(k, bool)])
    ba = Dataset(
        np.concatenate([ids[changed], ids[dele], new_ids]),
        np.concatenate([comp[changed], comp[dele], zm]),
        np.concatenate([day[changed], day[dele], zm]),
        np.concatenate([rev[changed], rev[dele], zm]),
    )
    ba_deleted = np.concatenate([np.zeros(len(changed) + k, bool), np.ones(m, bool)])
    sizes = {"changed": len(changed), "new": m, "deleted": k}
    return a, b, (ab, ab_deleted), (ba, ba_deleted), sizes


def put_arrow(con, name: str, table: pa.Table) -> None:
    """CREATE TABLE name from an Arrow table (committed: the extension sees committed data)."""
    con.register("__live_tmp", table)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM __live_tmp")
    finally:
        con.unregister("__live_tmp")


@pytest.fixture(scope="module")
def ab_data():
    a, b, ab, ba, sizes = make_datasets(9, 250_000)
    ora, orb = a.oracle(), b.oracle()
    for c in COMPANIES:  # the "A or B, never a mix" check is only meaningful if they differ
        assert ora[0][c] != orb[0][c], c
    assert (ora[1], ora[2]) != (orb[1], orb[2])
    return {"a": a, "b": b, "ab": ab, "ba": ba, "sizes": sizes, "oracle": {"A": ora, "B": orb}}


def load_ab(con, data) -> None:
    put_arrow(con, "a", data["a"].arrow())
    put_arrow(con, "b", data["b"].arrow())
    put_arrow(con, "ab", data["ab"][0].arrow(data["ab"][1]))
    put_arrow(con, "ba", data["ba"][0].arrow(data["ba"][1]))
    # a deleted change row carries no columns (NULLs), like a real tombstone
    for t in ("ab", "ba"):
        con.execute(f"UPDATE {t} SET company = NULL, order_day = NULL, revenue = NULL WHERE deleted")


def served_state(con, oracles: dict) -> str | None:
    """Which oracle ('A'/'B') every company's dashboard AND olap matches, or None."""
    for name, (dash, n_fct, n_mart) in oracles.items():
        if (
            all(con.execute("SELECT * FROM serving_dashboard(?)", [c]).fetchall() == dash[c] for c in COMPANIES)
            and all(con.execute("SELECT * FROM serving_olap(?)", [c]).fetchall() == dash[c] for c in COMPANIES)
            and con.execute("SELECT count(*) FROM fct_orders").fetchone()[0] == n_fct
            and con.execute("SELECT count(*) FROM mart_daily").fetchone()[0] == n_mart
        ):
            return name
    return None


# --------------------------------------------------------------------------------------------
# Readers during builds and refreshes
# --------------------------------------------------------------------------------------------

# Each writer op and the state it leaves: a build of a/b serves A/B; the change set ab applied
# to A or to B gives B (it carries the latest rows of every key that differs), ba gives A.
WRITER_OPS = [
    "refresh ab",
    "refresh ba",
    "build b",
    "refresh ba",
    "build a",
    "refresh ab",
    "build a",
    "build b",
    "refresh ab",
    "refresh ba",
    "build b",
    "build a",
]
STATE_OF = {"a": "A", "b": "B", "ab": "B", "ba": "A"}


@pytest.mark.timeout(120)
def test_readers_never_wait_for_writers_and_see_a_or_b(ab_data):
    con = connect()
    load_ab(con, ab_data)
    oracles = ab_data["oracle"]
    sizes = ab_data["sizes"]
    con.execute("SELECT * FROM serving_build('a')").fetchall()
    assert served_state(con, oracles) == "A"

    stop = threading.Event()
    errors: list = []
    calls: list = []  # (kind, start, end)
    lock = threading.Lock()

    def check_status(s: dict) -> str | None:
        state = STATE_OF[s["source"]] if s["refreshes"] == 0 else STATE_OF[s["refresh_source"]]
        if s["refreshes"] == 0 and s["refresh_source"] is not None:
            return f"refreshes 0 but refresh_source {s['refresh_source']!r}"
        _, n_fct, n_mart = oracles[state]
        if (s["fct_rows"], s["mart_rows"]) != (n_fct, n_mart):
            return f"status mixes states: {s} (state {state} has {n_fct} orders, {n_mart} groups)"
        if s["last_reconcile_clean"] is False:
            return f"a reconcile of a consistent state was recorded as unclean: {s}"
        return None

    def reader(k: int) -> None:
        cur = con.cursor()
        i = k
        try:
            while not stop.is_set():
                i += 1
                company = COMPANIES[i % len(COMPANIES)]
                kind = (
                    "dashboard",
                    "olap",
                    "dashboard",
                    "status",
                    "dashboard",
                    "explain",
                    "dashboard",
                    "reconcile",
                    "dashboard",
                    "olap",
                    "dashboard",
                    "status",
                )[i % 12]
                t0 = time.perf_counter()
                try:
                    if kind == "dashboard":
                        got = cur.execute("SELECT * FROM serving_dashboard(?)", [company]).fetchall()
                    elif kind == "olap":
                        got = cur.execute("SELECT * FROM serving_olap(?)", [company]).fetchall()
                    elif kind == "status":
                        got = status_dict(cur)
                    elif kind == "explain":
                        got = cur.execute(
                            "SELECT string_agg(explain_value, chr(10) ORDER BY line) FROM serving_explain(?)",
                            [company],
                        ).fetchall()
                    else:
                        got = cur.execute("SELECT * FROM serving_reconcile()").fetchall()
                except Exception as e:  # any error during reads is a failure
                    with lock:
                        errors.append(f"{kind}({company!r}) raised {type(e).__name__}: {e}")
                    continue
                t1 = time.perf_counter()
                problem = None
                if kind in ("dashboard", "olap"):
                    if got not in (oracles["A"][0][company], oracles["B"][0][company]):
                        problem = f"{kind}({company!r}) is neither A's nor B's answer: {got[:5]}..."
                elif kind == "status":
                    problem = check_status(got)
                elif kind == "explain":
                    if len(got) != 1 or "mart_daily" not in got[0][0] or "fct_orders" in got[0][0]:
                        problem = f"serving_explain({company!r}) = {got}"
                elif got:
                    problem = f"serving_reconcile() found differences: {got[:5]}"
                with lock:
                    calls.append((kind, t0, t1))
                    if problem:
                        errors.append(problem)
        finally:
            cur.close()

    ops: list = []  # (op, start, end)

    def writer() -> None:
        cur = con.cursor()
        state = "A"
        try:
            for op in WRITER_OPS:
                verb, source = op.split()
                t0 = time.perf_counter()
                if verb == "build":
                    got = cur.execute("SELECT fct_rows, mart_rows FROM serving_build(?)", [source]).fetchone()
                else:
                    got = cur.execute(
                        "SELECT inserted, updated, deleted, ignored_deletes, fct_rows, mart_rows "
                        "FROM serving_refresh(?)",
                        [source],
                    ).fetchone()
                t1 = time.perf_counter()
                new_state = STATE_OF[source]
                _, n_fct, n_mart = oracles[new_state]
                if verb == "refresh":
                    ch, nw, dl = sizes["changed"], sizes["new"], sizes["deleted"]
                    if state == new_state:  # applying a change set to the state it leads to
                        want = (0, ch + nw, 0, dl) if source == "ab" else (0, ch + dl, 0, nw)
                    else:
                        want = (nw, ch, dl, 0) if source == "ab" else (dl, ch, nw, 0)
                    assert got[:4] == want, (op, state, got)
                assert got[-2:] == (n_fct, n_mart), (op, got)
                ops.append((op, t0, t1))
                state = new_state
                time.sleep(0.02)
        except Exception as e:
            errors.append(f"writer {op!r} failed: {type(e).__name__}: {e}")
        finally:
            cur.close()

    readers = [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(3)]
    for t in readers:
        t.start()
    time.sleep(0.1)
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    w.join(90)
    stop.set()
    for t in readers:
        t.join(30)
    assert not w.is_alive(), "the writer hung"
    assert not any(t.is_alive() for t in readers), "a reader hung"
    assert not errors, f"{len(errors)} bad reads, e.g. {errors[:5]}"
    assert len(ops) == len(WRITER_OPS)

    # Reads went through while builds ran: calls that started after a build started and
    # ended before it ended did not wait for it.
    builds = [(t0, t1) for op, t0, t1 in ops if op.startswith("build")]
    inside = [sum(1 for _k, s, e in calls if b0 <= s and e <= b1) for b0, b1 in builds]
    build_durations = sorted(b1 - b0 for b0, b1 in builds)
    dash_lat = sorted(e - s for k, s, e in calls if k == "dashboard")
    stats = (
        f"builds {[round(d, 3) for d in build_durations]} s; reads inside each build {inside}; "
        f"dashboards {len(dash_lat)}, median {dash_lat[len(dash_lat) // 2]:.4f} s, max {dash_lat[-1]:.4f} s"
    )
    print(stats)
    assert sum(inside) >= 3 * len(builds), f"few reads completed during builds: {stats}"
    assert sum(1 for n in inside if n >= 2) >= len(builds) // 2, f"reads blocked during builds: {stats}"
    # A dashboard that waited for a build would take about as long as the build.
    median_build = build_durations[len(build_durations) // 2]
    assert dash_lat[len(dash_lat) // 2] < median_build / 5, stats
    # and not just the typical one: nine in ten stay well under a build (one sample, the max,
    # is at the mercy of the machine's noise)
    assert dash_lat[len(dash_lat) * 9 // 10] < median_build / 2, stats

    # Quiet again: the last writer op decides what is served.
    last_state = STATE_OF[WRITER_OPS[-1].split()[1]]
    assert served_state(con, oracles) == last_state
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    s = status_dict(con)
    assert s["last_reconcile_clean"] is True
    con.close()


# --------------------------------------------------------------------------------------------
# Writers serialize
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_concurrent_writers_serialize_and_the_last_one_wins(ab_data):
    con = connect()
    load_ab(con, ab_data)
    oracles = ab_data["oracle"]
    con.execute("SELECT * FROM serving_build('a')").fetchall()
    pairs = [
        ("build a", "build b"),
        ("build b", "build a"),
        ("build a", "refresh ab"),
        ("refresh ba", "build b"),
        ("build b", "refresh ba"),
    ]
    for pair in pairs:
        barrier = threading.Barrier(2)
        results: dict = {}

        def run(op: str, barrier: threading.Barrier, results: dict) -> None:
            cur = con.cursor()
            verb, source = op.split()
            try:
                barrier.wait(10)
                got = cur.execute(f"SELECT fct_rows, mart_rows FROM serving_{verb}(?)", [source]).fetchone()
                results[op] = ("ok", time.perf_counter(), got)
            except Exception as e:
                results[op] = ("error", time.perf_counter(), f"{type(e).__name__}: {e}")
            finally:
                cur.close()

        threads = [threading.Thread(target=run, args=(op, barrier, results), daemon=True) for op in pair]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), f"{pair}: a writer hung"
        assert all(r[0] == "ok" for r in results.values()), (pair, results)
        for op, (_ok, _t, got) in results.items():  # each committed its own complete state
            assert got == oracles[STATE_OF[op.split()[1]]][1:], (op, got)
        # Serialized: the one that finished last committed last, and is what is served.
        last = max(results, key=lambda op: results[op][1])
        want = STATE_OF[last.split()[1]]
        got = served_state(con, oracles)
        assert got is not None, f"{pair}: the served state is neither A nor B"
        assert got == want, f"{pair}: {last!r} finished last but {got} is served"
        s = status_dict(con)
        assert (s["fct_rows"], s["mart_rows"]) == oracles[want][1:]
        assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    con.close()


# --------------------------------------------------------------------------------------------
# serving_reconcile records the outcome of the state it checked
# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_reconcile_outcome_belongs_to_the_state_it_checked():
    con = connect()
    con.execute(
        "CREATE TABLE src AS SELECT i AS order_id, 'c' || (i % 5) AS company, "
        "DATE '2024-01-01' + (i % 9)::INT AS order_day, i AS revenue FROM range(1000) t(i)"
    )
    # a build that takes a while (hashing in the source view)
    con.execute(
        "CREATE VIEW slow AS SELECT i AS order_id, 'c' || (i % 7) AS company, "
        "DATE '2024-01-01' + (i % 30)::INT AS order_day, "
        "(hash(md5(md5(md5(i::VARCHAR)))) % 1000)::BIGINT AS revenue FROM range(1000000) t(i)"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    assert status_dict(con)["last_reconcile_clean"] is None
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    assert status_dict(con)["last_reconcile_clean"] is True

    # the mart edited behind streamhouse's back: reconcile says so, status records it
    con.execute("UPDATE mart_daily SET revenue = revenue + 1 WHERE company = 'c1' AND order_day = DATE '2024-01-02'")
    diffs = con.execute("SELECT side, company, order_day FROM serving_reconcile() ORDER BY ALL").fetchall()
    assert len(diffs) == 2 and {d[1:] for d in diffs} == {("c1", datetime.date(2024, 1, 2))}, diffs
    s = status_dict(con)
    assert s["last_reconcile_clean"] is False

    # while a build runs: a reconcile still answers (on the last committed, edited state) and
    # status shows its outcome at once
    cur = con.cursor()
    done = threading.Event()
    build_error: list = []

    def build():
        c2 = con.cursor()
        try:
            c2.execute("SELECT * FROM serving_build('slow')").fetchall()
        except Exception as e:
            build_error.append(e)
        finally:
            c2.close()
            done.set()

    th = threading.Thread(target=build, daemon=True)
    th.start()
    time.sleep(0.15)
    t0 = datetime.datetime.now(datetime.UTC)
    started = time.perf_counter()
    diffs = cur.execute("SELECT * FROM serving_reconcile()").fetchall()
    s = status_dict(cur)
    elapsed = time.perf_counter() - started
    busy = not done.is_set()
    assert len(diffs) == 2
    assert s["last_reconcile_clean"] is False and s["source"] == "src"
    assert s["last_reconcile_at"] >= t0 - datetime.timedelta(seconds=1)
    th.join(60)
    assert not th.is_alive() and not build_error, build_error
    # The claim needs the build still running when reconcile and status had answered; a build
    # that had finished by then (or a reconcile that waited for it) shows nothing: inconclusive.
    assert busy, f"inconclusive: the build had ended when reconcile + status returned ({elapsed:.2f} s)"
    assert elapsed < 1.0, f"reconcile + status took {elapsed:.2f} s while a build ran"
    # the new state was never reconciled: the old outcome does not describe it
    s = status_dict(con)
    assert s["source"] == "slow" and s["last_reconcile_clean"] is None and s["last_reconcile_at"] is None
    assert con.execute("SELECT * FROM serving_reconcile()").fetchall() == []
    assert status_dict(con)["last_reconcile_clean"] is True
    cur.close()
    con.close()
