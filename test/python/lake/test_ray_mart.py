"""streamhouse.ray.build_mart (issue 19 item 3) on a real Ray cluster: a head and a second node
(`ray start`), with the job's driver beside them, all inside a namespace of their own
(support/ray_cluster.py). The fact tables are written here by pypaimon, commit by commit (on S3:
by the driver, since the S3 server must live behind the namespace's loopback).

Oracles: the mart recomputed in plain Python from the commits (each merge engine's merge done by
hand: support.lake_util), read back with pypaimon's own batch read; and `serving_build` of the same
fact by the extension. Never build_mart's own answer."""

from __future__ import annotations

import datetime
import random
import subprocess
import threading
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import connect
from support import lake_util
from support.lake_util import ORDERS, Warehouse, oracle_deduplicate, oracle_partial_update
from support.ray_cluster import Cluster

COMPANIES = ["O'Reilly", "Café Zürich", "東京商事", "acme", "globex", 'Smith, "Jones" & Co']
START = datetime.date(2026, 10, 1)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        yield c
    finally:
        rc = c.stop()
        for _ in range(100):  # the kernel reaps a dead namespace's processes asynchronously
            if not c.members():
                break
            threading.Event().wait(0.1)
        assert c.members() == [], "Ray processes outlived the test's cluster"
        assert subprocess.run(["pgrep", "-f", c.tmp], capture_output=True).stdout == b""
        assert rc == 0, f"the cluster's driver exited with {rc}"


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    return Warehouse(tmp_path_factory.mktemp("raywh"))


def order(rng, i, company=None):
    return {
        "order_id": i,
        "company": company or rng.choice(COMPANIES),
        "order_day": START + datetime.timedelta(days=rng.randrange(60)),
        "revenue": rng.randint(-500, 100_000),
    }


def mart_oracle(merged: list[dict]) -> dict:
    out: dict = defaultdict(lambda: [0, 0])
    for r in merged:
        cell = out[(r["company"], r["order_day"])]
        cell[0] += r["revenue"]
        cell[1] += 1
    return {k: tuple(v) for k, v in out.items()}


def read_mart(wh: Warehouse, name: str) -> dict:
    return lake_util.read_mart(wh.catalog, name)


def latest(wh: Warehouse, name: str):
    return wh.catalog.get_table(f"db.{name}").snapshot_manager().get_latest_snapshot()


@pytest.fixture(scope="module")
def fact(wh):
    """A partial-update fact over 3 buckets: 20k orders in two commits, then revenue corrections
    and moves to another company/day written as partial rows (NULL = keep), and a group whose sum
    passes BIGINT's range."""
    rng = random.Random(19)
    t = wh.create("orders", ORDERS, ["order_id"], {"bucket": "3", "merge-engine": "partial-update"})
    t.commit([order(rng, i) for i in range(12_000)])
    t.commit([order(rng, i) for i in range(12_000, 20_000)])
    t.commit(
        [
            {"order_id": i, "company": None, "order_day": None, "revenue": rng.randint(0, 9_000)}
            for i in range(0, 20_000, 7)
        ]
    )
    moved = rng.sample(range(20_000), 1_500)
    t.commit([{**order(rng, i), "revenue": None} for i in moved])
    big = START + datetime.timedelta(days=3)
    t.commit([{"order_id": 20_000 + k, "company": "東京商事", "order_day": big, "revenue": 2**62} for k in range(3)])
    return t


