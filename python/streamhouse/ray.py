"""streamhouse.ray: the mart computed by a Ray cluster, for facts beyond one machine.

    from streamhouse.ray import build_mart
    build_mart("paimon:/lake/db.db/orders", "paimon:/lake/db.db/mart_daily", address="head:6379")

`build_mart` is a Ray job: pypaimon's Ray reader (`pypaimon.ray`, with pypaimon-rust's native merge)
reads the merged fact split by split across the cluster, each read task pre-aggregates its rows per
(company, order_day), a distributed group-by (a shuffle by a hash of the group, then one Arrow
group-by per partition) adds the partial groups up, and pypaimon's Ray writer writes the mart
table in ONE Paimon commit that overwrites its whole content: after the call the table holds
exactly the fact's mart, as `serving_build` of the same fact has it.

The mart table: `company STRING NOT NULL, order_day DATE NOT NULL, revenue DECIMAL(38, 0), orders
BIGINT`, primary key (company, order_day), merge engine deduplicate, fixed buckets; created on the
first build. An existing table of any other shape is refused, naming the table and the difference.

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
# Ray Data settings for the job (restored after it). The shuffles (the group-by by partition, the
# writer's by bucket) are task-based sorts on a small integer key: Ray's default hash shuffle starts
# aggregator actors for each execution (~5 s apiece on a small cluster), and Ray's own groupby
# aggregate combines group by group in Python (~30 s for 70k groups on 2 CPUs, against ~1.5 s
# here, where each partition's groups are added up by one vectorized Arrow group-by). No
# per-operator CPU reservation: with it a small cluster ran the read tasks one at a time on one node.
_DATA_CONTEXT = {
    "shuffle_strategy": "sort_shuffle_pull_based",
    "enable_progress_bars": False,
    "print_on_execution_start": False,
    "op_resource_reservation_enabled": False,
}
_PART = "__streamhouse_partition"
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
    elapsed_s: float
    reader: str  # "native" (pypaimon-rust), "python" (pypaimon's pure-Python fallback), "none" (no split)
    read_tasks: int  # Ray read tasks that ran
    read_nodes: int  # distinct cluster nodes those read tasks ran on


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
def _partial_groups(batch, partitions: int):
    """One block of merged fact rows -> its (company, order_day) partial groups, exact (revenue
    summed as DECIMAL(38, 0)), each with the partition of the group-by that adds it up. A NULL the
    serving layer refuses fails the job, naming the order."""
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
    return out.append_column(_PART, _partition(out, partitions))


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


def _final_groups(partials):
    """All partial groups of one partition -> its mart rows, in the mart table's Arrow types."""
    import pyarrow as pa

    grouped = partials.group_by(MART_KEY).aggregate([("revenue", "sum"), ("orders", "sum")])
    schema = _mart_arrow_schema()
    columns = [grouped.column(n) for n in ("company", "order_day", "revenue_sum", "orders_sum")]
    return pa.table([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _tally_class():
    import ray

    @ray.remote(num_cpus=0)
    class ReadTally:
        """Which reader each read task ran, and on which node."""

        def __init__(self):
            self.tasks = []

        def record(self, node: str, fallbacks: list[str]) -> None:
            self.tasks.append((node, fallbacks))

        def summary(self):
            return self.tasks

    return ReadTally


def _tallied(read_fn, tally):
    """A read task's function that also reports whether pypaimon read natively. pypaimon decides per
    TableRead and says why it falls back only through TableRead._native_fallback (logging at most),
    so the task records those calls while it reads (a Ray worker runs one task at a time)."""

    def run():
        import ray
        from pypaimon.read.table_read import TableRead

        fallbacks: list[str] = []
        original = TableRead._native_fallback

        def recording(self, reason, error=None, log=False):
            fallbacks.append(str(reason))
            return original(self, reason, error, log)

        TableRead._native_fallback = recording
        try:
            yield from read_fn()
        finally:
            TableRead._native_fallback = original
            ray.get(tally.record.remote(ray.get_runtime_context().get_node_id(), fallbacks))

    return run


def _datasource(provider, tally):
    from pypaimon.read.datasource.ray_datasource import RayDatasource
    from ray.data.datasource import ReadTask

    class TalliedDatasource(RayDatasource):
        def get_read_tasks(self, parallelism: int, **kwargs):
            return [
                ReadTask(
                    _tallied(task.read_fn, tally),
                    task.metadata,
                    schema=task.schema,
                    per_task_row_limit=task.per_task_row_limit,
                )
                for task in super().get_read_tasks(parallelism, **kwargs)
            ]

    return TalliedDatasource(provider)


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
    _require("ray.data")
    _require("pypaimon.ray")
    import pyarrow.compute as pc
    from pypaimon.ray import write_paimon
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
    # Both checked before Ray runs anything; the mart table is created only once its rows are ready.
    mart_table = _existing_mart(mart_catalog, mart_loc, storage)

    connected_here = not ray.is_initialized()
    if connected_here:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    ctx = ray.data.DataContext.get_current()
    saved = {name: getattr(ctx, name) for name in _DATA_CONTEXT}
    tally = None
    try:
        for name, value in _DATA_CONTEXT.items():
            setattr(ctx, name, value)
        tally = _tally_class().remote()
        provider = None
        if fact_snapshot is not None:
            provider = CatalogSplitProvider(
                table_identifier=_identifier(fact_loc),
                catalog_options={**storage, "warehouse": fact_loc.warehouse},
                projection=FACT_COLUMNS,
                snapshot_id=fact_snapshot,
                dynamic_options={"read.native.enabled": "true"},
            )
        # The distributed group-by: each read task's blocks become partial groups, which a shuffle
        # sends by partition (a hash of the group) to one task per partition that adds them up.
        partitions = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        if provider is None or not provider.splits():  # no snapshot, or nothing in it: an empty mart
            partial = ray.data.from_arrow(_partial_groups(_empty_fact(), partitions))
        else:
            # At most one read task per split (pypaimon's datasource caps it); Ray Data spreads them.
            source = ray.data.read_datasource(_datasource(provider, tally))
            partial = source.map_batches(
                _partial_groups, fn_kwargs={"partitions": partitions}, batch_format="pyarrow", batch_size=None
            )
        mart_rows = partial.groupby(_PART).map_groups(_final_groups, batch_format="pyarrow").materialize()
        groups = orders = 0
        for batch in mart_rows.iter_batches(batch_format="pyarrow", batch_size=None):
            groups += batch.num_rows
            orders += int(pc.sum(batch.column("orders")).as_py() or 0)
        if mart_table is None:
            mart_table = _create_mart(mart_catalog, mart_loc)
        written = write_paimon(
            mart_rows,
            _identifier(mart_loc),
            {**storage, "warehouse": mart_loc.warehouse},
            overwrite=True,
            hash_fixed_precluster="map_groups",
        )
        tasks = ray.get(tally.summary.remote())
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
        for name, value in saved.items():
            setattr(ctx, name, value)
        if tally is not None:
            ray.kill(tally)
        if connected_here:
            ray.shutdown()

    snapshot = written.snapshot_id if written is not None else None
    if snapshot is None:  # an empty overwrite of an empty table commits nothing
        latest = mart_table.snapshot_manager().get_latest_snapshot()
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
