"""Writing real Paimon tables with Apache Paimon's own Python writer (pypaimon): the one helper
the demo, the sqllogictest fixtures, the lake tests and the lake benchmark share."""

from __future__ import annotations

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
