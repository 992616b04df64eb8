//! Publishing the layer's mart as a Paimon mart table (`serving_publish`, and
//! `serving_follow(..., publish := ...)` after every apply), for mart-only replicas elsewhere
//! to serve.
//!
//! Each publish is one Paimon commit of the groups that changed since the table's current
//! state: new and moved groups upserted, emptied groups deleted, so its size grows with the
//! change, not the mart; except that every `REWRITE_AFTER`-th commit (and the first change
//! after the table was read back) rewrites the whole mart in one OVERWRITE commit, because the
//! writer never compacts. `upserted`/`deleted` always count the groups that changed. The table's state is known from the previous publish to it (kept in
//! memory with the snapshot it made); when the table has moved since (another publisher, a
//! first publish, a reopen) it is read back from the lake instead, so after every publish the
//! table holds exactly this layer's mart. Nothing local changes; a failed publish commits
//! nothing to the lake.
//!
//! Every commit carries which fact state the mart is the mart of (`freshness`, in the commit
//! user: `core::fact_mark`), so a replica knows how fresh it is. When the fact moved but the
//! mart did not (a fact compaction, a correction that changes no group), the publish still
//! commits — an empty APPEND — so the table never claims an older fact state than it holds.
//! The table the layer is built from is never a target.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use duckdb::arrow::array::{Array, ArrayRef, Date32Array, Decimal128Array, Int64Array, StringArray};
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::fact_mark::{self, FactMark};
use crate::core::location::same_table;
use crate::core::mart::{Group, Mart};
use crate::core::schema::META;
use crate::core::source::Origin;
use crate::core::tier::{MART_COLUMNS, MART_KEY, MART_OPTIONS};
use crate::lake::{Access, LakeTable, NewTable, RowKind};
use crate::serving::freshness::layer_mark;
use crate::serving::mart_table::current_mart;
use crate::serving::meta::{elapsed_ms, not_built};

/// The table a first publish creates.
const MART_TABLE: NewTable<'static> =
    NewTable { columns: &MART_COLUMNS, primary_key: &MART_KEY, options: &MART_OPTIONS };

/// paimon-rust's writer does not compact: every commit adds files (per bucket, plus its input
/// changelog) that every reader of the table merges. After this many incremental commits a
/// publish rewrites the whole table instead (one OVERWRITE commit), so a replica's read stays
/// bounded by the mart, not by the number of publishes.
const REWRITE_AFTER: u32 = 32;

/// What the last publish of this database left in a mart table.
#[derive(Clone)]
pub struct Published {
    /// The target as given (`paimon:<dir>`, `s3://...`).
    pub target: String,
    path: String,
    /// The table's latest snapshot right after the publish.
    pub snapshot: Option<i64>,
    mart: Arc<Mart>,
    /// The fact state the publish's snapshot carries.
    mark: FactMark,
    /// Incremental commits made since the table was last written whole.
    since_rewrite: u32,
}

/// The last publish of a database, shared with its follower.
#[derive(Clone, Default)]
pub struct LastPublish(Arc<Mutex<Option<Published>>>);

