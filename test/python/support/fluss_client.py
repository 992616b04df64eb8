"""pyfluss (Apache Fluss's Python client) for the Fluss tests: a connection for one piece of work, and
how far Fluss has tiered a table into its lake. pyfluss's calls need a running asyncio loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import fluss
import pytest

from support.fluss_util import cluster


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
