"""paimon_scan / paimon_changelog / paimon_snapshots and lake-sourced serving builds, on real
Paimon tables written by pypaimon, compared with pypaimon's own read and with pure-Python
oracles of each merge engine."""

from __future__ import annotations

import datetime
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from conftest import connect
from support.lake_util import (
    ORDERS,
    Warehouse,
    apply_changelog,
    canon,
    oracle_aggregation,
    oracle_deduplicate,
    oracle_first_row,
    oracle_partial_update,
    oracle_sequence,
)

ID_BAL = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32())])


def scan(con, path, **named):
    extra = "".join(f", {k} := {int(v)}" for k, v in named.items())
    cur = con.execute(f"SELECT * FROM paimon_scan($1{extra})", [path])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.fixture
def wh(tmp_path):
    return Warehouse(tmp_path / "warehouse")


@pytest.fixture
def con():
    return connect()


def random_upserts(rng, commits=5, keys=40, per_commit=25, deletes=True):
    out = []
    for _ in range(commits):
        rows, used = [], set()
        for _ in range(per_commit):
            k = rng.randrange(keys)
            if k in used:  # one write per key per commit keeps "order inside a commit" out of it
                continue
            used.add(k)
            if deletes and rng.random() < 0.15:
                rows.append({"id": k, "bal": 0, "op": "-D"})
            else:
                rows.append({"id": k, "bal": rng.randint(-1000, 1000), "op": "+U"})
        out.append(rows)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_deduplicate_with_deletes_equals_pypaimon_and_oracle(wh, con, seed):
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("bal", pa.int32()), ("op", pa.string())])
    t = wh.create(
        "dedup",
        schema,
        ["id"],
        {"bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input", "rowkind.field": "op"},
    )
    for rows in random_upserts(random.Random(seed)):
        t.commit(rows)
    ours = canon(scan(con, wh.path("dedup")), ["id", "bal"])
    assert ours == canon(t.read(), ["id", "bal"])
    assert ours == canon(oracle_deduplicate(t.commits), ["id", "bal"])


def test_partial_update_null_never_overwrites(wh, con):
    schema = pa.schema(
        [pa.field("id", pa.int32(), nullable=False), ("a", pa.int32()), ("b", pa.string()), ("c", pa.int64())]
    )
    t = wh.create("pu", schema, ["id"], {"bucket": "1", "merge-engine": "partial-update"})
    rng = random.Random(5)
    for _ in range(5):
        t.commit(
            [
                {
                    "id": k,
                    "a": rng.choice([None, rng.randint(0, 9)]),
                    "b": rng.choice([None, "x", "y"]),
                    "c": rng.choice([None, rng.randint(-5, 5)]),
                }
                for k in rng.sample(range(30), 20)
            ]
        )
    cols = ["id", "a", "b", "c"]
    ours = canon(scan(con, wh.path("pu")), cols)
    assert ours == canon(t.read(), cols)
    assert ours == canon(oracle_partial_update(t.commits), cols)


def test_aggregation_engine(wh, con):
    schema = pa.schema(
        [pa.field("id", pa.int32(), nullable=False), ("total", pa.int64()), ("mx", pa.int32()), ("last", pa.string())]
    )
    t = wh.create(
        "agg",
        schema,
        ["id"],
        {
            "bucket": "1",
            "merge-engine": "aggregation",
            "fields.total.aggregate-function": "sum",
            "fields.mx.aggregate-function": "max",
        },
    )
    rng = random.Random(9)
    for _ in range(4):
        t.commit(
            [
                {"id": k, "total": rng.randint(-50, 50), "mx": rng.randint(0, 100), "last": rng.choice("abc")}
                for k in rng.sample(range(25), 15)
            ]
        )
    cols = ["id", "total", "mx", "last"]
    ours = canon(scan(con, wh.path("agg")), cols)
    assert ours == canon(t.read(), cols)
    assert ours == canon(oracle_aggregation(t.commits, {"total": "sum", "mx": "max"}), cols)