@pytest.mark.timeout(400)
def test_build_mart_equals_the_merged_fact_and_replaces_it_exactly(cluster, wh, fact):
    assert sorted(cluster.ready["nodes"]) == ["127.0.0.1", "127.0.0.1"], cluster.ready
    source, target = "paimon:" + wh.path("orders"), "paimon:" + wh.path("mart")
    want = mart_oracle(oracle_partial_update(fact.commits, key="order_id"))
    assert max(rev for rev, _ in want.values()) > 2**63  # the exact DECIMAL(38, 0) sum is tested

    got = cluster.build(source, target)
    assert "result" in got, got
    r = got["result"]
    assert read_mart(wh, "mart") == want
    assert (r["groups"], r["orders"], r["fact_snapshot"]) == (len(want), 20_003, 5)
    assert r["target"] == target and r["elapsed_s"] > 0
    # pypaimon-rust's native merge read every split, on both nodes of the cluster, with no warning
    assert (r["reader"], got["warnings"]) == ("native", [])
    assert r["read_tasks"] >= 2 and r["read_nodes"] == 2, r
    snap = latest(wh, "mart")
    assert (snap.id, snap.commit_kind) == (r["snapshot"], "OVERWRITE")

    # The mart table: the shape the serving layer reads (mart-only replicas, issue 19 item 2).
    schema = wh.catalog.get_table("db.mart").table_schema
    assert [(f.name, str(f.type)) for f in schema.fields] == [
        ("company", "STRING NOT NULL"),
        ("order_day", "DATE NOT NULL"),
        ("revenue", "DECIMAL(38, 0)"),
        ("orders", "BIGINT"),
    ]
    assert (schema.primary_keys, schema.partition_keys) == (["company", "order_day"], [])
    assert schema.options["merge-engine"] == "deduplicate" and int(schema.options["bucket"]) >= 1

    # More commits: every globex order moves to acme (globex's groups must disappear), new orders
    # of a new company, and revenue corrections. The second build is again exactly the fact's mart.
    rng = random.Random(20)
    merged = {row["order_id"]: row for row in oracle_partial_update(fact.commits, key="order_id")}
    gone = [i for i, row in merged.items() if row["company"] == "globex"]
    fact.commit([{"order_id": i, "company": "acme", "order_day": None, "revenue": None} for i in gone])
    fact.commit([order(rng, 30_000 + k, company="Nova") for k in range(500)])
    fact.commit([{"order_id": i, "company": None, "order_day": None, "revenue": -1} for i in range(5, 9_000, 11)])
    want2 = mart_oracle(oracle_partial_update(fact.commits, key="order_id"))
    assert not any(c == "globex" for c, _ in want2) and any(c == "globex" for c, _ in want)

    got2 = cluster.build(source, target)
    assert "result" in got2, got2
    assert read_mart(wh, "mart") == want2
    r2 = got2["result"]
    assert (r2["groups"], r2["orders"], r2["fact_snapshot"], r2["reader"]) == (len(want2), 20_503, 8, "native")
    assert r2["snapshot"] == r["snapshot"] + 1 == latest(wh, "mart").id  # one commit per build


@pytest.mark.timeout(300)
def test_build_mart_without_an_address_uses_the_callers_connection(cluster, wh, fact):
    """build_mart(address=None) in a process already connected to a cluster runs there, and leaves
    the caller's connection as it found it (connected)."""
    source, target = "paimon:" + wh.path("orders"), "paimon:" + wh.path("mart_connected")
    want = mart_oracle(oracle_partial_update(fact.commits, key="order_id"))
    got = cluster.call({"fact": source, "mart": target, "connected": True})
    assert "result" in got, got
    assert got["still_connected"] is True, "build_mart(address=None) shut down the caller's Ray connection"
    r = got["result"]
    assert read_mart(wh, "mart_connected") == want
    assert (r["groups"], r["fact_snapshot"], r["reader"]) == (len(want), len(fact.commits), "native")
    assert r["read_nodes"] == 2, r  # the cluster's two nodes, not a new local Ray


