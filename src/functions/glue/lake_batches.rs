//! The shared pieces of the lake table functions: their path/snapshot/options arguments, the
//! columns they declare, and the emission of streamed Arrow batches into DuckDB data chunks
//! (at most one vector, 2048 rows, per chunk; several DuckDB threads may pull at once).

use std::sync::{Condvar, Mutex};

use duckdb::arrow::datatypes::DataType;
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{to_duckdb_logical_type, BindInfo, InitInfo, Value};

#[cfg(duckdb14)]
use super::settings::ValueExt;
use crate::core::error::{Error, Result};
use crate::core::source::Origin;
use crate::host::sandbox::Sandbox;
use crate::host::session::Running;
use crate::lake::LakeOptions;
use crate::serving::state::SharedDatabase;

use crate::core::VECTOR_SIZE as CHUNK;

/// The `path` argument (the first, VARCHAR) of a lake function.
pub fn path_param(bind: &BindInfo, function: &'static str) -> Result<String> {
    let v = bind.get_parameter(0);
    if v.is_null() {
        return Err(Error::NullArgument { function, parameter: "path" });
    }
    Ok(paimon_path(&super::value::text_arg(&v, function, "path")?))
}

/// A Paimon table's path as given to a lake function: `paimon:<dir>` is how every other
/// function names a Paimon table, so the prefix means the same here.
fn paimon_path(raw: &str) -> String {
    raw.trim_start().strip_prefix("paimon:").map_or(raw, str::trim).to_string()
}

/// A snapshot id asked for by name; an explicit NULL is refused (it would otherwise read the
/// latest snapshot, which is not what a NULL id asks for).
pub fn snapshot_param(bind: &BindInfo, function: &'static str, name: &'static str) -> Result<Option<i64>> {
    match bind.get_named_parameter(name) {
        Some(v) if v.is_null() => Err(Error::NullArgument { function, parameter: name }),
        Some(v) => Ok(Some(v.to_int64())),
        None => Ok(None),
    }
}

/// The `reader` named parameter of `paimon_scan`: `native` (the default: the native path where
/// it applies, paimon-rust elsewhere) or `paimon-rust`. True for paimon-rust.
pub fn reader_param(bind: &BindInfo, function: &'static str) -> Result<bool> {
    let Some(v) = bind.get_named_parameter("reader").filter(|v| !v.is_null()) else { return Ok(false) };
    let text = super::value::text_arg(&v, function, "reader")?;
    match text.to_ascii_lowercase().as_str() {
        "native" => Ok(false),
        "paimon-rust" => Ok(true),
        _ => Err(Error::BadArgument {
            function,
            parameter: "reader",
            value: text,
            problem: "the reader is 'native' (the default) or 'paimon-rust'".into(),
        }),
    }
}

/// `options := MAP {'s3.endpoint': ..., ...}`: storage options in Paimon's own keys.
pub const OPTIONS: &str = "options";

pub fn options_type() -> LogicalTypeHandle {
    let varchar = LogicalTypeHandle::from(LogicalTypeId::Varchar);
    LogicalTypeHandle::map(&varchar, &varchar)
}