def test_first_row_keeps_the_earliest_write(wh, con):
    t = wh.create("fr", ID_BAL, ["id"], {"bucket": "1", "merge-engine": "first-row"})
    rng = random.Random(3)
    for _ in range(4):
        t.commit([{"id": k, "bal": rng.randint(0, 99)} for k in rng.sample(range(20), 12)])
    # pypaimon (like Java Paimon) hides never-compacted level-0 files from a first-row batch
    # read; paimon_scan reads every file, so it is compared with the oracle only.
    assert canon(scan(con, wh.path("fr")), ["id", "bal"]) == canon(oracle_first_row(t.commits), ["id", "bal"])


def test_sequence_field_orders_writes(wh, con):
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.int32()), ("ts", pa.int64())])
    t = wh.create("seq", schema, ["id"], {"bucket": "1", "merge-engine": "deduplicate", "sequence.field": "ts"})
    rng = random.Random(11)
    for _ in range(5):
        t.commit([{"id": k, "v": rng.randint(0, 999), "ts": rng.randint(0, 10_000)} for k in rng.sample(range(15), 10)])
    cols = ["id", "v", "ts"]
    ours = canon(scan(con, wh.path("seq")), cols)
    assert ours == canon(t.read(), cols)
    assert ours == canon(oracle_sequence(t.commits, "ts"), cols)


def test_time_travel_and_snapshots(wh, con):
    t = wh.create("tt", ID_BAL, ["id"], {"bucket": "1", "merge-engine": "deduplicate"})
    rng = random.Random(2)
    for _ in range(4):
        t.commit([{"id": k, "bal": rng.randint(0, 99)} for k in rng.sample(range(10), 6)])
    for n in range(1, 5):
        got = canon(scan(con, wh.path("tt"), snapshot=n), ["id", "bal"])
        assert got == canon(oracle_deduplicate(t.commits[:n], kind="_none"), ["id", "bal"]), n
    snaps = con.execute(
        "SELECT snapshot_id, commit_kind, commit_time <= now()::TIMESTAMP + INTERVAL 1 DAY "
        "FROM paimon_snapshots($1) ORDER BY 1",
        [wh.path("tt")],
    ).fetchall()
    assert [s[0] for s in snaps] == [1, 2, 3, 4]
    assert {s[1] for s in snaps} == {"APPEND"} and all(s[2] for s in snaps)
    with pytest.raises(duckdb.Error, match="snapshot 9 does not exist"):
        scan(con, wh.path("tt"), snapshot=9)


@pytest.mark.parametrize("hint", ["90", "3"])
def test_a_latest_hint_naming_a_missing_snapshot_is_not_trusted(wh, con, hint):
    """pypaimon overwrites snapshot/LATEST in place on a local file system; a torn or stale
    number there (a snapshot that does not exist, with no snapshot after it) must not become
    the table's latest snapshot: the snapshot directory is listed instead."""
    t = wh.create("hint", ID_BAL, ["id"], {"bucket": "1", "merge-engine": "deduplicate"})
    t.commit([{"id": 1, "bal": 10}])
    t.commit([{"id": 1, "bal": 20}, {"id": 2, "bal": 5}])
    snapshots = Path(wh.path("hint")) / "snapshot"
    assert sorted(int(p.name.split("-")[1]) for p in snapshots.glob("snapshot-*")) == [1, 2]
    # "3" is one past the last snapshot (no snapshot-4 either); "90" a torn write.
    (snapshots / "LATEST").write_text(hint)
    expected = canon(oracle_deduplicate(t.commits, kind="_none"), ["id", "bal"])
    assert canon(scan(con, wh.path("hint")), ["id", "bal"]) == expected
    with pytest.raises(duckdb.Error, match=r"snapshot 3 does not exist \(latest is 2\)"):
        scan(con, wh.path("hint"), snapshot=3)


def changelog(con, path, **named):
    extra = "".join(f", {k} := {int(v)}" for k, v in named.items())
    return con.execute(f"SELECT * FROM paimon_changelog($1{extra}) ", [path]).fetchall()