@pytest.mark.timeout(300)
def test_build_mart_of_a_deduplicate_fact(cluster, wh):
    rng = random.Random(21)
    schema = pa.schema([*ORDERS, pa.field("op", pa.string())])  # the row kind: +I, +U or -D
    options = {"bucket": "2", "merge-engine": "deduplicate", "rowkind.field": "op"}
    t = wh.create("dedup", schema, ["order_id"], options)
    t.commit([{**order(rng, i), "op": "+I"} for i in range(3_000)])
    t.commit([{**order(rng, i), "op": "+U"} for i in rng.sample(range(3_000), 800)])  # whole rows rewritten
    t.commit([{**order(rng, i), "op": rng.choice(["+U", "-D"])} for i in rng.sample(range(4_000), 900)])
    want = mart_oracle(oracle_deduplicate(t.commits, key="order_id", kind="op"))
    assert sum(n for _, n in want.values()) < 3_000 + 1_000 - 200  # deletes took orders away
    got = cluster.build(wh.path("dedup"), wh.path("dedup_mart"))  # plain directory paths
    assert "result" in got, got
    assert read_mart(wh, "dedup_mart") == want
    assert got["result"]["reader"] == "native"
    # A fact with no orders at all (no snapshot yet): the mart is replaced by an empty one.
    wh.create("no_orders", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "deduplicate"})
    got = cluster.build(wh.path("no_orders"), wh.path("dedup_mart"))
    assert "result" in got, got
    assert read_mart(wh, "dedup_mart") == {}
    assert (got["result"]["groups"], got["result"]["fact_snapshot"], got["result"]["reader"]) == (0, None, "none")
    assert got["result"]["snapshot"] == latest(wh, "dedup_mart").id


@pytest.mark.timeout(300)
def test_build_mart_says_when_pypaimon_falls_back_to_its_python_reader(cluster, wh, fact, tmp_path):
    """The reader check is not vacuous: with a pypaimon-rust that cannot be imported (on the driver
    and the job's workers) pypaimon reads with its Python reader, still exact, and build_mart says
    so. A driver with pypaimon-rust plans native splits, which workers without it cannot load: that
    is refused naming the missing package, and nothing is written."""
    shadow = tmp_path / "shadow" / "pypaimon_rust"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pypaimon-rust hidden by test_ray_mart')\n")
    got = cluster.build(wh.path("orders"), wh.path("fallback_mart"), pythonpath=str(shadow.parent))
    assert "result" in got, got
    assert got["result"]["reader"] == "python", got
    assert len(got["warnings"]) == 1 and "pure-Python reader" in got["warnings"][0], got
    assert "pypaimon-rust hidden by test_ray_mart" in got["warnings"][0], got
    assert read_mart(wh, "fallback_mart") == mart_oracle(oracle_partial_update(fact.commits, key="order_id"))
    snapshot = latest(wh, "fallback_mart").id
    got = cluster.build(wh.path("orders"), wh.path("fallback_mart"), pythonpath=str(shadow.parent), workers_only=True)
    assert got.get("error") == "RuntimeError", got
    assert "cannot import pypaimon_rust" in got["message"] and "on every node" in got["message"], got
    assert latest(wh, "fallback_mart").id == snapshot


