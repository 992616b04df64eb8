//! Planning a read of a table: the merged state of one snapshot (optionally narrowed by a key
//! predicate Paimon uses to skip files, and projected to the columns named) as a [`Scan`], or
//! the changes of a range of snapshots, in commit order. A planned read says how each split will
//! be read ([`SplitRoute`], `paimon_read_plan`), whether DuckDB's own Parquet reader can read it
//! all ([`Scan::plain_sql`]), and is read as units on any threads ([`Scan::into_units`]) or on
//! reader threads of ours into a bounded channel ([`Scan::stream`]). Every file a plan names must
//! pass DuckDB's sandbox (`confine`) before anything is read.

use std::collections::HashMap;
use std::sync::Arc;

use duckdb::arrow::record_batch::RecordBatch as Batch60;
use paimon::spec::Predicate;
use paimon::table::DataSplit;
use paimon::{IncrementalScanMode, Table};

use super::confine::confine;
use super::native;
use super::plain;
use super::site::Site;
use super::stream::{run_stream, spawn_reader, BatchStream};
use super::table::LakeTable;
use super::units::{NativeRead, UnitContext, Units};
use crate::core::error::Result;

impl LakeTable {
    /// `key IN keys` as a Paimon predicate, when the key column is an integer type (other
    /// types are not narrowed: the caller filters exactly anyway).
    fn key_filter(&self, key: &str, keys: &[i64]) -> Option<Predicate> {
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

    /// Plans a read of the merged (batch) state at `snapshot` (latest when None): which splits
    /// to read, narrowed to the rows whose `key` column is in `keys` when given, and only the
    /// `columns` named (all when None). Paimon uses a key predicate to skip data files by their
    /// key statistics (safe under merge-on-read: every version of a key carries the key); it
    /// may still return other rows, so the caller filters exactly.
    pub fn scan(
        &self,
        snapshot: Option<i64>,
        keys: Option<(&str, &[i64])>,
        columns: Option<Vec<String>>,
    ) -> Result<Scan> {
        self.check_readable()?;
        let Some(target) = self.target_snapshot(snapshot)? else {
            return Ok(Scan {
                snapshot: None,
                table: None,
                splits: Vec::new(),
                columns,
                filter: None,
                place: self.place.clone(),
                remote: self.remote,
                native: true,
                external_access: self.sandbox.external_access,
            });
        };
        let filter = keys.and_then(|(key, keys)| self.key_filter(key, keys));
        let table = &self.table;
        let (pinned, splits) = self.place.block_on(self.remote, async {
            let mut pinned = table
                .copy_with_time_travel_strict(HashMap::from([("scan.snapshot-id".to_string(), target.to_string())]))
                .await?;
            // Batches of DuckDB's vector size (paimon-rust's default is 1024): each chunk DuckDB
            // pulls is full, with half the per-batch overheads.
            if !pinned.schema().options().contains_key("read.batch-size") {
                pinned = pinned.copy_with_options(HashMap::from([(
                    "read.batch-size".to_string(),
                    crate::core::VECTOR_SIZE.to_string(),
                )]));
            }
            let mut rb = pinned.new_read_builder();
            if let Some(filter) = &filter {
                rb.with_filter(filter.clone());
            }
            let plan = full_state(rb.new_scan(), pinned.schema().options()).plan().await?;
            let splits = plan.splits().to_vec();
            Ok((pinned, splits))
        })?;
        confine(&self.sandbox, &splits).map_err(|problem| self.place.err(problem))?;
        Ok(Scan {
            snapshot: Some(target),
            table: Some(pinned),
            splits,
            columns,
            filter,
            place: self.place.clone(),
            remote: self.remote,
            native: true,
            external_access: self.sandbox.external_access,
        })
    }

    /// Every change of snapshots `from..=to`, in commit order, each batch with its snapshot
    /// id: the snapshot's changelog, or its delta when the table produces none, with a leading
    /// `rowkind` column (`+I`, `-U`, `+U`, `-D`). Read on one thread (order matters), streamed.
    pub fn changes(&self, from: i64, to: i64) -> BatchStream<(i64, Batch60)> {
        let (tx, mut stream) = BatchStream::channel(2);
        if let Err(e) = self.check_readable() {
            stream.failed = Some(e);
            return stream;
        }
        let table = self.table.clone();
        let place = self.place.clone();
        let remote = self.remote;
        let sandbox = self.sandbox.clone();
        spawn_reader(&self.place, &mut stream, tx, move |tx| {
            let current = table.schema().id();
            for id in from..=to {
                // paimon-rust reads every snapshot's changes with the current schema; changes
                // written under an earlier one may not map onto it, and the error says so.
                let written = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()
                    .and_then(|rt| rt.block_on(table.snapshot_manager().get_snapshot(id)).ok())
                    .map(|snapshot| snapshot.schema_id());
                let place = place.with_note(written.filter(|&w| w != current).map(|w| {
                    format!(
                        "reading the changes of snapshot {id}, written with schema {w} while the table now has schema \
                         {current} (reading changes across a schema change such as an added, dropped or renamed column is not \
                         supported)"
                    )
                }));
                let sent = run_stream(&place, remote, &tx, |batch| Ok((id, batch)), async {
                    let rb = table.new_read_builder();
                    let plan = rb.new_incremental_scan(IncrementalScanMode::Auto, id - 1, id).plan().await?;
                    if let Err(message) = confine(&sandbox, &plan.data_splits()) {
                        return Err(paimon::Error::DataInvalid { message, source: None });
                    }
                    rb.new_read()?.to_audit_log_arrow(&plan)
                });
                if !sent {
                    return;
                }
            }
        });
        stream
    }
}

/// The scan that yields a table's full merged state. Paimon's batch scan skips level-0 files
/// where it can read compacted levels alone: for first-row (it keeps the earliest row, so
/// uncompacted rows would be hidden) and for deletion-vector tables (whose batch view is
/// "compacted rows only") that would not be the state a bounded streaming read reaches, so
/// every file is read and merged instead.
fn full_state<'a>(
    scan: paimon::table::TableScan<'a>,
    options: &HashMap<String, String>,
) -> paimon::table::TableScan<'a> {
    let first_row = options.get("merge-engine").is_some_and(|e| e == "first-row");
    let dv = options.get("deletion-vectors.enabled").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if first_row || dv {
        scan.with_scan_all_files()
    } else {
        scan
    }
}

