"""streamhouse.ray: the mart computed by a Ray cluster, for facts beyond one machine.

    from streamhouse.ray import build_mart
    build_mart("paimon:/lake/db.db/orders", "paimon:/lake/db.db/mart_daily", address="head:6379")

`build_mart` is a Ray job of plain tasks, a map-reduce: one read task per split of the merged fact
(pypaimon's reader with pypaimon-rust's native merge, spread over the cluster's nodes) adds its
rows up per (company, order_day) and splits those partial groups by a hash of the group into P
parts; P reduce tasks each add up one part from every read task (the distributed group-by); the
driver writes the reduced groups — the mart, small by design — to the mart table in ONE Paimon
commit that overwrites its whole content: after the call the table holds exactly the fact's mart,
as `serving_build` of the same fact has it. (Ray Data's read/group-by/write pipeline computed the
same but spent ~10 s per job in its own machinery: make bench measures this job.)

The mart table: `company STRING NOT NULL, order_day DATE NOT NULL, revenue DECIMAL(38, 0), orders
BIGINT`, primary key (company, order_day), merge engine deduplicate, fixed buckets; created on the
first build. An existing table of any other shape is refused, naming the table and the difference.

The commit says which fact state the mart is the mart of, as every streamhouse publisher's does: its
commit user is `streamhouse.ray_build_mart.fact_snapshot=<id>.fact_commit_ms=<ms>` (the fact
snapshot read and its commit time; `$snapshots.commit_user` in any engine), which a replica serving
the mart shows as `fact_snapshot` / `fact_commit_time` in `serving_status` and checks itself against
with `serving_reconcile(fact := ...)`.

Rows the serving layer refuses are refused here too, before anything is written: a merged order
whose company, order_day or revenue is NULL fails the job naming the column and the order_id.

An optional extra: `pip install 'streamhouse[ray]'` (Ray and pypaimon, pinned). Every node of the
cluster needs the same packages (streamhouse, pypaimon and pypaimon-rust): Ray runs this module's
functions on the workers. Without pypaimon-rust pypaimon would read with its slow pure-Python
reader; the read tasks report which reader ran (`MartBuild.reader`) and a Python read warns. A
worker without pypaimon-rust behind a driver that has it fails the job, naming the package.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import warnings

__all__ = ["MART_BUCKETS", "LakeAccessError", "MartBuild", "MartError", "build_mart"]

# The mart table build_mart creates: (name, Paimon type) in order, its key and its options.
MART_FIELDS = (
    ("company", "STRING NOT NULL"),
    ("order_day", "DATE NOT NULL"),
    ("revenue", "DECIMAL(38, 0)"),
    ("orders", "BIGINT"),
)
MART_KEY = ["company", "order_day"]
# Fixed buckets: pypaimon's Ray writer refuses dynamic-bucket primary-key tables, and a fixed bucket
# count lets write tasks run one per bucket. An existing mart table may have any fixed count.
MART_BUCKETS = 4
FACT_COLUMNS = ["order_id", "company", "order_day", "revenue"]
INTEGER_TYPES = {"TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT"}
# Rows a read task gathers before adding them up.
_GROUP_ROWS = 1 << 20
# Errors raised inside Ray tasks reach the driver wrapped; this marker finds our own message again.
_MARK = "streamhouse-mart-error:"
_INSTALL = "pip install 'streamhouse[ray]' (Ray and pypaimon with pypaimon-rust, pinned)"


class MartError(ValueError):
    """The fact or the mart table is not what build_mart needs; the message names table and problem."""


class LakeAccessError(OSError):
    """The storage refused or failed a read of the fact or the mart table (access denied, no such
    bucket, unreachable endpoint); the message names the table and what the storage said, never
    a credential. Nothing was written."""


@dataclasses.dataclass(frozen=True)
class MartBuild:
    """What one build_mart wrote."""

    target: str  # the mart table, as given
    snapshot: int | None  # the mart snapshot of this build's commit
    groups: int  # (company, order_day) groups written: the whole mart
    orders: int  # merged fact orders aggregated
    fact_snapshot: int | None  # the fact snapshot read (None: the fact has no snapshot yet)
    commit_user: str  # the mart commit's commit user: which fact state it reflects (see the module doc)
    elapsed_s: float
    reader: str  # "native" (pypaimon-rust), "python" (pypaimon's pure-Python fallback), "none" (no split)
    read_tasks: int  # Ray read tasks that ran
    read_nodes: int  # distinct cluster nodes those read tasks ran on


def _commit_user(fact_snapshot: int | None, fact_commit_ms: int | None) -> str:
    """The mart commit's commit user: the extension's fact mark (src/core/fact_mark.rs), the same
    for every streamhouse publisher so that one replica reads them all."""
    parts = ["streamhouse", "ray_build_mart"]
    if fact_snapshot is not None:
        parts.append(f"fact_snapshot={int(fact_snapshot)}")
    if fact_commit_ms is not None:
        parts.append(f"fact_commit_ms={int(fact_commit_ms)}")
    return ".".join(parts)


def _require(module: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"streamhouse.ray needs {module.split('.')[0]}: {_INSTALL}. ({e})") from e


# ---------------------------------------------------------------------------------------------
# Table paths: paimon:<dir>, a plain directory, or s3://bucket/... ; a Paimon table directory is
# <warehouse>/<database>.db/<table>, which pypaimon's filesystem catalog opens on <warehouse>.
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Location:
    given: str
    warehouse: str
    database: str
    table: str

    @property
    def path(self) -> str:
        return f"{self.warehouse}/{self.database}.db/{self.table}"


def _locate(path: str, what: str) -> _Location:
    import os

    if not isinstance(path, str) or not path.strip():
        raise MartError(f"build_mart: {what} must be a Paimon table path (paimon:<dir>, a directory or s3://...)")
    raw = path[len("paimon:") :] if path.startswith("paimon:") else path
    if "://" in raw:
        scheme, rest = raw.split("://", 1)
        rest = rest.rstrip("/")
        prefix = scheme + "://"
    else:
        rest = os.path.abspath(os.path.expanduser(raw))
        prefix = ""
    parts = rest.rsplit("/", 2)
    if len(parts) != 3 or not parts[1].endswith(".db") or parts[1] == ".db" or not parts[2]:
        raise MartError(
            f"build_mart: {what} {path!r} is not a Paimon table path of the form <warehouse>/<database>.db/<table>"
        )
    return _Location(path, prefix + parts[0], parts[1][: -len(".db")], parts[2])


def _catalog(loc: _Location, options: dict):
    from pypaimon import CatalogFactory

    return CatalogFactory.create({**options, "warehouse": loc.warehouse})


def _identifier(loc: _Location):
    from pypaimon.common.identifier import Identifier

    return Identifier.create(loc.database, loc.table)


def _load(catalog, loc: _Location, what: str, storage: dict):
    """The table at loc, or None when there is no Paimon table there."""
    from pypaimon.catalog.catalog_exception import DatabaseNotExistException, TableNotExistException

    with _storage_said(loc, what, storage):
        try:
            return catalog.get_table(_identifier(loc))
        except (TableNotExistException, DatabaseNotExistException):
            return None


@contextlib.contextmanager
def _storage_said(loc: _Location, what: str, storage: dict):
    """pypaimon reports a storage failure as "Failed to load schema from path ..." with the
    storage's own error (an OSError: "AWS Error ACCESS_DENIED ...") only in the exception chain:
    raise that one, naming the table, with every option value scrubbed out of it."""
    try:
        yield
    except MartError:
        raise
    except Exception as e:
        cause, seen = e, set()
        while cause is not None and not isinstance(cause, OSError) and id(cause) not in seen:
            seen.add(id(cause))
            cause = cause.__cause__ or cause.__context__
        if cause is None or not isinstance(cause, OSError):
            raise
        said = str(cause)
        for value in storage.values():
            if len(value) >= 4:
                said = said.replace(value, "***")
        raise LakeAccessError(
            f"build_mart: the storage refused reading the {what} table {loc.given}: {said}. Nothing was written."
        ) from None


def _type(field) -> str:
    return str(field.type).replace(", ", ",").upper()


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------
def _check_fact(table, loc: _Location) -> None:
    fields = {f.name: _type(f) for f in table.table_schema.fields}
    name = f"the fact table {loc.given}"
    for column in FACT_COLUMNS:
        if column not in fields:
            raise MartError(f"build_mart: {name} has no column '{column}' (it needs {', '.join(FACT_COLUMNS)})")
    checks = {
        "order_id": (INTEGER_TYPES, "an integer type (TINYINT..BIGINT)"),
        "order_day": ({"DATE"}, "DATE"),
    }
    for column, (allowed, wanted) in checks.items():
        if fields[column].removesuffix(" NOT NULL") not in allowed:
            raise MartError(f"build_mart: {name} has column '{column}' of type {fields[column]}; it must be {wanted}")
    base = fields["company"].removesuffix(" NOT NULL")
    if not (base == "STRING" or base.startswith(("VARCHAR", "CHAR"))):
        raise MartError(f"build_mart: {name} has column 'company' of type {fields['company']}; it must be a string")
    base = fields["revenue"].removesuffix(" NOT NULL")
    if base not in INTEGER_TYPES and not (base.startswith("DECIMAL(") and base.endswith(",0)")):
        raise MartError(
            f"build_mart: {name} has column 'revenue' of type {fields['revenue']}; it must be an integer type "
            "(TINYINT..BIGINT, or DECIMAL with scale 0: whole cents)"
        )
    keys = list(table.table_schema.primary_keys)
    if keys != ["order_id"]:
        shown = "no primary key" if not keys else f"primary key ({', '.join(keys)})"
        raise MartError(
            f"build_mart: {name} has {shown}; it must be a primary-key table keyed by (order_id) alone, "
            "so that each order is one merged row"
        )


def _mart_differences(table) -> list[str]:
    schema = table.table_schema
    out = []
    got = [(f.name, _type(f)) for f in schema.fields]
    want = [(n, t.replace(", ", ",")) for n, t in MART_FIELDS]
    if got != want:
        show = lambda cols: ", ".join(f"{n} {t}" for n, t in cols)  # noqa: E731
        out.append(f"columns ({show(got)}) instead of ({show(want)})")
    if list(schema.primary_keys) != MART_KEY:
        out.append(f"primary key ({', '.join(schema.primary_keys)}) instead of ({', '.join(MART_KEY)})")
    if schema.partition_keys:
        out.append(f"partition keys ({', '.join(schema.partition_keys)}) instead of none")
    engine = schema.options.get("merge-engine", "deduplicate")
    if engine != "deduplicate":
        out.append(f"merge-engine {engine} instead of deduplicate")
    bucket = schema.options.get("bucket")
    if bucket is None or not bucket.lstrip("-").isdigit() or int(bucket) < 1:
        out.append(f"bucket {bucket or 'unset (dynamic)'} instead of a fixed bucket count (>= 1)")
    return out


def _existing_mart(catalog, loc: _Location, storage: dict):
    """The mart table at loc when there is one (of the mart's shape), None when the location is free."""
    table = _load(catalog, loc, "mart", storage)
    if table is not None:
        differences = _mart_differences(table)
        if differences:
            raise MartError(
                f"build_mart: the mart table {loc.given} has another shape: {'; '.join(differences)}. "
                "Nothing was written; point build_mart at a new path or drop that table."
            )
        return table
    with _storage_said(loc, "mart", storage):
        taken = catalog.file_io.exists(loc.path) and catalog.file_io.list_status(loc.path)
    if taken:
        raise MartError(
            f"build_mart: the mart target {loc.given} exists and is not a Paimon table; nothing was written"
        )
    return None


def _create_mart(catalog, loc: _Location):
    from pypaimon import Schema

    spec = Schema.from_pyarrow_schema(
        _mart_arrow_schema(),
        primary_keys=MART_KEY,
        options={"bucket": str(MART_BUCKETS), "merge-engine": "deduplicate"},
    )
    catalog.create_database(loc.database, ignore_if_exists=True)
    catalog.create_table(_identifier(loc), spec, ignore_if_exists=False)
    return catalog.get_table(_identifier(loc))


def _mart_arrow_schema():
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("company", pa.string(), nullable=False),
            pa.field("order_day", pa.date32(), nullable=False),
            pa.field("revenue", pa.decimal128(38, 0)),
            pa.field("orders", pa.int64()),
        ]
    )