impl LastPublish {
    pub fn get(&self) -> MutexGuard<'_, Option<Published>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One row of `serving_publish`.
#[derive(Debug, Clone)]
pub struct PublishSummary {
    pub target: String,
    pub snapshot: Option<i64>,
    pub upserted: i64,
    pub deleted: i64,
    pub elapsed_ms: f64,
}

/// The table directory or URL a target names: `paimon:<dir>`, `s3://...`, or a directory.
/// `function` is the one publishing (`serving_publish`, `serving_follow`), named by its errors.
pub fn target_path(function: &'static str, target: &str) -> Result<String> {
    let t = target.trim();
    let path = t.strip_prefix("paimon:").unwrap_or(t).trim();
    if path.is_empty() {
        return Err(Error::Refused {
            function,
            problem: format!(
                "the target '{target}' names no table: give paimon:<table directory> or s3://bucket/path/to/table"
            ),
        });
    }
    Ok(path.to_string())
}

/// Refuses the table the layer is built from as a target: a fact table would be refused as not
/// a mart table anyway, but a replica's own mart table would be written with what it read.
fn refuse_own_source(
    conn: &Connection,
    function: &'static str,
    target: &str,
    path: &str,
    access: &Access,
) -> Result<()> {
    let source: Option<String> =
        conn.query_row(&format!("SELECT source FROM {META}"), [], |r| r.get(0)).map_err(|e| not_built(function, e))?;
    let own =
        source.as_deref().and_then(|s| Origin::lake_path(s, &access.sandbox)).is_some_and(|s| same_table(&s, path));
    if own {
        return Err(Error::Refused {
            function,
            problem: format!(
                "'{target}' is the table the serving layer is built from ({}); publish the mart to another path",
                source.unwrap_or_default()
            ),
        });
    }
    Ok(())
}

/// Refuses a table that is not a mart table: another key, other columns or another merge engine.
fn check_shape(function: &'static str, table: &LakeTable, target: &str) -> Result<()> {
    let refuse = |problem: String| Error::Refused {
        function,
        problem: format!(
            "'{target}' {problem}; a mart table has columns {} with primary key ({}) and the deduplicate merge \
             engine (paimon_mart_ddl); publish to another path",
            MART_COLUMNS.iter().map(|(c, t)| format!("{c} {t}")).collect::<Vec<_>>().join(", "),
            MART_KEY.join(", ")
        ),
    };
    let keys = table.primary_keys();
    if keys.len() != MART_KEY.len() || !MART_KEY.iter().all(|k| keys.iter().any(|p| p == k)) {
        return Err(refuse(if keys.is_empty() {
            "holds a table without a primary key, not a mart table".to_string()
        } else {
            format!("holds a table keyed by ({}), not a mart table", keys.join(", "))
        }));
    }
    let columns = table.columns();
    let expected: Vec<(String, String)> = MART_COLUMNS.iter().map(|(c, t)| (c.to_string(), t.to_string())).collect();
    if columns != expected {
        let found = columns.iter().map(|(c, t)| format!("{c} {t}")).collect::<Vec<_>>().join(", ");
        return Err(refuse(format!("holds a table of another shape (columns {found})")));
    }
    let options = table.options();
    if let Some(engine) = options.get("merge-engine").filter(|e| e.as_str() != "deduplicate") {
        return Err(refuse(format!("holds a table with the '{engine}' merge engine")));
    }
    Ok(())
}

/// Reads a mart table's groups (its latest snapshot). A NULL revenue or count is kept as a
/// value no layer ever holds, so the next publish rewrites that group.
fn read_table(function: &'static str, table: &LakeTable) -> Result<Mart> {
    let scan = table.scan(None, None, Some(MART_COLUMNS.iter().map(|(c, _)| c.to_string()).collect()))?;
    let mut batches = Vec::new();
    for batch in scan.stream(1) {
        batches.push(typed(function, &batch?)?);
    }
    let mut groups = Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for b in &batches {
        let (company, day, revenue, orders) = columns(function, b)?;
        for i in 0..b.num_rows() {
            let revenue = if revenue.is_valid(i) { revenue.value(i) } else { i128::MIN };
            let orders = if orders.is_valid(i) { orders.value(i) } else { i64::MIN };
            groups.push(Group { company: company.value(i), day: day.value(i), revenue, orders });
        }
    }
    Ok(Mart::from_groups(&groups))
}

/// The four mart columns cast to the types the mart is compared and written in.
fn typed(function: &'static str, batch: &RecordBatch) -> Result<RecordBatch> {
    let failed = |e: duckdb::arrow::error::ArrowError| Error::internal(function, e.to_string());
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .zip(arrow_types())
        .map(|(c, t)| cast(c, &t))
        .collect::<std::result::Result<_, _>>()
        .map_err(failed)?;
    RecordBatch::try_new(schema(), columns).map_err(failed)
}

fn arrow_types() -> [DataType; 4] {
    [DataType::Utf8, DataType::Date32, DataType::Decimal128(38, 0), DataType::Int64]
}

fn schema() -> Arc<Schema> {
    let fields: Vec<Field> = MART_COLUMNS
        .iter()
        .zip(arrow_types())
        .map(|((name, _), t)| Field::new(*name, t, !MART_KEY.contains(name)))
        .collect();
    Arc::new(Schema::new(fields))
}

type Columns<'a> = (&'a StringArray, &'a Date32Array, &'a Decimal128Array, &'a Int64Array);

fn columns<'a>(function: &'static str, b: &'a RecordBatch) -> Result<Columns<'a>> {
    let wrong = || Error::internal(function, "a mart batch of unexpected types");
    Ok((
        b.column(0).as_any().downcast_ref().ok_or_else(wrong)?,
        b.column(1).as_any().downcast_ref().ok_or_else(wrong)?,
        b.column(2).as_any().downcast_ref().ok_or_else(wrong)?,
        b.column(3).as_any().downcast_ref().ok_or_else(wrong)?,
    ))
}

/// Mart groups as one Arrow batch of the mart table's columns.
pub fn mart_batch(groups: &[Group<'_>]) -> Result<RecordBatch> {
    let revenue = Decimal128Array::from(groups.iter().map(|g| g.revenue).collect::<Vec<_>>())
        .with_precision_and_scale(38, 0)
        .map_err(|e| Error::internal("serving", e.to_string()))?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(groups.iter().map(|g| g.company).collect::<Vec<_>>())),
        Arc::new(Date32Array::from(groups.iter().map(|g| g.day).collect::<Vec<_>>())),
        Arc::new(revenue),
        Arc::new(Int64Array::from(groups.iter().map(|g| g.orders).collect::<Vec<_>>())),
    ];
    RecordBatch::try_new(schema(), columns).map_err(|e| Error::internal("serving", e.to_string()))
}