/// The `(key, value)` texts of the MAP named parameter `name` (None when absent or NULL); a
/// NULL key or value is refused, naming it as `what`.
pub fn map_param(
    bind: &BindInfo,
    function: &'static str,
    name: &'static str,
    what: &str,
) -> Result<Option<Vec<(String, String)>>> {
    let Some(v) = bind.get_named_parameter(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    // Each key/value handle DuckDB returns below is owned by a `Value` that destroys it.
    let raw = super::value::raw_value(&v);
    let bad = |problem: String| Error::BadArgument { function, parameter: name, value: "MAP {…}".into(), problem };
    // SAFETY: `raw` is a live MAP value (the parameter is declared MAP) while `v` is borrowed.
    let size = unsafe { duckdb::ffi::duckdb_get_map_size(raw) };
    let mut pairs = Vec::new();
    for i in 0..size {
        // SAFETY: `i < size`; the returned handle is new and owned by the `Value` that wraps it.
        let key = Value::from(unsafe { duckdb::ffi::duckdb_get_map_key(raw, i) });
        // SAFETY: as for the key.
        let value = Value::from(unsafe { duckdb::ffi::duckdb_get_map_value(raw, i) });
        if key.is_null() {
            return Err(bad(format!("an {what} key is NULL")));
        }
        let key = super::value::text_arg(&key, function, name)?;
        if value.is_null() {
            return Err(bad(format!("{what} '{key}' is NULL")));
        }
        let value = super::value::text_arg(&value, function, name)
            .map_err(|_| bad(format!("{what} '{key}' holds a NUL character")))?;
        pairs.push((key, value));
    }
    Ok(Some(pairs))
}

/// `columns := MAP {...}` (`core::mapping`), checked at bind.
pub fn columns_param(bind: &BindInfo, function: &'static str) -> Result<Option<crate::core::mapping::ColumnMap>> {
    let Some(pairs) = map_param(bind, function, COLUMNS, "column")? else { return Ok(None) };
    let map = crate::core::mapping::ColumnMap::parse(function, &pairs)?;
    Ok((!map.is_empty()).then_some(map))
}

/// `columns := MAP {'order_id': 'id', ...}`: how the source feeds the serving columns.
pub const COLUMNS: &str = "columns";

/// The `options` named parameter (empty when absent or NULL). Keys and values must be non-NULL
/// text; a value is never echoed back, since it may be a secret. Refused when none of the
/// call's `tables` (as named) is on object storage: nothing would use them.
pub fn options_param(bind: &BindInfo, function: &'static str, tables: &[&str]) -> Result<LakeOptions> {
    let Some(pairs) = map_param(bind, function, OPTIONS, "option")? else {
        return Ok(LakeOptions::default());
    };
    let options = LakeOptions::new(pairs);
    if let Some(key) = options.unknown_key() {
        let known: Vec<String> = crate::lake::S3_KEYS.iter().map(|k| format!("s3.{k}")).collect();
        return Err(Error::BadArgument {
            function,
            parameter: OPTIONS,
            value: "MAP {…}".into(),
            problem: format!(
                "unknown option key '{}' (a misspelt key would be ignored by the storage); the keys are {}",
                crate::core::error::shown(key),
                known.join(", ")
            ),
        });
    }
    options.check_used(function, tables)?;
    Ok(options)
}

/// What a function's argument names, for the check at bind (`table_arg_path`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableArg {
    /// A Paimon table's path (`paimon:` optional): `paimon_snapshots(path)`.
    Path,
    /// A source string: a Paimon table, or a relation or file checked when the function runs.
    Source,
    /// `fact :=`: a Paimon fact table; a relation there is refused.
    Fact,
}

/// The Paimon table an argument names, to be opened at bind (`glue::table`): a table that
/// cannot be opened — missing, not a Paimon table, forbidden by the sandbox — is then the same
/// Binder Error, in the same words, from every function, as from `paimon_scan` (which needs the
/// schema at bind). None for a Fluss table, a relation or a file source (left to the function's
/// run).
pub fn table_arg_path(function: &'static str, arg: TableArg, raw: &str, sandbox: &Sandbox) -> Result<Option<String>> {
    if arg == TableArg::Path {
        return Ok(Some(paimon_path(raw)));
    }
    match (arg, Origin::of(raw, sandbox)) {
        (_, Ok(Origin::Lake(path))) => Ok(Some(path)),
        (TableArg::Fact, Ok(Origin::Relation(_) | Origin::Stream(_))) => {
            Err(crate::serving::lake_fact::not_a_lake_fact(function, raw))
        }
        (_, Err(denied @ Error::Denied { .. })) => Err(denied.in_function(function)),
        // A path that is neither a Paimon table nor a file: said as for any Paimon table.
        (TableArg::Fact, Err(_)) if !crate::core::stream::is_fluss(raw) => Ok(Some(raw.trim().to_string())),
        _ => Ok(None),
    }
}

/// Declares one DuckDB column per Arrow field of `table` (how a refusal names it: "Paimon table
/// '<path>'").
pub fn declare(
    bind: &BindInfo,
    function: &'static str,
    table: &str,
    schema: &duckdb::arrow::datatypes::Schema,
) -> Result<()> {
    let refuse = |problem: String| Error::Refused { function, problem: format!("{table}: {problem}") };
    if schema.fields().is_empty() {
        return Err(refuse("its schema has no columns".into()));
    }
    for field in schema.fields() {
        if let DataType::Decimal128(width, _) | DataType::Decimal256(width, _) = field.data_type() {
            if *width > 38 {
                return Err(refuse(format!(
                    "column '{}' is DECIMAL({width}, ...): DuckDB's DECIMAL holds at most 38 digits",
                    field.name()
                )));
            }
        }
        let ty = to_duckdb_logical_type(field.data_type()).map_err(|e| {
            refuse(format!("column '{}' has a type DuckDB cannot hold ({}): {e}", field.name(), field.data_type()))
        })?;
        bind.add_result_column(field.name(), ty);
    }
    Ok(())
}

/// How a refusal of a lake function names the table at `path`.
pub fn paimon_table(path: &str) -> String {
    format!("Paimon table '{}'", crate::core::error::shown(path))
}