@pytest.mark.timeout(300)
def test_build_mart_refuses_bad_tables_and_changes_nothing(cluster, wh, fact, tmp_path):
    source = "paimon:" + wh.path("orders")
    # A mart target holding a table of another shape (revenue BIGINT, key company only).
    other = pa.schema(
        [
            pa.field("company", pa.string(), nullable=False),
            pa.field("order_day", pa.date32(), nullable=False),
            ("revenue", pa.int64()),
            ("orders", pa.int64()),
        ]
    )
    shaped = wh.create("other_shape", other, ["company"], {"bucket": "1"})
    shaped.commit([{"company": "x", "order_day": START, "revenue": 1, "orders": 1}])
    before = latest(wh, "other_shape").id
    got = cluster.build(source, "paimon:" + wh.path("other_shape"))
    assert got.get("error") == "MartError", got
    for needle in [wh.path("other_shape"), "revenue BIGINT", "DECIMAL(38,0)", "primary key (company)"]:
        assert needle in got["message"], (needle, got["message"])
    assert latest(wh, "other_shape").id == before
    assert read_rows(wh, "other_shape") == [{"company": "x", "order_day": START, "revenue": 1, "orders": 1}]

    # A mart target that holds something else than a Paimon table.
    junk = Path(wh.path("junk"))
    junk.mkdir(parents=True)
    (junk / "keep.txt").write_text("mine")
    got = cluster.build(source, str(junk))
    assert got.get("error") == "MartError" and "is not a Paimon table" in got["message"], got
    assert sorted(p.name for p in junk.iterdir()) == ["keep.txt"]

    # A fact without revenue.
    no_rev = pa.schema([pa.field("order_id", pa.int64(), nullable=False), ("company", pa.string())])
    wh.create("no_revenue", no_rev, ["order_id"], {"bucket": "1"}).commit([{"order_id": 1, "company": "a"}])
    got = cluster.build(wh.path("no_revenue"), wh.path("never_made"))
    assert got.get("error") == "MartError", got
    assert "has no column 'order_day'" in got["message"] and wh.path("no_revenue") in got["message"], got
    assert not Path(wh.path("never_made")).exists()

    # A merged order with a NULL company (the serving layer refuses it) fails the job, and the mart
    # keeps its snapshot and rows; a fresh target is not even created.
    nulls = wh.create("nulls", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    nulls.commit([order(random.Random(1), i) for i in range(100)])
    nulls.commit([{"order_id": 7, "company": None, "order_day": START, "revenue": 1}])  # NULL: keep
    assert "result" in cluster.build(wh.path("nulls"), wh.path("nulls_mart"))
    before = (latest(wh, "nulls_mart").id, read_mart(wh, "nulls_mart"))
    assert before[1] == mart_oracle(oracle_partial_update(nulls.commits, key="order_id"))
    nulls.commit([{"order_id": 1000, "company": None, "order_day": START, "revenue": 5}])  # new order
    for target in ["nulls_mart", "nulls_fresh"]:
        got = cluster.build(wh.path("nulls"), "paimon:" + wh.path(target))
        assert got.get("error") == "MartError", got
        assert "company is NULL for order_id 1000" in got["message"], got
        assert wh.path("nulls") in got["message"], got
    assert (latest(wh, "nulls_mart").id, read_mart(wh, "nulls_mart")) == before
    assert not Path(wh.path("nulls_fresh")).exists()


def read_rows(wh: Warehouse, name: str) -> list[dict]:
    table = wh.catalog.get_table(f"db.{name}")
    rb = table.new_read_builder()
    return rb.new_read().to_arrow(rb.new_scan().plan().splits()).to_pylist()


@pytest.mark.timeout(300)
def test_build_mart_equals_serving_build_of_the_same_fact(cluster, wh, ext_path):
    rng = random.Random(22)
    t = wh.create("served", ORDERS, ["order_id"], {"bucket": "2", "merge-engine": "partial-update"})
    t.commit([order(rng, i) for i in range(4_000)])
    t.commit(
        [{"order_id": i, "company": None, "order_day": None, "revenue": rng.randint(-9, 9)} for i in range(0, 4_000, 3)]
    )
    t.commit([{**order(rng, i), "revenue": None} for i in rng.sample(range(4_000), 300)])
    got = cluster.build("paimon:" + wh.path("served"), "paimon:" + wh.path("served_mart"))
    assert "result" in got, got
    ray_mart = sorted((c, d, rev) for (c, d), (rev, _) in read_mart(wh, "served_mart").items())
    # The commit says which fact state it is the mart of, as every streamhouse publisher does
    # (issue 37 item 5): the fact snapshot read and its commit time, as pypaimon reads them.
    fact3 = latest(wh, "served")
    mark = f"streamhouse.ray_build_mart.fact_snapshot={fact3.id}.fact_commit_ms={fact3.time_millis}"
    assert (fact3.id, latest(wh, "served_mart").commit_user, got["result"]["commit_user"]) == (3, mark, mark)
    con = connect(":memory:", ext_path)
    replica = connect(":memory:", ext_path)
    try:
        con.execute("SELECT * FROM serving_build($1)", ["paimon:" + wh.path("served")]).fetchall()
        served = sorted(con.execute("SELECT company, order_day, revenue FROM mart_daily").fetchall())
        # A replica of the Ray mart: its fact state, and a clean reconcile at that snapshot even
        # once the fact moved on (the moved fact's mart differs: checked against plain Python).
        replica.execute("SELECT * FROM serving_build($1)", ["paimon:" + wh.path("served_mart")]).fetchall()
        t.commit([{**order(rng, i), "revenue": 10**9} for i in range(40)])
        moved = sorted((c, d, rev) for (c, d), (rev, _) in mart_oracle(
            oracle_partial_update(t.commits, key="order_id")).items())  # fmt: skip
        assert moved != ray_mart
        fact_snapshot, fact_time = replica.execute(
            "SELECT fact_snapshot, epoch_ms(fact_commit_time) FROM serving_status()"
        ).fetchone()
        assert (fact_snapshot, fact_time) == (3, fact3.time_millis)
        reconcile = "SELECT * FROM serving_reconcile(fact := $1)"
        assert replica.execute(reconcile, ["paimon:" + wh.path("served")]).fetchall() == []
    finally:
        con.close()
        replica.close()
    assert served == ray_mart
    assert len(served) > 300


WRONG_SECRET = "wrongSECRET-ray-4c1e9b-do-not-leak"


@pytest.fixture(scope="module")
def s3(cluster):
    """The local S3 server, started by the driver inside the cluster's namespace (its loopback is
    the only network there): Paimon's storage option keys for it."""
    got = cluster.call({"op": "s3"})
    assert "s3" in got, got
    server = got["s3"]
    return {
        "s3.endpoint": server["endpoint"],
        "s3.access-key": server["access_key"],
        "s3.secret-key": server["secret_key"],
        "s3.region": server["region"],
        "s3.path-style-access": "true",
    }


def as_json(commits: list[list[dict]]) -> list[list[dict]]:
    return [[{**r, "order_day": r["order_day"] and r["order_day"].isoformat()} for r in rows] for rows in commits]


@pytest.mark.timeout(400)
def test_build_mart_reads_and_writes_tables_on_s3(cluster, s3):
    """fact and mart as s3:// paths with the storage keys in `options`: the fact's splits are read
    on both nodes from the S3 server, the mart is written there, and pypaimon's read of it equals
    the plain-Python mart of the commits. A wrong secret fails without printing a key and writes
    nothing."""
    rng = random.Random(23)
    commits = [[order(rng, i) for i in range(6_000)]]
    commits.append(
        [{"order_id": i, "company": None, "order_day": None, "revenue": rng.randint(0, 99)} for i in range(0, 6_000, 5)]
    )
    commits.append([{**order(rng, i), "revenue": None} for i in rng.sample(range(6_000), 700)])
    warehouse = "s3://lake/raywh"
    table_options = {"bucket": "2", "merge-engine": "partial-update"}
    got = cluster.call(
        {
            "op": "write",
            "warehouse": warehouse,
            "options": s3,
            "table": "orders",
            "table_options": table_options,
            "commits": as_json(commits),
        }
    )
    assert got == {"written": 3}, got
    want = sorted(
        [c, d.isoformat(), rev, n]
        for (c, d), (rev, n) in mart_oracle(oracle_partial_update(commits, key="order_id")).items()
    )
    fact, mart = f"{warehouse}/db.db/orders", f"{warehouse}/db.db/mart"

    got = cluster.build(fact, mart, options=s3)
    assert "result" in got, got
    r = got["result"]
    assert (r["reader"], r["read_nodes"], r["groups"], r["orders"], r["fact_snapshot"]) == (
        "native",
        2,
        len(want),
        6_000,
        3,
    ), r
    read = {"op": "read_mart", "warehouse": warehouse, "options": s3}
    assert cluster.call({**read, "table": "mart"}) == {"mart": want}

    got = cluster.build(fact, f"{warehouse}/db.db/mart_denied", options={**s3, "s3.secret-key": WRONG_SECRET})
    assert got.get("error") == "LakeAccessError", got
    assert f"reading the fact table {fact}" in got["message"] and "ACCESS_DENIED" in got["message"], got
    for secret in [WRONG_SECRET, s3["s3.secret-key"]]:
        assert secret not in got["message"], got["message"]
    assert cluster.call({**read, "table": "mart_denied"}) == {"mart": None}
    assert cluster.call({**read, "table": "mart"}) == {"mart": want}