def test_tier_ddl_table_stream_equals_batch(wh, con):
    """Seed 002's invariant on the real format: a table with exactly paimon_tier_ddl's options;
    the bounded stream replayed in order equals the batch read, and both equal the oracle."""
    ddl = con.execute("SELECT paimon_tier_ddl('db.tier')").fetchone()[0]
    options = dict(
        kv.split(" = ")
        for kv in (line.strip().rstrip(",") for line in ddl.split("WITH (")[1].splitlines())
        if " = " in kv
    )
    options = {k.strip("'"): v.strip("'") for k, v in options.items()}
    assert options == {"bucket": "1", "merge-engine": "deduplicate", "changelog-producer": "input"}
    t = wh.create("tier", ID_BAL, ["id"], options)
    rng = random.Random(17)
    upserts = [(rng.randrange(12), rng.randint(-100, 100)) for _ in range(80)]
    for i in range(0, len(upserts), 16):
        t.commit([{"id": k, "bal": v} for k, v in dict(upserts[i : i + 16]).items()])
    latest_per_id = sorted(dict(upserts).items())
    stream = changelog(con, wh.path("tier"))
    assert [r[0] for r in stream] == sorted(r[0] for r in stream), "changes are in commit order"
    replayed = apply_changelog([r[1:] for r in stream], key_index=0)
    batch = canon(scan(con, wh.path("tier")), ["id", "bal"])
    assert replayed == batch == latest_per_id


def test_invariant_fails_where_paimon_says_it_must(wh, con):
    """partial-update with changelog-producer=input streams the partial rows as written, so the
    replayed stream differs from the merged batch; an append-only table keeps every version, so
    its batch read is not the latest state per key. The test can tell the difference."""
    schema = pa.schema([pa.field("id", pa.int32(), nullable=False), ("a", pa.int32()), ("b", pa.int32())])
    t = wh.create(
        "pu_input", schema, ["id"], {"bucket": "1", "merge-engine": "partial-update", "changelog-producer": "input"}
    )
    t.commit([{"id": 1, "a": 1, "b": None}, {"id": 2, "a": 2, "b": 20}])
    t.commit([{"id": 1, "a": None, "b": 10}])
    replayed = apply_changelog([r[1:] for r in changelog(con, wh.path("pu_input"))], key_index=0)
    batch = canon(scan(con, wh.path("pu_input")), ["id", "a", "b"])
    assert batch == [(1, 1, 10), (2, 2, 20)]
    assert replayed != batch

    a = wh.create("append_only", ID_BAL, None, {"bucket": "-1"})
    a.commit([{"id": 1, "bal": 1}, {"id": 2, "bal": 2}])
    a.commit([{"id": 1, "bal": 5}])
    rows = canon(scan(con, wh.path("append_only")), ["id", "bal"])
    assert rows == [(1, 1), (1, 5), (2, 2)]
    assert rows != sorted({1: 5, 2: 2}.items())


# What the mart table's columns read as in pypaimon-rust's schema.
MART_FIELDS = [
    ("company", "STRING NOT NULL"),
    ("order_day", "DATE NOT NULL"),
    ("revenue", "DECIMAL(38, 0)"),
    ("orders", "BIGINT"),
]


def test_tier_ddl_runs_in_a_real_paimon_catalog(tmp_path, con):
    from pypaimon_rust.datafusion import PaimonCatalog, SQLContext

    root = str(tmp_path / "sqlwh")
    ctx = SQLContext()
    ctx.register_catalog("paimon", {"warehouse": root})
    ctx.set_current_catalog("paimon")
    ctx.sql("CREATE DATABASE `db`")
    ctx.sql(con.execute("SELECT paimon_tier_ddl('db.tier')").fetchone()[0])
    schema = PaimonCatalog({"warehouse": root}).get_table("db.tier").schema()
    # The primary key makes id NOT NULL; bal stays nullable.
    assert [(f.name(), str(f.field_type()).upper()) for f in schema.fields()] == [
        ("id", "INT NOT NULL"),
        ("bal", "INT"),
    ]
    assert schema.primary_keys() == ["id"]
    opts = schema.options()
    assert (opts["bucket"], opts["merge-engine"], opts["changelog-producer"]) == ("1", "deduplicate", "input")
    rng = random.Random(23)
    upserts = [(rng.randrange(8), rng.randint(0, 50)) for _ in range(30)]
    for k, v in upserts:
        ctx.sql(con.execute("SELECT paimon_tier_upsert('db.tier', $1, $2)", [k, v]).fetchone()[0])
    got = canon(scan(con, f"{root}/db.db/tier"), ["id", "bal"])
    assert got == sorted(dict(upserts).items())