/// One stream of batches, read by one thread at a time.
pub type BatchSource = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// Hands out the next source, or None when there are no more.
type Sources = Box<dyn Fn() -> Option<Result<BatchSource>> + Send + Sync>;

/// A source being read: its current batch and how much of it was emitted.
struct Cursor {
    source: BatchSource,
    current: Option<RecordBatch>,
    offset: usize,
}

/// The cursors not being read, and how many are (or sources being opened).
#[derive(Default)]
struct Pool {
    idle: Vec<Cursor>,
    busy: usize,
    exhausted: bool,
}

/// Batches pulled as DuckDB asks for rows, from sources handed out one at a time. A DuckDB
/// thread takes an idle cursor (or opens the next source when none is idle), owns it while it
/// reads the next batch of that source — so decoding runs on DuckDB's threads, one source per
/// thread — and puts it back as soon as it has cut its slice; the conversion into DuckDB's
/// vectors runs with nothing held. A thread that finds no idle cursor after the last source
/// was opened waits for a busy one rather than finishing: the rest of the last source is still
/// shared by every thread (a thread that finished early would leave it to one).
pub struct Batches {
    sources: Sources,
    pool: Mutex<Pool>,
    returned: Condvar,
    /// Held while DuckDB keeps this scan (see `host::session::Running`).
    _running: Option<Running>,
}

/// A thread's claim on one cursor (or on opening a source): released on every way out,
/// panics included, so no waiting thread waits for a claim that is gone.
struct Claim<'a>(&'a Batches);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.lock().busy -= 1;
        self.0.returned.notify_all();
    }
}

impl Batches {
    /// Sources handed out by `next` (called with no lock held, on the asking thread).
    pub fn pulled(next: impl Fn() -> Option<Result<BatchSource>> + Send + Sync + 'static) -> Self {
        Batches { sources: Box::new(next), pool: Mutex::new(Pool::default()), returned: Condvar::new(), _running: None }
    }

    /// The scan runs in a user's statement on the database of `init`'s function.
    pub fn in_statement(mut self, init: &InitInfo) -> Self {
        // SAFETY: functions reading through `Batches` are registered with a `SharedDatabase`
        // as extra info (functions::register_all), which DuckDB keeps alive as long as the
        // function exists.
        let db = unsafe { &*init.get_extra_info::<SharedDatabase>() };
        self._running = Some(db.session.running());
        self
    }

    /// One stream (its batches may still be converted by several threads at once).
    pub fn new(source: impl Iterator<Item = Result<RecordBatch>> + Send + 'static) -> Self {
        let once: Mutex<Option<BatchSource>> = Mutex::new(Some(Box::new(source)));
        Self::pulled(move || once.lock().unwrap_or_else(|p| p.into_inner()).take().map(Ok))
    }

    pub fn empty() -> Self {
        Self::new(std::iter::empty())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle cursor, or None when this thread should open the next source; Err(()) when
    /// there is nothing left to read.
    fn claim(&self) -> std::result::Result<(Claim<'_>, Option<Cursor>), ()> {
        let mut pool = self.lock();
        loop {
            if let Some(c) = pool.idle.pop() {
                pool.busy += 1;
                return Ok((Claim(self), Some(c)));
            }
            if !pool.exhausted {
                pool.busy += 1;
                return Ok((Claim(self), None));
            }
            if pool.busy == 0 {
                return Err(());
            }
            pool = self.returned.wait(pool).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn next_slice(&self) -> Result<Option<RecordBatch>> {
        loop {
            let Ok((claim, idle)) = self.claim() else { return Ok(None) };
            let mut cursor = match idle {
                Some(c) => c,
                None => match (self.sources)() {
                    Some(source) => Cursor { source: source?, current: None, offset: 0 },
                    None => {
                        self.lock().exhausted = true;
                        continue;
                    }
                },
            };
            loop {
                if let Some(batch) = &cursor.current {
                    if cursor.offset < batch.num_rows() {
                        let len = (batch.num_rows() - cursor.offset).min(CHUNK);
                        let slice = batch.slice(cursor.offset, len);
                        cursor.offset += len;
                        self.lock().idle.push(cursor);
                        drop(claim);
                        return Ok(Some(slice));
                    }
                }
                match cursor.source.next() {
                    Some(batch) => {
                        cursor.current = Some(batch?);
                        cursor.offset = 0;
                    }
                    // This source is done: on to another.
                    None => break,
                }
            }
        }
    }

    pub fn emit(&self, output: &mut DataChunkHandle) -> std::result::Result<(), Box<dyn std::error::Error>> {
        match self.next_slice()? {
            Some(slice) => super::to_chunk::write(&slice, output)?,
            None => output.set_len(0),
        }
        Ok(())
    }
}
