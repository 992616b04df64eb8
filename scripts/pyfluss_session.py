"""pyfluss (Apache Fluss's Python client, pinned in scripts/requirements.txt) for the scripts that
write to a local Fluss cluster (make demo-fluss, bench/bench_fluss.py): one connection on one event
loop for the script's lifetime, called synchronously (pyfluss's calls are coroutines).

A change is ("upsert", row) with row a tuple in the table's column order (or a dict), or ("delete",
key) with key the primary key's value. `write` returns when Fluss has acknowledged every change
(the writer's flush returned)."""

from __future__ import annotations

import asyncio
import time

import fluss
import pyarrow as pa


class Fluss:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.loop = asyncio.new_event_loop()
        self.conn = self.call(lambda: fluss.FlussConnection.create(fluss.Config({"bootstrap.servers": bootstrap})))
        self.admin = self.conn.get_admin()

    def call(self, make):
        """`await make()` on this client's loop (pyfluss's calls need a running loop when made)."""

        async def run():
            return await make()

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        try:
            self.call(self.conn.close)
        finally:
            self.loop.close()

    def __enter__(self) -> Fluss:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def create_table(
        self, database: str, table: str, schema: pa.Schema, key: list[str] | None, buckets: int, lake: bool = True
    ) -> fluss.TablePath:
        """A table (a primary-key table when `key` is given); with `lake`, tiered into Paimon every second."""
        self.call(lambda: self.admin.create_database(database, ignore_if_exists=True))
        path = fluss.TablePath(database, table)
        properties = {"table.datalake.enabled": "true", "table.datalake.freshness": "1s"} if lake else {}
        descriptor = fluss.TableDescriptor(
            fluss.Schema(schema, primary_keys=key), bucket_count=buckets, properties=properties
        )
        self.call(lambda: self.admin.create_table(path, descriptor, ignore_if_exists=False))
        return path

    def upserter(self, path: fluss.TablePath):
        table = self.call(lambda: self.conn.get_table(path))
        key = table.get_table_info().get_primary_keys()[0]
        return _Upserter(table.new_upsert().create_writer(), key)

    def write(self, upserter: _Upserter, changes, flush_every: int = 50_000) -> float:
        """Writes `changes` and returns time.monotonic() once Fluss acknowledged all of them."""
        writer = upserter.writer

        async def write():
            for i, (kind, value) in enumerate(changes, 1):
                if kind == "upsert":
                    writer.upsert(value)
                else:
                    writer.delete({upserter.key: value})
                if i % flush_every == 0:
                    await writer.flush()
            await writer.flush()

        self.call(write)
        return time.monotonic()

    def end_offsets(self, path: fluss.TablePath, buckets: int) -> dict[int, int]:
        return dict(self.call(lambda: self.admin.list_offsets(path, list(range(buckets)), fluss.OffsetSpec.latest())))

    def lake_offsets(self, path: fluss.TablePath) -> tuple[int, dict[int, int]] | None:
        """Fluss's latest lake snapshot of the table and its tiered offset per bucket (None: none yet)."""
        try:
            snapshot = self.call(lambda: self.admin.get_latest_lake_snapshot(path))
        except fluss.FlussError as e:
            if e.error_code != fluss.ErrorCode.LAKE_SNAPSHOT_NOT_EXIST:
                raise
            return None
        return snapshot.snapshot_id, {b.bucket_id: o for b, o in snapshot.table_buckets_offset.items()}

    def wait_tiered(self, path: fluss.TablePath, buckets: int, within: float = 180) -> int:
        """The lake snapshot id once Fluss's tiering has reached every bucket's log end."""
        deadline = time.monotonic() + within
        while True:
            ends, lake = self.end_offsets(path, buckets), self.lake_offsets(path)
            if lake is not None and all(lake[1].get(b, 0) == end for b, end in ends.items()):
                return lake[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} not tiered within {within:.0f} s: log ends {ends}, lake snapshot {lake}")
            time.sleep(0.5)


class _Upserter:
    """An upsert writer of one primary-key table and the name of its key column."""

    def __init__(self, writer, key: str):
        self.writer, self.key = writer, key