def test_mart_ddl_runs_in_a_real_paimon_catalog(tmp_path, con):
    """paimon_mart_ddl's CREATE TABLE, run as-is by a real Paimon catalog, makes the mart table the
    issue specifies; rows written to it read back through paimon_scan as written (latest wins)."""
    from pypaimon_rust.datafusion import PaimonCatalog, SQLContext

    root = str(tmp_path / "sqlwh")
    ctx = SQLContext()
    ctx.register_catalog("paimon", {"warehouse": root})
    ctx.set_current_catalog("paimon")
    ctx.sql("CREATE DATABASE `db`")
    ctx.sql(con.execute("SELECT paimon_mart_ddl('db.mart_daily')").fetchone()[0])
    schema = PaimonCatalog({"warehouse": root}).get_table("db.mart_daily").schema()
    assert [(f.name(), str(f.field_type()).upper()) for f in schema.fields()] == MART_FIELDS
    assert schema.primary_keys() == ["company", "order_day"]
    opts = schema.options()
    assert opts["merge-engine"] == "deduplicate" and "aggregation" not in opts.values(), opts
    ctx.sql("INSERT INTO `db`.`mart_daily` VALUES ('acme', DATE '2026-11-01', 1500, 2), ('b', DATE '2026-11-02', 7, 1)")
    ctx.sql("INSERT INTO `db`.`mart_daily` VALUES ('acme', DATE '2026-11-01', 1600, 3)")
    got = con.execute(
        f"SELECT company, CAST(order_day AS VARCHAR), CAST(revenue AS BIGINT), orders "
        f"FROM paimon_scan('{root}/db.db/mart_daily') ORDER BY ALL"
    ).fetchall()
    assert got == [("acme", "2026-11-01", 1600, 3), ("b", "2026-11-02", 7, 1)]
    job = con.execute("SELECT paimon_mart_job('db.fct_orders', 'db.mart_daily')").fetchone()[0]
    # Run as rendered by Flink in test/python/flink/test_flink_mart.py; here only its shape.
    assert "'execution.checkpointing.interval'" in job and "GROUP BY company, order_day" in job, job
    assert "ALTER TABLE" not in job, job


def test_serving_build_from_paimon_partial_update(wh, con):
    t = wh.create("fct_orders", ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
    rng = random.Random(31)
    companies = ["acme", "O'Reilly", "東京商事"]
    base = datetime.date(2026, 11, 1)
    t.commit(
        [
            {
                "order_id": i,
                "company": rng.choice(companies),
                "order_day": base + datetime.timedelta(days=rng.randrange(10)),
                "revenue": rng.randint(0, 500),
            }
            for i in range(300)
        ]
    )
    for _ in range(3):  # revenue corrections only: partial rows with NULL company/day
        t.commit(
            [
                {"order_id": i, "company": None, "order_day": None, "revenue": rng.randint(-50, 900)}
                for i in rng.sample(range(300), 60)
            ]
        )
    merged = oracle_partial_update(t.commits, key="order_id")
    summary = con.execute(
        "SELECT fct_rows, lake_snapshot FROM serving_build($1)", ["paimon:" + wh.path("fct_orders")]
    ).fetchone()
    assert summary == (300, 4)
    assert con.execute("SELECT lake_snapshot FROM serving_status()").fetchone()[0] == 4
    for c in companies:
        sums: dict = {}
        for r in merged:
            if r["company"] == c:
                sums[r["order_day"]] = sums.get(r["order_day"], 0) + r["revenue"]
        want = sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))
        assert con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall() == want
    # a plain directory path is recognised as a Paimon table too (it has schema/)
    assert con.execute("SELECT fct_rows FROM serving_build($1)", [wh.path("fct_orders")]).fetchone()[0] == 300