/// The rows of a commit: upserts as they are now, deletes as they were (Paimon deletes by key).
fn rows(upserts: &[Group<'_>], deletes: &[Group<'_>]) -> Result<(RecordBatch, Vec<RowKind>)> {
    let batch = mart_batch(&[upserts, deletes].concat())?;
    let kinds = std::iter::repeat_n(RowKind::Upsert, upserts.len())
        .chain(std::iter::repeat_n(RowKind::Delete, deletes.len()))
        .collect();
    Ok((batch, kinds))
}

/// Publishes the layer's mart (as `conn` sees it) to `target`, creating the table on the first
/// publish, as `function` (`serving_publish`, or `serving_follow` publishing after its applies:
/// named by the errors and by the commits). `last` remembers what was published, for the next
/// publish's diff.
pub fn publish(
    conn: &Connection,
    function: &'static str,
    target: &str,
    access: &Access,
    last: &LastPublish,
) -> Result<PublishSummary> {
    let started = Instant::now();
    let path = target_path(function, target)?;
    refuse_own_source(conn, function, target, &path, access)?;
    let mart = current_mart(conn, function)?;
    let mark = layer_mark(conn, function)?;
    let user = fact_mark::commit_user(function, &mark);
    let (table, _created) = LakeTable::open_or_create(function, &path, access, &MART_TABLE)?;
    check_shape(function, &table, target)?;
    let latest = table.latest_snapshot()?;
    // What the table holds: what this database last published there, if nothing moved since.
    let known = last
        .get()
        .as_ref()
        .filter(|p| latest.is_some() && p.snapshot == latest && same_table(&p.path, &path))
        .map(|p| (p.mart.clone(), p.since_rewrite, Some(p.mark)));
    // A table read back (first publish, or another writer moved it) may hold any history of
    // files: counted as due for a rewrite at the next change.
    let (old, since_rewrite, carried) = match (known, latest) {
        (Some(k), _) => k,
        (None, None) => (Arc::new(Mart::default()), 0, None),
        (None, Some(id)) => (
            Arc::new(read_table(function, &table)?),
            REWRITE_AFTER,
            fact_mark::read(&table.commit_user(id)?).map(|(_, m)| m),
        ),
    };
    let changes = mart.changes_since(&old);
    let (snapshot, since_rewrite) = if changes.is_empty() {
        if !fact_mark::supersedes(&mark, carried.as_ref()) {
            (latest, since_rewrite)
        } else {
            // The same groups, but of a later fact state (or never said of which): said now.
            let (batch, kinds) = rows(&[], &[])?;
            (table.commit(&batch, &kinds, false, &user)?, since_rewrite)
        }
    } else if since_rewrite >= REWRITE_AFTER && !mart.is_empty() {
        let all: Vec<Group<'_>> = mart.groups().collect();
        let (batch, kinds) = rows(&all, &[])?;
        (table.commit(&batch, &kinds, true, &user)?, 0)
    } else {
        let (batch, kinds) = rows(&changes.upserts, &changes.deletes)?;
        (table.commit(&batch, &kinds, false, &user)?, since_rewrite + 1)
    };
    let (upserted, deleted) = (changes.upserts.len() as i64, changes.deletes.len() as i64);
    *last.get() =
        Some(Published { target: target.trim().to_string(), path, snapshot, mart: mart.clone(), mark, since_rewrite });
    Ok(PublishSummary {
        target: target.trim().to_string(),
        snapshot,
        upserted,
        deleted,
        elapsed_ms: elapsed_ms(started),
    })
}
