"""A real Fluss 0.9.1 cluster end to end (issue 40): the cluster `make fluss-up` starts
(scripts/fluss_cluster.py, one per session: support/fluss_util.py's fixture), a primary-key table with
its lake tier created and written through Apache Fluss's own Python client (pyfluss), Fluss's tiering
service writing it into Paimon, and the extension serving that Paimon table.

The oracle is plain Python over the stream written: each order's last value, deletes removed
(support/fluss_util.py's replay), then SUM(revenue) per (company, order_day) (conftest's oracle).
The last test stops the cluster the way `make fluss-down` does (after every other test of the session
that uses it: it asks for `stops_fluss_cluster`).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import fluss
import pyarrow as pa
import pytest
from conftest import ROOT, build, connect, dashboard, oracle
from support.fluss_client import run, tiering_progress, wait_tiered
from support.fluss_util import COMPANIES, cluster, listening_sockets, order_stream, replay

# The cluster's start (~15-30 s on 2 busy cores) counts against the first test that uses it.
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("jvm")]  # JVM tests: one worker (conftest.py)

DATABASE, TABLE, BUCKETS = "shop", "fct_orders", 4
PATH = fluss.TablePath(DATABASE, TABLE)
SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
PROPERTIES = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"}
SEED, N_OPS = 40, 4000


async def end_offsets(admin) -> dict[int, int]:
    return (await tiering_progress(admin, PATH, BUCKETS))[0]


async def write(writer, ops) -> None:
    for i, (kind, value) in enumerate(ops, 1):
        if kind == "upsert":
            oid, company, day, revenue = value
            writer.upsert({"order_id": oid, "company": company, "order_day": day, "revenue": revenue})
        else:
            writer.delete({"order_id": value})
        if i % 500 == 0:
            await writer.flush()
    await writer.flush()


@pytest.fixture(scope="module")
def table(fluss_cluster) -> dict:
    """The PK table, created through pyfluss: what Fluss reports of it."""

    async def create(connection):
        admin = connection.get_admin()
        await admin.create_database(DATABASE, ignore_if_exists=True)  # other tests share the database
        descriptor = fluss.TableDescriptor(
            fluss.Schema(SCHEMA, primary_keys=["order_id"]), bucket_count=BUCKETS, properties=PROPERTIES
        )
        await admin.create_table(PATH, descriptor)
        info = await admin.get_table_info(PATH)
        return {
            "primary_keys": info.get_primary_keys(),
            "buckets": info.num_buckets,
            "properties": info.get_properties(),
            "columns": info.get_column_names(),
        }

    return run(create, fluss_cluster["bootstrap"])


@pytest.fixture(scope="module")
def orders(fluss_cluster, table) -> dict:
    """The seeded stream written by pyfluss in two parts, each waited for until Fluss has tiered all of
    it (so the second part's corrections and deletes land in a later Paimon snapshot than the orders
    they change). Returns the stream, the oracle's state and both lake snapshots."""
    ops = order_stream(SEED, N_OPS)
    cut = len(ops) * 3 // 5

    async def stream(connection):
        admin = connection.get_admin()
        writer = (await connection.get_table(PATH)).new_upsert().create_writer()
        began = time.monotonic()
        await write(writer, ops[:cut])
        first = await wait_tiered(admin, PATH, BUCKETS, fluss_cluster["dir"])
        await write(writer, ops[cut:])
        last = await wait_tiered(admin, PATH, BUCKETS, fluss_cluster["dir"])
        return first, last, await end_offsets(admin), time.monotonic() - began

    first, last, ends, seconds = run(stream, fluss_cluster["bootstrap"])
    print(
        f"{len(ops)} operations written and tiered in {seconds:.1f} s (lake snapshots {first.snapshot_id}, "
        f"{last.snapshot_id})"
    )
    return {"ops": ops, "state": replay(ops), "first": first, "last": last, "ends": ends}


def test_the_cluster_is_up_on_loopback_only(fluss_cluster):
    """Four JVMs of ours, each listening on 127.0.0.1 only; pyfluss sees the coordinator and the tablet
    server at the ports the script chose."""
    pids, ports = fluss_cluster["pids"], fluss_cluster["ports"]
    assert sorted(pids) == sorted(cluster.ROLES)
    assert sorted(cluster.alive(fluss_cluster["dir"])) == sorted(pids.values())
    for role, pid in pids.items():
        sockets = listening_sockets(pid)
        assert sockets, f"{role} (pid {pid}) listens on nothing"
        assert {address for address, _port in sockets} == {"127.0.0.1"}, f"{role} listens beyond loopback: {sockets}"
        if role in ports:
            assert ("127.0.0.1", ports[role]) in sockets, (role, sockets)

    async def nodes(connection):
        return await connection.get_admin().get_server_nodes()

    got = sorted((n.server_type, n.host, n.port) for n in run(nodes, fluss_cluster["bootstrap"]))
    assert got == [
        ("CoordinatorServer", "127.0.0.1", ports["coordinator"]),
        ("TabletServer", "127.0.0.1", ports["tablet-server"]),
    ]


