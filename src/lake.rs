//! The lake reader: Apache Paimon tables read with the `paimon` crate (Apache paimon-rust),
//! merge engines applied by Paimon itself (deduplicate, partial-update, aggregation, first-row,
//! `sequence.field`, row-kind deletes). We never parse Paimon files ourselves.
//!
//! paimon-rust speaks Arrow 58 and async; DuckDB's Rust binding speaks Arrow 60. Batches cross
//! over through the Arrow C Data Interface (no copy), and each call drives its own small
//! current-thread tokio runtime, so nothing async outlives a DuckDB callback.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use duckdb::arrow::datatypes::SchemaRef as Schema60;
use duckdb::arrow::record_batch::RecordBatch as Batch60;
use futures::TryStreamExt;
use paimon::catalog::Identifier;
use paimon::io::FileIO;
use paimon::table::SchemaManager;
use paimon::{IncrementalScanMode, Table};

use crate::error::{Error, Result};
use crate::sandbox::Sandbox;

/// An opened Paimon table directory.
pub struct LakeTable {
    table: Table,
    path: String,
}

/// One row of `paimon_snapshots`.
#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    pub id: i64,
    pub time_millis: i64,
    pub commit_kind: String,
    pub total_records: Option<i64>,
    pub delta_records: Option<i64>,
    pub changelog_records: Option<i64>,
}

fn lake_err(function: &'static str, path: &str, problem: impl std::fmt::Display) -> Error {
    Error::Lake { function, path: path.into(), problem: problem.to_string() }
}

fn block_on<T>(fut: impl std::future::Future<Output = T>) -> std::io::Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(fut))
}

/// `paimon:<dir>` or a directory that holds a Paimon table (`schema/`): the Paimon path, if so.
/// The filesystem is only looked at where the sandbox allows; a path it forbids that is not
/// a file source (those DuckDB checks itself) is refused here, naming the setting.
pub fn paimon_path(source: &str, sandbox: &Sandbox) -> Result<Option<String>> {
    if let Some(rest) = source.strip_prefix("paimon:") {
        return Ok(Some(rest.trim().to_string()));
    }
    let s = source.trim();
    if !sandbox.permits(s) {
        let file_like = crate::source::Source::parse(s).is_ok();
        let path_like = s.contains('/') || s.contains('\\');
        return if path_like && !file_like { Err(sandbox.denied("serving", s)) } else { Ok(None) };
    }
    let p = Path::new(s);
    Ok((p.is_dir() && p.join("schema").is_dir()).then(|| s.to_string()))
}

/// Arrow 58 (paimon) → Arrow 60 (DuckDB) through the C Data Interface, without copying buffers.
fn to_arrow60(batch: &arrow_array::RecordBatch) -> std::result::Result<Batch60, String> {
    use arrow_array::Array as _;
    let rows = batch.num_rows();
    let as_struct: arrow_array::StructArray = batch.clone().into();
    let (array, schema) = arrow_array::ffi::to_ffi(&as_struct.to_data()).map_err(|e| e.to_string())?;
    // SAFETY: FFI_ArrowArray / FFI_ArrowSchema are the #[repr(C)] structs the Arrow C Data
    // Interface specifies; both arrow-rs versions define exactly that layout, so moving them
    // bitwise hands ownership (and the release callback) from one to the other.
    let (array, schema) = unsafe {
        (
            std::mem::transmute::<arrow_array::ffi::FFI_ArrowArray, duckdb::arrow::ffi::FFI_ArrowArray>(array),
            std::mem::transmute::<arrow_array::ffi::FFI_ArrowSchema, duckdb::arrow::ffi::FFI_ArrowSchema>(schema),
        )
    };
    // SAFETY: `array` and `schema` were just exported by arrow-rs and are valid and unshared.
    let data = unsafe { duckdb::arrow::ffi::from_ffi(array, &schema) }.map_err(|e| e.to_string())?;
    let batch60: Batch60 = duckdb::arrow::array::StructArray::from(data).into();
    debug_assert_eq!(batch60.num_rows(), rows);
    Ok(batch60)
}

/// Linux's PATH_MAX: no longer path can be opened, so none is worth resolving.
pub const MAX_PATH: usize = 4096;
/// Paimon's JSON metadata (schemas, snapshots, hints) is small; paimon-rust reads such a file
/// whole, so a runaway one (a device, a huge file) is refused before it can exhaust memory.
const MAX_METADATA_BYTES: u64 = 64 << 20;