# ---------------------------------------------------------------------------------------------
# The job's worker side (runs in Ray tasks)
# ---------------------------------------------------------------------------------------------
def _partial_groups(batch):
    """Merged fact rows (an Arrow batch or table) -> their (company, order_day) partial groups, exact (revenue
    summed as DECIMAL(38, 0)). A NULL the serving layer refuses fails the job, naming the order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in ("company", "order_day", "revenue"):
        col = batch.column(column)
        if col.null_count:
            first = batch.column("order_id").filter(pc.is_null(col))[0].as_py()
            raise ValueError(f"{_MARK}{column} is NULL for order_id {first}")
    rows = pa.table(
        {
            "company": batch.column("company").cast(pa.string()),
            "order_day": batch.column("order_day"),
            "revenue": batch.column("revenue").cast(pa.decimal128(38, 0)),
        }
    )
    grouped = rows.group_by(MART_KEY).aggregate([("revenue", "sum"), ("revenue", "count", pc.CountOptions("all"))])
    out = pa.table(
        {
            "company": grouped.column("company"),
            "order_day": grouped.column("order_day"),
            "revenue": grouped.column("revenue_sum").cast(pa.decimal128(38, 0)),
            "orders": grouped.column("revenue_count").cast(pa.int64()),
        }
    )
    return out


def _partition(groups, partitions: int):
    """The group-by partition of each (company, order_day): a hash the same in every process
    (crc32 of the company's UTF-8, not Python's salted hash()), computed once per distinct company."""
    import zlib

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if groups.num_rows == 0:
        return pa.array([], pa.int64())
    companies = pc.dictionary_encode(groups.column("company").combine_chunks())
    crc = np.array([zlib.crc32(c.encode()) for c in companies.dictionary.to_pylist()], dtype=np.int64)
    days = groups.column("order_day").combine_chunks().cast(pa.int32()).to_numpy(zero_copy_only=False)
    mixed = crc[companies.indices.to_numpy(zero_copy_only=False)] * 1_000_003 + days.astype(np.int64)
    return pa.array(np.remainder(mixed, partitions), pa.int64())


def _add_up(partials):
    """Partial groups -> one row per (company, order_day), in the mart table's Arrow types."""
    import pyarrow as pa

    grouped = partials.group_by(MART_KEY).aggregate([("revenue", "sum"), ("orders", "sum")])
    schema = _mart_arrow_schema()
    columns = [grouped.column(n) for n in ("company", "order_day", "revenue_sum", "orders_sum")]
    return pa.table([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _read_split(table, read_type, projection, splits, partitions: int):
    """A read task: the merged rows of `splits` -> their partial groups, in `partitions` parts by a
    hash of the group (one return value each), then (node, why pypaimon did not read natively).
    pypaimon decides native or Python per TableRead and says why it falls back only through
    TableRead._native_fallback (logging at most), so the task records those calls while it reads."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import ray
    from pypaimon.read.table_read import TableRead

    fallbacks: list[str] = []
    original = TableRead._native_fallback

    def recording(self, reason, error=None, log=False):
        fallbacks.append(str(reason))
        return original(self, reason, error, log)

    TableRead._native_fallback = recording
    try:
        reader = TableRead(table, None, read_type, output_projection=projection).to_arrow_batch_reader(splits)
        # The reader yields batches of ~1k rows; one Arrow group-by per batch spends 10x the time
        # of one per ~1M rows (measured), so batches are gathered first (memory: ~32 MB).
        parts, pending, rows = [], [], 0
        for batch in iter(reader.read_next_batch, None):
            pending.append(batch)
            rows += batch.num_rows
            if rows >= _GROUP_ROWS:
                parts.append(_partial_groups(pa.Table.from_batches(pending)))
                pending, rows = [], 0
        if rows:
            parts.append(_partial_groups(pa.Table.from_batches(pending)))
    finally:
        TableRead._native_fallback = original
    groups = _add_up(pa.concat_tables(parts) if parts else _partial_groups(_empty_fact()))
    part = _partition(groups, partitions)
    pieces = [groups.filter(pc.equal(part, p)) for p in range(partitions)]
    return (*pieces, (ray.get_runtime_context().get_node_id(), fallbacks))


def _reduce(*pieces):
    """A reduce task: one part of every read task's partial groups -> those groups' mart rows."""
    import pyarrow as pa

    return _add_up(pa.concat_tables(pieces))


def _our_error(error: BaseException) -> str | None:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        if _MARK in text:
            return text.split(_MARK, 1)[1].splitlines()[0].strip()
        error = getattr(error, "cause", None) or error.__cause__ or error.__context__
    return None


# ---------------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------------
def build_mart(fact: str, mart: str, *, options: dict | None = None, address: str | None = None) -> MartBuild:
    """Computes the mart of the Paimon fact table `fact` on a Ray cluster and writes it to the
    Paimon table `mart` as one commit that replaces the table's whole content.

    fact, mart: `paimon:<dir>`, a directory, or `s3://bucket/...` (a table directory
    `<warehouse>/<database>.db/<table>`). options: Paimon storage keys for both tables (s3.endpoint,
    s3.access-key, s3.secret-key, s3.region, s3.path-style-access, ...). address: a running Ray
    cluster (`host:port`), or None for the one this process is connected to or a new local one.

    The fact needs order_id (integer, the primary key), company (string), order_day (DATE) and
    revenue (integer); the mart is the per (company, order_day) SUM(revenue) and COUNT(*) of its
    merged rows. Raises MartError, naming the table and the problem, for a fact or mart table of
    the wrong shape or a NULL company, order_day or revenue, and LakeAccessError when the storage
    refuses reading either table (a wrong key, no such bucket); nothing is written then."""
    started = time.monotonic()
    ray = _require("ray")
    _require("pypaimon")
    import pyarrow as pa
    import pyarrow.compute as pc
    from pypaimon.read.datasource.split_provider import CatalogSplitProvider

    storage = {str(k): str(v) for k, v in (options or {}).items()}
    fact_loc, mart_loc = _locate(fact, "fact"), _locate(mart, "mart")
    if fact_loc.path == mart_loc.path:
        raise MartError(f"build_mart: the fact and the mart are the same table ({fact})")
    fact_catalog, mart_catalog = _catalog(fact_loc, storage), _catalog(mart_loc, storage)
    fact_table = _load(fact_catalog, fact_loc, "fact", storage)
    if fact_table is None:
        raise MartError(f"build_mart: the fact {fact} is not a Paimon table (no schema at {fact_loc.path})")
    _check_fact(fact_table, fact_loc)
    latest = fact_table.snapshot_manager().get_latest_snapshot()
    fact_snapshot = latest.id if latest is not None else None
    commit_user = _commit_user(fact_snapshot, latest.time_millis if latest is not None else None)
    # Both checked before Ray runs anything; the mart table is created only once its rows are ready.
    mart_table = _existing_mart(mart_catalog, mart_loc, storage)

    connected_here = not ray.is_initialized()
    if connected_here:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    try:
        splits, tasks = [], []
        if fact_snapshot is not None:
            provider = CatalogSplitProvider(
                table_identifier=_identifier(fact_loc),
                catalog_options={**storage, "warehouse": fact_loc.warehouse},
                projection=FACT_COLUMNS,
                snapshot_id=fact_snapshot,
                dynamic_options={"read.native.enabled": "true"},
            )
            splits = provider.splits()
        # P parts, two per CPU of the cluster: the reduce tasks keep every CPU busy.
        partitions = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        if splits:
            read = ray.remote(_read_split).options(num_returns=partitions + 1, scheduling_strategy="SPREAD")
            table, read_type, projection = provider.table(), provider.read_type(), provider.output_projection()
            table_ref = ray.put(table)
            reads = [read.remote(table_ref, read_type, projection, [split], partitions) for split in splits]
            reduce = ray.remote(_reduce).options(scheduling_strategy="SPREAD")
            parts = [reduce.remote(*(r[p] for r in reads)) for p in range(partitions)]
            mart_rows = pa.concat_tables(ray.get(parts))
            tasks = ray.get([r[partitions] for r in reads])
        else:  # no snapshot, or nothing in it: an empty mart
            mart_rows = _add_up(_partial_groups(_empty_fact()))
        groups, orders = mart_rows.num_rows, int(pc.sum(mart_rows.column("orders")).as_py() or 0)
        if mart_table is None:
            mart_table = _create_mart(mart_catalog, mart_loc)
        with _storage_said(mart_loc, "mart", storage):
            write = mart_table.new_batch_write_builder().overwrite()
            # The builder's public attribute, read by new_write and new_commit (pypaimon 2.1.0).
            write.commit_user = commit_user
            writer, committer = write.new_write(), write.new_commit()
            try:
                writer.write_arrow(mart_rows)
                committer.commit(writer.prepare_commit())
            finally:
                writer.close()
                committer.close()
    except Exception as e:
        problem = _our_error(e)
        if problem is not None:
            raise MartError(
                f"build_mart: the fact table {fact} has a merged row the serving layer refuses: {problem}. "
                f"Nothing was written to {mart}."
            ) from None
        said = str(e)
        if "pypaimon_rust" in said and ("ImportError" in said or "ModuleNotFoundError" in said):
            last = [line for line in said.splitlines() if "Error" in line][-1].strip()
            raise RuntimeError(
                "build_mart: a Ray worker cannot import pypaimon_rust, which this driver has (pypaimon planned "
                f"the fact's splits natively here): {_INSTALL} on every node of the cluster. Nothing was "
                f"written to {mart}. The worker said: {last}"
            ) from e
        raise
    finally:
        if connected_here:
            ray.shutdown()

    latest = mart_table.snapshot_manager().get_latest_snapshot()  # this commit's (nothing if nothing changed)
    snapshot = latest.id if latest is not None else None
    fallbacks = sorted({reason for _, reasons in tasks for reason in reasons})
    reader = "python" if fallbacks else "native" if tasks else "none"
    if fallbacks:
        warnings.warn(
            f"build_mart: pypaimon read {fact} with its pure-Python reader, not pypaimon-rust's native one "
            f"({'; '.join(fallbacks)}); {_INSTALL} on every node",
            RuntimeWarning,
            stacklevel=2,
        )
    return MartBuild(
        target=mart,
        snapshot=snapshot,
        groups=groups,
        orders=orders,
        fact_snapshot=fact_snapshot,
        commit_user=commit_user,
        elapsed_s=round(time.monotonic() - started, 3),
        reader=reader,
        read_tasks=len(tasks),
        read_nodes=len({node for node, _ in tasks}),
    )


def _empty_fact():
    import pyarrow as pa

    return pa.table(
        {
            "order_id": pa.array([], pa.int64()),
            "company": pa.array([], pa.string()),
            "order_day": pa.array([], pa.date32()),
            "revenue": pa.array([], pa.int64()),
        }
    )
