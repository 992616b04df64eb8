"""Writing real Paimon tables with Apache Paimon's own Python writer (pypaimon): the one helper
the demo, the sqllogictest fixtures, the lake tests and the lake benchmark share."""

from __future__ import annotations

import contextlib

import pyarrow as pa
from pypaimon import CatalogFactory, Schema


def open_warehouse(root, options: dict | None = None):
    """A filesystem catalog at `root` (a directory or s3://bucket/..., with Paimon's storage
    `options`) with a database `db`; tables land in `<root>/db.db/<name>`."""
    catalog = CatalogFactory.create({**(options or {}), "warehouse": str(root)})
    catalog.create_database("db", ignore_if_exists=True)
    return catalog


def create_table(catalog, name: str, schema: pa.Schema, primary_keys: list[str] | None, options: dict):
    spec = Schema.from_pyarrow_schema(schema, primary_keys=primary_keys or [], options=options)
    catalog.create_table(f"db.{name}", spec, ignore_if_exists=False)
    return catalog.get_table(f"db.{name}")


def commit(table, schema: pa.Schema, rows) -> None:
    """One Paimon commit (one snapshot) of `rows`: a list of dicts or an Arrow table."""
    data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
    wb = table.new_batch_write_builder()
    w, c = wb.new_write(), wb.new_commit()
    try:
        w.write_arrow(data)
        c.commit(w.prepare_commit())
    finally:
        w.close()
        c.close()


@contextlib.contextmanager
def fast_writes():
    """pypaimon 2.1's primary-key writer is pure Python per row in two places: the bucket hash
    and the fold of same-key rows in a write buffer (about 60 us/row: 10M rows would take 10+
    minutes on this machine). Replace both by exact vectorized equivalents:
      - the bucket of a single BIGINT key: Paimon's murmur hash of its 16-byte BinaryRow, in
        numpy; checked against pypaimon's own function on a sample of every batch;
      - the fold: a buffer whose keys are all distinct and all +I folds to itself (a bulk load
        writes each key once), so it is returned as is; anything else takes pypaimon's path.
    The files written are the ones pypaimon writes (same buckets, same rows, same sort).
    Patched within the `with` block only (a nested block changes nothing); used by the scale
    benchmark's generator and the lake tests' million-row table."""
    import numpy as np
    import pyarrow as pa
    from pypaimon.write import row_key_extractor as rke
    from pypaimon.write.writer.key_value_data_writer import KeyValueDataWriter

    m32 = np.uint64(0xFFFFFFFF)

    def mix(h, k):
        k = (k * np.uint64(0xCC9E2D51)) & m32
        k = ((k << np.uint64(15)) | (k >> np.uint64(17))) & m32
        k = (k * np.uint64(0x1B873593)) & m32
        h = h ^ k
        h = ((h << np.uint64(13)) | (h >> np.uint64(19))) & m32
        return (h * np.uint64(5) + np.uint64(0xE6546B64)) & m32

    def buckets_bigint(keys, n):
        u = keys.astype(np.int64).view(np.uint64)
        zero = np.zeros_like(u)
        h = np.full_like(u, 42)
        for word in (zero, zero, u & m32, u >> np.uint64(32)):  # 8-byte header, then the long
            h = mix(h, word)
        h = h ^ np.uint64(16)
        h ^= h >> np.uint64(16)
        h = (h * np.uint64(0x85EBCA6B)) & m32
        h ^= h >> np.uint64(13)
        h = (h * np.uint64(0xC2B2AE35)) & m32
        h ^= h >> np.uint64(16)
        signed = h.astype(np.int64)
        signed = np.where(signed >= 1 << 31, signed - (1 << 32), signed)
        return np.abs(np.fmod(signed, n))

    original_buckets = rke.FixedBucketRowKeyExtractor._extract_buckets_batch

    def extract_buckets(self, data):
        fields = self._bucket_key_fields
        if len(fields) != 1 or str(fields[0].type).split()[0].upper() != "BIGINT":
            return original_buckets(self, data)
        col = self._input_columns(data, self.bucket_key_indices)[0]
        if col.null_count:
            return original_buckets(self, data)
        buckets = buckets_bigint(col.to_numpy(zero_copy_only=False), self.num_buckets)
        sample = list(range(0, len(buckets), max(1, len(buckets) // 500)))[:500]
        expected = original_buckets(self, data.take(pa.array(sample, pa.int64())))
        if expected != buckets[sample].tolist():
            raise AssertionError("vectorized bucket hash disagrees with pypaimon's")
        return buckets.tolist()

    original_fold = KeyValueDataWriter._merge_pending_by_pk

    def fold(self, data):
        if data.num_rows >= 2 and len(self.trimmed_primary_keys) == 1:
            keys = data.column(0).to_numpy(zero_copy_only=False)  # sorted by key: see _flush_all
            kinds = data.column(2).to_numpy(zero_copy_only=False)  # _VALUE_KIND
            if (keys[1:] != keys[:-1]).all() and (kinds == 0).all():
                return data
        return original_fold(self, data)

    if getattr(rke.FixedBucketRowKeyExtractor._extract_buckets_batch, "fast", False):
        yield  # already inside a block
        return
    extract_buckets.fast = True
    rke.FixedBucketRowKeyExtractor._extract_buckets_batch = extract_buckets
    KeyValueDataWriter._merge_pending_by_pk = fold
    try:
        yield
    finally:
        rke.FixedBucketRowKeyExtractor._extract_buckets_batch = original_buckets
        KeyValueDataWriter._merge_pending_by_pk = original_fold