/// Refuses a table whose tree holds anything paimon-rust must not open: a FIFO (its open blocks
/// forever), a socket or device (`/dev/zero` never ends), a symlink loop, or an oversized
/// metadata file. Looks at file types and sizes only, never at contents.
fn check_files(dir: &Path) -> std::result::Result<(), String> {
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let p = entry.path();
            let shown = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let meta = std::fs::metadata(&p).map_err(|e| format!("cannot read '{shown}': {e}"))?;
            if meta.is_dir() {
                // Paimon tables are shallow (partitions, buckets); a deep tree is a loop or junk.
                if depth < 16 {
                    pending.push((p, depth + 1));
                }
            } else if !meta.is_file() {
                return Err(format!(
                    "'{shown}' is not a regular file (a FIFO, socket or device cannot be part of a table)"
                ));
            } else if meta.len() > MAX_METADATA_BYTES
                && ["schema", "snapshot"].iter().any(|m| p.parent().is_some_and(|parent| parent.ends_with(m)))
            {
                return Err(format!("metadata file '{shown}' is {} bytes, more than Paimon ever writes", meta.len()));
            }
        }
    }
    Ok(())
}

impl LakeTable {
    /// Opens the table at `path` (absolute, or relative to the working directory); no catalog.
    /// Refused, before anything is read, where DuckDB's sandbox settings forbid the directory.
    pub fn open(function: &'static str, path: &str, sandbox: &Sandbox) -> Result<LakeTable> {
        if path.contains('\0') {
            return Err(lake_err(function, &path.replace('\0', "\\0"), "a path cannot contain a NUL character"));
        }
        if path.len() > MAX_PATH {
            return Err(lake_err(function, path, format!("the path is longer than {MAX_PATH} bytes")));
        }
        sandbox.check_tree(function, path)?;
        let dir: PathBuf = std::path::absolute(path).map_err(|e| lake_err(function, path, e))?;
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(lake_err(function, path, "not a directory")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(lake_err(function, path, "no such directory"))
            }
            Err(e) => return Err(lake_err(function, path, format!("cannot read the directory: {e}"))),
        }
        if let Err(e) = std::fs::read_dir(&dir) {
            return Err(lake_err(function, path, format!("cannot read the directory: {e}")));
        }
        if !dir.join("schema").is_dir() {
            return Err(lake_err(function, path, "not a Paimon table (it has no schema/ directory)"));
        }
        check_files(&dir).map_err(|problem| lake_err(function, path, problem))?;
        let location = dir.to_string_lossy().into_owned();
        let table = block_on(async {
            let file_io = FileIO::from_path(&location)?.build()?;
            let schema = SchemaManager::new(file_io.clone(), location.clone()).latest().await?;
            Ok::<_, paimon::Error>(
                schema.map(|s| Table::new(file_io, Identifier::new("lake", "t"), location.clone(), (*s).clone(), None)),
            )
        })
        .map_err(|e| lake_err(function, path, e))?
        .map_err(|e| lake_err(function, path, e))?
        .ok_or_else(|| lake_err(function, path, "not a Paimon table (no schema-N file under schema/)"))?;
        Ok(LakeTable { table, path: path.into() })
    }

    fn err(&self, function: &'static str, problem: impl std::fmt::Display) -> Error {
        lake_err(function, &self.path, problem)
    }

    pub fn options(&self) -> HashMap<String, String> {
        self.table.schema().options().clone()
    }

    /// The table's columns as an Arrow 60 schema (what DuckDB will be told at bind).
    pub fn schema(&self, function: &'static str) -> Result<Schema60> {
        let fields = self.table.schema().fields();
        let schema58 = paimon::arrow::build_target_arrow_schema(fields).map_err(|e| self.err(function, e))?;
        let empty = arrow_array::RecordBatch::new_empty(schema58);
        Ok(to_arrow60(&empty).map_err(|e| self.err(function, e))?.schema())
    }

    pub fn latest_snapshot(&self, function: &'static str) -> Result<Option<i64>> {
        block_on(self.table.snapshot_manager().get_latest_snapshot_id())
            .map_err(|e| self.err(function, e))?
            .map_err(|e| self.err(function, e))
    }

    /// When snapshot `id` was committed (milliseconds since the epoch).
    pub fn snapshot_time_millis(&self, function: &'static str, id: i64) -> Result<i64> {
        let snapshot = block_on(self.table.snapshot_manager().get_snapshot(id))
            .map_err(|e| self.err(function, e))?
            .map_err(|e| self.err(function, e))?;
        Ok(snapshot.time_millis() as i64)
    }

    pub fn snapshots(&self, function: &'static str) -> Result<Vec<SnapshotInfo>> {
        let list = block_on(self.table.snapshot_manager().list_all())
            .map_err(|e| self.err(function, e))?
            .map_err(|e| self.err(function, e))?;
        Ok(list
            .iter()
            .map(|s| SnapshotInfo {
                id: s.id(),
                time_millis: s.time_millis() as i64,
                commit_kind: format!("{:?}", s.commit_kind()),
                total_records: s.total_record_count(),
                delta_records: s.delta_record_count(),
                changelog_records: s.changelog_record_count(),
            })
            .collect())
    }

    /// The merged (batch) state at `snapshot` (latest when None), with the snapshot id read.
    /// An empty table (no snapshot yet) reads as no rows and snapshot None.
    pub fn read(&self, function: &'static str, snapshot: Option<i64>) -> Result<(Option<i64>, Vec<Batch60>)> {
        self.read_where(function, snapshot, None)
    }

    /// `key IN keys` as a Paimon predicate, when the key column is an integer type (other
    /// types are not narrowed: the caller filters exactly anyway).
    fn key_filter(&self, key: &str, keys: &[i64]) -> Option<paimon::spec::Predicate> {
        use paimon::spec::{DataType, Datum, PredicateBuilder};
        let fields = self.table.schema().fields();
        let field = fields.iter().find(|f| f.name() == key)?;
        let datum: fn(i64) -> Option<Datum> = match field.data_type() {
            DataType::BigInt(_) => |k| Some(Datum::Long(k)),
            DataType::Int(_) => |k| i32::try_from(k).ok().map(Datum::Int),
            DataType::SmallInt(_) => |k| i16::try_from(k).ok().map(Datum::SmallInt),
            DataType::TinyInt(_) => |k| i8::try_from(k).ok().map(Datum::TinyInt),
            _ => return None,
        };
        PredicateBuilder::new(fields).is_in(key, keys.iter().filter_map(|&k| datum(k)).collect()).ok()
    }

    /// Like `read`, narrowed to the rows whose `key` column is in `keys` when given. Paimon uses
    /// the predicate to skip data files by their key statistics (a primary-key predicate is
    /// safe under merge-on-read: every version of a key carries the key); it may still return
    /// other rows, so the caller filters exactly.
    pub fn read_where(
        &self,
        function: &'static str,
        snapshot: Option<i64>,
        keys: Option<(&str, &[i64])>,
    ) -> Result<(Option<i64>, Vec<Batch60>)> {
        let latest = self.latest_snapshot(function)?;
        let target = match (snapshot, latest) {
            (None, None) => return Ok((None, Vec::new())),
            (None, Some(last)) => last,
            (Some(id), Some(last)) if (1..=last).contains(&id) => id,
            (Some(id), Some(last)) => {
                return Err(self.err(function, format!("snapshot {id} does not exist (latest is {last})")))
            }
            (Some(id), None) => {
                return Err(self.err(function, format!("snapshot {id} does not exist (the table has no snapshot)")))
            }
        };
        // first-row keeps the earliest row per key; Paimon's batch scan would skip uncompacted
        // level-0 files for it, which hides rows never compacted: read every file instead.
        let first_row = self.options().get("merge-engine").is_some_and(|e| e == "first-row");
        let batches = block_on(async {
            let pinned = self
                .table
                .copy_with_time_travel_strict(HashMap::from([("scan.snapshot-id".to_string(), target.to_string())]))
                .await?;
            let mut rb = pinned.new_read_builder();
            if let Some(filter) = keys.and_then(|(key, keys)| self.key_filter(key, keys)) {
                rb.with_filter(filter);
            }
            let scan = if first_row { rb.new_scan().with_scan_all_files() } else { rb.new_scan() };
            let plan = scan.plan().await?;
            rb.new_read()?.to_arrow(plan.splits())?.try_collect::<Vec<_>>().await
        })
        .map_err(|e| self.err(function, e))?
        .map_err(|e| self.err(function, e))?;
        let converted = batches.iter().map(to_arrow60).collect::<std::result::Result<Vec<_>, _>>();
        Ok((Some(target), converted.map_err(|e| self.err(function, e))?))
    }

    /// Every change of snapshot `id` alone (its changelog, or its delta when the table produces
    /// none), with a leading `rowkind` column (`+I`, `-U`, `+U`, `-D`).
    pub fn changes_of(&self, function: &'static str, id: i64) -> Result<Vec<Batch60>> {
        let batches = block_on(async {
            let rb = self.table.new_read_builder();
            let plan = rb.new_incremental_scan(IncrementalScanMode::Auto, id - 1, id).plan().await?;
            rb.new_read()?.to_audit_log_arrow(&plan)?.try_collect::<Vec<_>>().await
        })
        .map_err(|e| self.err(function, e))?
        .map_err(|e| self.err(function, e))?;
        batches.iter().map(to_arrow60).collect::<std::result::Result<Vec<_>, _>>().map_err(|e| self.err(function, e))
    }
}