def test_the_table_and_its_paimon_table(fluss_cluster, table):
    """The PK table as created, and the Paimon table Fluss's coordinator made for its lake tier: the
    table's columns then Fluss's system columns, its key, one Paimon bucket per Fluss bucket."""
    assert table["primary_keys"] == ["order_id"]
    assert table["buckets"] == BUCKETS
    assert table["columns"] == SCHEMA.names
    for key, value in PROPERTIES.items():
        assert table["properties"].get(key) == value, table["properties"]
    schema_file = Path(fluss_cluster["warehouse"]) / f"{DATABASE}.db" / TABLE / "schema" / "schema-0"
    paimon = json.loads(schema_file.read_text())
    assert [f["name"] for f in paimon["fields"]] == [*SCHEMA.names, "__bucket", "__offset", "__timestamp"]
    assert paimon["primaryKeys"] == ["order_id"]
    assert paimon["options"]["bucket"] == str(BUCKETS)
    assert paimon["options"]["fluss.table.datalake.enabled"] == "true"


def test_duckdb_serves_what_fluss_tiered(fluss_cluster, orders):
    """serving_build on the Paimon table Fluss tiered: fct_orders, mart_daily and the dashboard equal
    the oracle, and the build names the lake snapshot Fluss reports as its latest."""
    state = orders["state"]
    kinds = {kind for kind, _ in orders["ops"]}
    assert kinds == {"upsert", "delete"} and len(state) < len(orders["ops"])  # the stream did all three
    warehouse_table = f"{fluss_cluster['warehouse']}/{DATABASE}.db/{TABLE}"
    con = connect()
    try:
        summary = build(con, "paimon:" + warehouse_table)
        assert summary["fct_rows"] == len(state)
        assert summary["lake_snapshot"] == orders["last"].snapshot_id
        assert orders["last"].snapshot_id > orders["first"].snapshot_id
        rows = sorted(state.values())
        fct = con.execute("SELECT order_id, company, order_day, revenue FROM fct_orders ORDER BY order_id").fetchall()
        assert fct == rows
        per_company, cells = oracle(rows)
        mart = con.execute("SELECT company, order_day, revenue FROM mart_daily").fetchall()
        assert sorted(mart) == sorted((c, d, r) for (c, d), r in cells.items())
        for company in [*COMPANIES, "nobody", "o'reilly"]:
            assert dashboard(con, company) == per_company.get(company, []), company
    finally:
        con.close()


def test_pyfluss_reads_agree(fluss_cluster, orders):
    """Fluss's own answers over the same data: point lookups (live, deleted and never-written orders)
    and the table's changelog replayed from the start, each -U and -D carrying the value it retracts."""
    state = orders["state"]
    written = {value[0] if kind == "upsert" else value for kind, value in orders["ops"]}
    rng = random.Random(SEED)
    probes = rng.sample(sorted(state), 20) + rng.sample(sorted(written - set(state)), 10) + [0, -1, 2**63 - 1]

    async def read(connection):
        table = await connection.get_table(PATH)
        lookuper = table.new_lookup().create_lookuper()
        looked = {oid: await lookuper.lookup({"order_id": oid}) for oid in probes}
        scanner = await table.new_scan().create_log_scanner()
        scanner.subscribe_buckets(dict.fromkeys(range(BUCKETS), fluss.EARLIEST_OFFSET))
        records, next_offset = [], dict.fromkeys(range(BUCKETS), 0)
        deadline = time.monotonic() + 60
        while any(next_offset[b] < orders["ends"][b] for b in range(BUCKETS)):
            assert time.monotonic() < deadline, f"changelog read stalled at {next_offset} of {orders['ends']}"
            for bucket, batch in (await scanner.poll(1000)).items():
                for record in batch:
                    assert record.offset == next_offset[bucket.bucket_id], (bucket, record.offset)
                    next_offset[bucket.bucket_id] = record.offset + 1
                    records.append((record.change_type.short_string(), record.row))
        return looked, records

    looked, records = run(read, fluss_cluster["bootstrap"])
    for oid, row in looked.items():
        want = state.get(oid)
        got = None if row is None else (row["order_id"], row["company"], row["order_day"], row["revenue"])
        assert got == want, oid

    replayed: dict[int, tuple] = {}
    for change, row in records:
        value = (row["order_id"], row["company"], row["order_day"], row["revenue"])
        if change in ("+I", "+U"):
            assert (change == "+U") == (value[0] in replayed), (change, value)
            replayed[value[0]] = value
        else:
            assert change in ("-U", "-D"), change
            assert replayed.get(value[0]) == value, (change, value)
            if change == "-D":
                del replayed[value[0]]
    assert replayed == state


def test_fluss_down_stops_every_process(stops_fluss_cluster):
    """`make fluss-down`'s command on the session's cluster: every JVM it started is gone (by pid), its
    ports are closed, and no process carries the cluster's marker. Runs after the cluster's other users."""
    directory, pids = stops_fluss_cluster["dir"], stops_fluss_cluster["pids"]
    assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fluss_cluster.py"), "down", directory],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    for role, pid in pids.items():
        deadline = time.monotonic() + 10
        while cluster.pid_alive(pid) and time.monotonic() < deadline:  # reaps our children too
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), f"{role} (pid {pid}) is still there"
    assert cluster.alive(directory) == {}
    for role, port in stops_fluss_cluster["ports"].items():
        assert not cluster.listening(port), f"{role}'s port {port} still answers"