/// A planned read: the splits of one snapshot, ready to be read in parallel (a clone reads the
/// same splits again: a build's probes re-read what its load read).
#[derive(Clone)]
pub struct Scan {
    /// The snapshot read (None: the table has no snapshot, so no rows).
    pub snapshot: Option<i64>,
    table: Option<Table>,
    splits: Vec<DataSplit>,
    columns: Option<Vec<String>>,
    filter: Option<Predicate>,
    place: Site,
    remote: bool,
    /// Whether splits the native path can read are read by it (else all by paimon-rust).
    native: bool,
    /// DuckDB's `enable_external_access` when the table was opened (see `plain_sql`).
    external_access: bool,
}

/// How one split of a planned read is read (`paimon_read_plan`).
#[derive(Debug, Clone)]
pub struct SplitRoute {
    /// The bucket's directory, relative to the table's.
    pub bucket_path: String,
    pub bucket: i32,
    pub files: usize,
    pub runs: usize,
    pub reader: &'static str,
    pub reason: Option<String>,
}

/// Rows per batch the native path decodes and merges.
const NATIVE_BATCH_ROWS: usize = 16 * crate::core::VECTOR_SIZE;

impl Scan {
    /// Reads every split with paimon-rust's reader (`reader := 'paimon-rust'`): the reference
    /// the native path is tested and benchmarked against.
    pub fn paimon_only(mut self) -> Scan {
        self.native = false;
        self
    }

    fn native_read(&self) -> Result<Option<NativeRead>> {
        let Some(table) = &self.table else { return Ok(None) };
        let schema = table.schema();
        let target = paimon::arrow::build_target_arrow_schema(schema.fields()).map_err(|e| self.place.paimon_err(e))?;
        let field = |name: &str| target.field_with_name(name).ok().cloned();
        let keys: Vec<arrow_schema::Field> = schema.primary_keys().iter().filter_map(|k| field(k)).collect();
        let outputs: Vec<arrow_schema::Field> = match &self.columns {
            Some(names) => names.iter().filter_map(|n| field(n)).collect(),
            None => target.fields().iter().map(|f| f.as_ref().clone()).collect(),
        };
        let options = schema.options();
        let facts = native::Facts {
            schema_id: schema.id(),
            key_types: keys.iter().map(|f| f.data_type().clone()).collect(),
            deletion_vectors: options.get("deletion-vectors.enabled").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            remote: self.remote,
            engine: native::Facts::engine(options, !keys.is_empty()),
            lookup: native::lookup::reads_with_rule(options, !keys.is_empty()),
            levels_matter: native::lookup::levels_matter(options, !keys.is_empty()),
        };
        // Decoding and merging cost per batch as well as per row: batches of many vectors
        // (DuckDB takes them a vector at a time), still a few MB per sorted run in flight.
        let batch_size = NATIVE_BATCH_ROWS;
        // Text and bytes are decoded as views (see `native::decode::footer`): the merge and
        // DuckDB's vectors take them as they are.
        let views = |fields: Vec<arrow_schema::Field>| fields.into_iter().map(native::decode::as_view).collect();
        let shape = native::Shape { outputs: views(outputs), keys: views(keys) };
        Ok(Some(NativeRead { facts, shape, batch_size }))
    }