def test_lake_bad_input_keeps_previous_build(wh, con, tmp_path):
    con.execute(
        "CREATE TABLE src AS SELECT 1 AS order_id, 'a' AS company, DATE '2026-01-01' AS order_day, 5 AS revenue"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    before = con.execute("SELECT * FROM mart_daily").fetchall()
    plain = tmp_path / "not_paimon"
    plain.mkdir()
    no_cols = wh.create("no_cols", ID_BAL, ["id"], {"bucket": "1"})
    no_cols.commit([{"id": 1, "bal": 2}])
    nulls = wh.create("nulls", ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
    nulls.commit([{"order_id": 7, "company": None, "order_day": datetime.date(2026, 1, 1), "revenue": 1}])
    cases = [
        ("paimon:" + str(plain), ["not a Paimon table", str(plain)]),
        ("paimon:" + str(tmp_path / "missing"), ["no such directory", "missing"]),
        ("paimon:" + wh.path("no_cols"), ["no column 'order_id'"]),
        ("paimon:" + wh.path("nulls"), ["company is NULL", "order_id 7"]),
    ]
    for source, needles in cases:
        with pytest.raises(duckdb.Error) as err:
            con.execute("SELECT * FROM serving_build($1)", [source]).fetchall()
        for needle in needles:
            assert needle in str(err.value), (source, str(err.value))
        assert con.execute("SELECT * FROM mart_daily").fetchall() == before
    with pytest.raises(duckdb.Error, match="not a Paimon table"):
        scan(con, str(plain))


def stored_mart_keys(con):
    """mart_daily's (company, order_day) in the order its rows are stored."""
    return con.execute("SELECT company, order_day FROM mart_daily ORDER BY rowid").fetchall()


def test_lake_load_in_any_order_leaves_the_mart_sorted(wh, con):
    """A lake build's load is inserted in any order (DuckDB's threads); that is scoped to the
    load: mart_daily is still stored in (company, order_day) order, after a lake build and after
    a native build that follows a failed lake load. 300k groups: several row groups, so a
    parallel insert of the mart would interleave them."""
    companies, days = 300, 1000
    first = datetime.date(2020, 1, 1)
    rows = [
        {
            "order_id": c * days + d,
            "company": f"c{c:03d}",
            "order_day": first + datetime.timedelta(days=d),
            "revenue": (c * 7 + d) % 1000,
        }
        for c in range(companies)
        for d in range(days)
    ]
    t = wh.create("many_groups", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    t.commit(rows)
    con.execute("SET threads = 2")
    built = con.execute("SELECT fct_rows, mart_rows FROM serving_build($1)", ["paimon:" + wh.path("many_groups")])
    assert built.fetchone() == (len(rows), len(rows))
    stored = stored_mart_keys(con)
    assert len(stored) == len(rows) and stored == sorted(stored)
    # A load that fails (a NULL company) cannot reset the setting in its aborted transaction:
    # the build resets it after the rollback, so the next build's mart is sorted too.
    nulls = wh.create("nulls", ORDERS, ["order_id"], {"bucket": "1", "merge-engine": "partial-update"})
    nulls.commit([{"order_id": 7, "company": None, "order_day": first, "revenue": 1}])
    with pytest.raises(duckdb.Error, match="company is NULL"):
        con.execute("SELECT * FROM serving_build($1)", ["paimon:" + wh.path("nulls")]).fetchall()
    assert stored_mart_keys(con) == stored
    con.execute("CREATE TABLE native_src AS SELECT * FROM paimon_scan($1)", [wh.path("many_groups")])
    con.execute("SELECT * FROM serving_build('native_src')").fetchall()
    assert stored_mart_keys(con) == stored


@pytest.mark.parametrize("key_type,buckets", [(pa.int64(), "1"), (pa.int32(), "3")])
def test_serving_refresh_from_paimon_reads_only_the_new_snapshots(wh, con, key_type, buckets):
    """The changed keys' merged rows are read with a key predicate (Paimon skips files); the
    result must still be exact for every key type the predicate is built for, over buckets."""
    schema = pa.schema(
        [
            pa.field("order_id", key_type, nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
            ("op", pa.string()),
        ]
    )
    t = wh.create(
        "orders",
        schema,
        ["order_id"],
        {"bucket": buckets, "merge-engine": "deduplicate", "changelog-producer": "input", "rowkind.field": "op"},
    )
    rng = random.Random(41)
    companies = ["acme", "globex", "O'Reilly"]
    base = datetime.date(2026, 11, 1)

    def row(i, op="+I"):
        return {
            "order_id": i,
            "company": rng.choice(companies),
            "order_day": base + datetime.timedelta(days=rng.randrange(6)),
            "revenue": rng.randint(-100, 900),
            "op": op,
        }

    t.commit([row(i) for i in range(200)])
    t.commit([row(i, "+U") for i in rng.sample(range(200), 30)])
    source = "paimon:" + wh.path("orders")
    assert con.execute("SELECT lake_snapshot FROM serving_build($1)", [source]).fetchone()[0] == 2

    def check():
        state = {r["order_id"]: r for r in oracle_deduplicate(t.commits, key="order_id")}
        assert con.execute("SELECT count(*) FROM serving_reconcile()").fetchone()[0] == 0
        for c in companies:
            sums: dict = {}
            for r in state.values():
                if r["company"] == c:
                    sums[r["order_day"]] = sums.get(r["order_day"], 0) + r["revenue"]
            assert con.execute("SELECT * FROM serving_dashboard($1)", [c]).fetchall() == sorted(
                sums.items(), key=lambda kv: (-kv[1], kv[0])
            )
        return state

    next_id = 200
    for step in range(3):
        changed = rng.sample(range(next_id), 25)
        rows = [row(i, "+U") for i in changed[:15]] + [{**row(i), "op": "-D"} for i in changed[15:]]
        rows += [row(i) for i in range(next_id, next_id + 10)]
        next_id += 10
        t.commit(rows)
        summary = con.execute(
            "SELECT inserted + updated + deleted + ignored_deletes, lake_snapshot FROM serving_refresh($1)", [source]
        ).fetchone()
        assert summary == (35, 3 + step), summary  # only this snapshot's 35 keys were applied
        check()
    assert con.execute("SELECT lake_snapshot, refreshes FROM serving_status()").fetchone() == (5, 3)
    # nothing new in the lake: nothing to apply
    assert con.execute(
        "SELECT inserted + updated + deleted, mart_rows_touched FROM serving_refresh($1)", [source]
    ).fetchone() == (0, 0)
    check()


def test_lake_refresh_needs_the_table_it_was_built_from(wh, con):
    schema = pa.schema(
        [
            pa.field("order_id", pa.int64(), nullable=False),
            ("company", pa.string()),
            ("order_day", pa.date32()),
            ("revenue", pa.int64()),
        ]
    )
    a = wh.create("a", schema, ["order_id"], {"bucket": "1", "merge-engine": "deduplicate"})
    b = wh.create("b", schema, ["order_id"], {"bucket": "1", "merge-engine": "deduplicate"})
    day = datetime.date(2026, 11, 2)
    b.commit([{"order_id": 1, "company": "x", "order_day": day, "revenue": 3}])
    # built while table a had no snapshot at all: the first refresh reads it from the start
    assert con.execute(
        "SELECT fct_rows, lake_snapshot FROM serving_build($1)", ["paimon:" + wh.path("a")]
    ).fetchone() == (0, None)
    a.commit([{"order_id": 7, "company": "acme", "order_day": day, "revenue": 40}])
    assert con.execute(
        "SELECT inserted, lake_snapshot FROM serving_refresh($1)", ["paimon:" + wh.path("a")]
    ).fetchone() == (1, 1)
    assert con.execute("SELECT * FROM serving_dashboard('acme')").fetchall() == [(day, 40)]
    with pytest.raises(duckdb.Error, match="reflects the Paimon table"):
        con.execute("SELECT * FROM serving_refresh($1)", ["paimon:" + wh.path("b")]).fetchall()
    con.execute(
        "CREATE TABLE src AS SELECT 1 AS order_id, 'a' AS company, DATE '2026-01-01' AS order_day, 5 AS revenue"
    )
    con.execute("SELECT * FROM serving_build('src')").fetchall()
    with pytest.raises(duckdb.Error, match="not from a Paimon table"):
        con.execute("SELECT * FROM serving_refresh($1)", ["paimon:" + wh.path("a")]).fetchall()
