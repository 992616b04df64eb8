"""pyfluss (Apache Fluss's Python client) for the Fluss tests: a connection for one piece of work, the
orders table (`shop.<name>`: order_id, company, order_day, revenue) created, written and its log end
offsets read, and how far Fluss has tiered a table into its lake. pyfluss's calls need a running
asyncio loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import fluss
import pyarrow as pa
import pytest

from support.fluss_util import cluster

DATABASE = "shop"
SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        ("company", pa.string()),
        ("order_day", pa.date32()),
        ("revenue", pa.int64()),
    ]
)
BUCKETS = 3


def run(work, bootstrap: str):
    """`await work(connection)` on a fresh asyncio loop, with a connection to the cluster at `bootstrap`
    that is closed afterwards; returns what `work` returned."""

    async def main():
        connection = await fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap}))
        try:
            return await work(connection)
        finally:
            await connection.close()

    return asyncio.run(main())


async def tiering_progress(admin, path: fluss.TablePath, buckets: int):
    """(log end offset per bucket, Fluss's latest lake snapshot or None, its offset per bucket)."""
    ends = await admin.list_offsets(path, list(range(buckets)), fluss.OffsetSpec.latest())
    try:
        snapshot = await admin.get_latest_lake_snapshot(path)
    except fluss.FlussError as e:
        if e.error_code != fluss.ErrorCode.LAKE_SNAPSHOT_NOT_EXIST:
            raise
        return dict(ends), None, {}
    return dict(ends), snapshot, {bucket.bucket_id: offset for bucket, offset in snapshot.table_buckets_offset.items()}


async def wait_tiered(admin, path: fluss.TablePath, buckets: int, cluster_dir: str, within: float = 120):
    """Fluss's latest lake snapshot once its offsets equal the log end offsets (every record tiered into
    Paimon); fails after `within` seconds naming both and the end of the tiering service's log."""
    deadline = time.monotonic() + within
    while True:
        ends, snapshot, tiered = await tiering_progress(admin, path, buckets)
        if tiered == ends:
            return snapshot
        if time.monotonic() > deadline:
            pytest.fail(
                f"{path} not tiered within {within:.0f} s: log end offsets {ends}, latest lake snapshot "
                f"{snapshot and snapshot.snapshot_id} at {tiered}\n" + cluster.log_tail(Path(cluster_dir), "tiering"),
                pytrace=False,
            )
        await asyncio.sleep(0.5)


def create(bootstrap: str, name: str, keys=("order_id",), lake: bool = False, buckets: int = BUCKETS) -> None:
    async def work(connection):
        admin = connection.get_admin()
        await admin.create_database(DATABASE, ignore_if_exists=True)
        properties = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"} if lake else {}
        schema = fluss.Schema(SCHEMA, primary_keys=list(keys) if keys else None)
        descriptor = fluss.TableDescriptor(schema, bucket_count=buckets, properties=properties)
        await admin.create_table(fluss.TablePath(DATABASE, name), descriptor, ignore_if_exists=False)

    run(work, bootstrap)


def write(bootstrap: str, name: str, ops: list) -> None:
    """Writes `ops` (support.fluss_util's stream: each upsert a row in the table's column order) and
    returns once Fluss acknowledged all of them."""

    async def work(connection):
        writer = (await connection.get_table(fluss.TablePath(DATABASE, name))).new_upsert().create_writer()
        for start in range(0, len(ops), 500):
            for kind, value in ops[start : start + 500]:
                _ = writer.upsert(value) if kind == "upsert" else writer.delete({"order_id": value})
            await writer.flush()

    run(work, bootstrap)


def end_offsets(bootstrap: str, name: str, buckets: int = BUCKETS) -> dict[int, int]:
    async def work(connection):
        path = fluss.TablePath(DATABASE, name)
        return dict(await connection.get_admin().list_offsets(path, list(range(buckets)), fluss.OffsetSpec.latest()))

    return run(work, bootstrap)