    /// Each split's route: what reads it, and why paimon-rust does where it does.
    pub fn routes(&self) -> Result<Vec<SplitRoute>> {
        let read = self.native_read()?;
        Ok(self
            .splits
            .iter()
            .map(|split| {
                let (route, runs) = match (&read, self.native) {
                    (Some(r), true) => native::route(split, &r.facts),
                    (Some(r), false) => match native::lookup::refusal(
                        split,
                        r.facts.levels_matter.as_deref(),
                        native::lookup::PAIMON_RUST,
                    ) {
                        Some(why) => (native::Route::Refused(why), Vec::new()),
                        None => (native::Route::PaimonRust(native::lookup::PAIMON_RUST.into()), Vec::new()),
                    },
                    _ => (native::Route::PaimonRust(native::lookup::PAIMON_RUST.into()), Vec::new()),
                };
                let root = table_root(self.table.as_ref());
                let ordered = route == native::Route::Merge
                    && runs.len() > 1
                    && native::in_sequence_order(split.data_files(), &runs).is_some();
                SplitRoute {
                    bucket_path: split.bucket_path().strip_prefix(&root).unwrap_or(split.bucket_path()).to_string(),
                    bucket: split.bucket(),
                    files: split.data_files().len(),
                    runs: runs.len(),
                    reader: route.name(),
                    reason: match ordered {
                        true => Some(native::ORDERED_MERGE.to_string()),
                        false => route.reason().map(str::to_string),
                    },
                }
            })
            .collect())
    }

    /// The SQL that has DuckDB's own Parquet reader read this planned read, where that gives
    /// exactly what the read gives (every split plain: [`native::plain_files`]); None where any
    /// split needs more, for a read narrowed by keys, for a table without files, and under a
    /// locked-down sandbox: DuckDB's reader would judge the files' resolved paths by its own
    /// rule (DuckDB 1.4 does not follow symlinks in allowed_directories), where the table was
    /// checked by ours, which is tested against DuckDB's.
    pub fn plain_sql(&self) -> Result<Option<String>> {
        if !self.native || self.remote || self.filter.is_some() || !self.external_access {
            return Ok(None);
        }
        let Some(read) = self.native_read()? else { return Ok(None) };
        let mut files = Vec::new();
        for split in &self.splits {
            match native::plain_files(split, &read.facts, &read.shape) {
                Some(f) => files.extend(f),
                None => return Ok(None),
            }
        }
        Ok(plain::read_parquet_sql(&read.shape.outputs, &files))
    }

    /// The read cut into units any thread may take (see [`Units`]).
    pub fn into_units(self) -> Result<Units> {
        let read = self.native_read()?;
        let Some(table) = self.table else {
            return Ok(Units::new(Vec::new(), None));
        };
        let units = match &read {
            Some(r) => native::units(self.splits, &r.facts, self.native).map_err(|why| self.place.err(why))?,
            None => self.splits.into_iter().map(native::Unit::Paimon).collect(),
        };
        let ctx = UnitContext {
            table,
            columns: self.columns,
            filter: self.filter,
            read,
            place: self.place,
            remote: self.remote,
        };
        Ok(Units::new(units, Some(ctx)))
    }

    /// Reads the planned work on up to `threads` reader threads of our own, one unit at a time
    /// each, for a consumer on one thread (a fold in Rust).
    pub fn stream(self, threads: usize) -> BatchStream<Batch60> {
        let (tx, mut stream) = BatchStream::channel(threads.max(1) + 1);
        let place = self.place.clone();
        let units = match self.into_units() {
            Ok(u) => Arc::new(u),
            Err(e) => {
                stream.failed = Some(e);
                return stream;
            }
        };
        for _ in 0..threads.clamp(1, units.len().max(1)) {
            let units = units.clone();
            spawn_reader(&place, &mut stream, tx.clone(), move |tx| {
                while let Some(unit) = units.next() {
                    let batches = match unit {
                        Ok(b) => b,
                        Err(e) => {
                            tx.send(Err(e));
                            return;
                        }
                    };
                    for item in batches {
                        let failed = item.is_err();
                        if !tx.send(item) || failed {
                            return;
                        }
                    }
                }
            });
        }
        stream
    }
}

/// A table's location as its bucket paths begin (with the trailing slash).
fn table_root(table: Option<&Table>) -> String {
    table.map(|t| format!("{}/", t.location().trim_end_matches('/'))).unwrap_or_default()
}
