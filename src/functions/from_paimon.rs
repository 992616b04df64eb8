//! `FROM 'paimon:<dir>'`: a Paimon table named where DuckDB expects a table (a replacement
//! scan, the form `serving_build` already takes a lake source in).
//!
//! When the latest snapshot needs no merge — every split plain: one sorted run per bucket
//! without retractions (a compacted or once-written table) or an append table, no deletion
//! vector, every column stored in the table's own type — the table becomes DuckDB's own
//! Parquet reader over its data files (`read_parquet`, each column cast to the type
//! `paimon_scan` declares, through `query(...)`): the scan *is* DuckDB's, with its filter
//! pushdown and row-group parallelism, where a table function of ours could only copy its
//! output. Anything else — a merge, a refusal, an error, a locked-down sandbox
//! (`enable_external_access = false`), no free connection to read the settings on — becomes
//! `paimon_scan('<dir>')`, which reads it or says why not in its own words.
//!
//! The snapshot is resolved when the statement is bound; DuckDB binds a prepared statement
//! again at each EXECUTE (1.4 to 2.0, tested), so it reads the latest snapshot, as
//! `paimon_scan` does.
//!
//! Invariants: both forms give the rows and column types `paimon_scan` gives; nothing is read
//! before the sandbox settings allow it (they are read on one of our connections: a replacement
//! scan is not told the caller's); the callback waits for a free connection only a moment
//! (`Session::try_read`: it may run inside a statement of ours) and never unwinds into DuckDB.
//! `EXPLAIN` shows which form a statement took (READ_PARQUET or PAIMON_SCAN).

use std::ffi::{c_char, c_void, CStr};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};

use duckdb::arrow::datatypes::{DataType, Schema, TimeUnit};
use duckdb::ffi;

use crate::core::location::is_remote;
use crate::core::quote;
use crate::core::sandbox::Sandbox;
use crate::lake::{Access, LakeTable};
use crate::serving::state::SharedDatabase;

/// What a table name must start with to be read as a Paimon table.
const PREFIX: &str = "paimon:";

/// The function errors are named after: the fallback reports them as `paimon_scan`.
const NAME: &str = "paimon_scan";

/// What the callback keeps: the database's connections, and whether DuckDB's Parquet reader
/// was found there (once found it stays: a function cannot be dropped; looking costs ~25 ms).
struct Replacement {
    database: SharedDatabase,
    parquet: AtomicBool,
}

/// Registers the replacement scan on `db`, holding a reference to `database` until DuckDB
/// drops the scan with the database.
///
/// # Safety
/// `db` must be the live database handle of the LOAD in progress.
pub unsafe fn register(db: ffi::duckdb_database, database: &SharedDatabase) {
    let data = Replacement { database: database.clone(), parquet: AtomicBool::new(false) };
    let data = Box::into_raw(Box::new(data)).cast::<c_void>();
    // SAFETY: `db` is live (contract); `data` is freed by `drop_data`, once, when DuckDB
    // destroys the scan.
    unsafe { ffi::duckdb_add_replacement_scan(db, Some(replace), data, Some(drop_data)) };
}

/// # Safety
/// `data` is the pointer `register` handed DuckDB, passed back once.
unsafe extern "C" fn drop_data(data: *mut c_void) {
    // SAFETY: per the contract, a `Box<Replacement>` made by `register`.
    drop(unsafe { Box::from_raw(data.cast::<Replacement>()) });
}

/// DuckDB's callback for a table name it does not know.
///
/// # Safety
/// DuckDB calls it with a live `info`, a NUL-terminated `table_name` and `register`'s `data`.
unsafe extern "C" fn replace(info: ffi::duckdb_replacement_scan_info, table_name: *const c_char, data: *mut c_void) {
    if table_name.is_null() || data.is_null() {
        return;
    }
    // SAFETY: a NUL-terminated string valid for the call (contract).
    let name = unsafe { CStr::from_ptr(table_name) }.to_string_lossy();
    let Some(path) = name.trim_start().strip_prefix(PREFIX).map(str::trim) else { return };
    // SAFETY: `data` is `register`'s `Box<Replacement>`, alive as long as the scan is.
    let replacement = unsafe { &*data.cast::<Replacement>() };
    // A panic anywhere in the decision only means the general reader reads the table.
    let plain = std::panic::catch_unwind(AssertUnwindSafe(|| plain_read(replacement, path))).ok().flatten();
    let (function, argument) = match &plain {
        Some(sql) => (c"query", sql.as_str()),
        None => (c"paimon_scan", path),
    };
    // SAFETY: `info` is live (contract); DuckDB copies the name and the value; the value we
    // made is destroyed once, after DuckDB took its copy.
    unsafe {
        ffi::duckdb_replacement_scan_set_function_name(info, function.as_ptr());
        let mut value = ffi::duckdb_create_varchar_length(argument.as_ptr().cast(), argument.len() as u64);
        ffi::duckdb_replacement_scan_add_parameter(info, value);
        ffi::duckdb_destroy_value(&mut value);
    }
}

/// The SQL that reads the table at `path` with DuckDB's Parquet reader, where that gives
/// exactly `paimon_scan`'s result; None otherwise (see the module doc).
fn plain_read(replacement: &Replacement, path: &str) -> Option<String> {
    if is_remote(path) {
        return None;
    }
    let (sandbox, parquet) = replacement
        .database
        .session
        .try_read(|conn| {
            let sandbox = Sandbox::query(conn)?;
            if replacement.parquet.load(Ordering::Relaxed) {
                return Ok((sandbox, true));
            }
            let parquet: i64 = conn
                .query_row("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'read_parquet'", [], |r| {
                    r.get(0)
                })
                .map_err(|e| crate::core::error::Error::duckdb("streamhouse: looking for read_parquet", &e))?;
            replacement.parquet.store(parquet > 0, Ordering::Relaxed);
            Ok((sandbox, parquet > 0))
        })?
        .ok()?;
    // Under a locked-down sandbox DuckDB's reader would judge the files' resolved paths by its
    // own rule (DuckDB 1.4 does not follow symlinks in allowed_directories): paimon_scan's
    // judgement of the table, tested against DuckDB's, is the one that applies.
    if !parquet || !sandbox.external_access {
        return None;
    }
    let table = LakeTable::open(NAME, path, &Access { sandbox, options: Default::default() }).ok()?;
    let schema = table.schema().ok()?;
    let files = table.scan(None, None, None).ok()?.plain_files().ok()??;
    read_parquet_sql(&schema, &files)
}

/// The DuckDB type `paimon_scan` declares for `t`, for the types whose Parquet form DuckDB's
/// reader turns into that same type (a time zone, a unit other than microseconds, nested types:
/// None, left to `paimon_scan`).
fn sql_type(t: &DataType) -> Option<String> {
    use DataType::*;
    Some(
        match t {
            Boolean => "BOOLEAN",
            Int8 => "TINYINT",
            Int16 => "SMALLINT",
            Int32 => "INTEGER",
            Int64 => "BIGINT",
            Float32 => "FLOAT",
            Float64 => "DOUBLE",
            Date32 => "DATE",
            Timestamp(TimeUnit::Microsecond, None) => "TIMESTAMP",
            Utf8 | LargeUtf8 | Utf8View => "VARCHAR",
            Binary | LargeBinary | BinaryView => "BLOB",
            Decimal128(width, scale) if (1..=38).contains(width) && *scale >= 0 => {
                return Some(format!("DECIMAL({width}, {scale})"))
            }
            _ => return None,
        }
        .to_string(),
    )
}

/// `SELECT` of `schema`'s columns, each cast to its declared type (a no-op DuckDB drops when
/// the file's type is that type already), from `read_parquet` over `files` — with every option
/// that could change a value pinned, whatever the session's defaults, and named by its schema
/// (`system.main`) so that a macro of the user's called `read_parquet` cannot stand in for it. None when a column's type
/// is not one `sql_type` knows, or a path holds a character `read_parquet` would expand as a glob.
fn read_parquet_sql(schema: &Schema, files: &[String]) -> Option<String> {
    if files.is_empty() || files.iter().any(|f| f.contains(['*', '?', '[', '{'])) {
        return None;
    }
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| {
            let name = quote::ident(f.name());
            sql_type(f.data_type()).map(|t| format!("CAST({name} AS {t}) AS {name}"))
        })
        .collect::<Option<_>>()?;
    let list: Vec<String> = files.iter().map(|f| quote::literal(f)).collect();
    Some(format!(
        "SELECT {} FROM system.main.read_parquet([{}], binary_as_string := false, hive_partitioning := false, \
         union_by_name := false)",
        columns.join(", "),
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use duckdb::arrow::datatypes::Field;

    #[test]
    fn every_column_is_cast_to_its_declared_type_and_every_name_quoted() {
        let schema = Schema::new(vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new("a \"b\"", DataType::Utf8View, true),
            Field::new("tax", DataType::Decimal128(18, 2), true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ]);
        let sql = read_parquet_sql(&schema, &["/w/it's/f.parquet".to_string(), "/w/g.parquet".to_string()]).unwrap();
        assert_eq!(
            sql,
            "SELECT CAST(\"order_id\" AS BIGINT) AS \"order_id\", CAST(\"a \"\"b\"\"\" AS VARCHAR) AS \"a \"\"b\"\"\", \
             CAST(\"tax\" AS DECIMAL(18, 2)) AS \"tax\", CAST(\"at\" AS TIMESTAMP) AS \"at\" \
             FROM system.main.read_parquet(['/w/it''s/f.parquet', '/w/g.parquet'], binary_as_string := false, \
             hive_partitioning := false, union_by_name := false)"
        );
    }

    #[test]
    fn types_and_paths_the_parquet_reader_could_read_otherwise_are_left_to_paimon_scan() {
        let one = |t: DataType| Schema::new(vec![Field::new("c", t, true)]);
        let files = ["/w/f.parquet".to_string()];
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        assert!(read_parquet_sql(&one(zoned), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Timestamp(TimeUnit::Millisecond, None)), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Decimal128(40, 2)), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Int64), &[]).is_none());
        for glob in ["/w/*.parquet", "/w/f?.parquet", "/w/[ab].parquet", "/w/{a}.parquet"] {
            assert!(read_parquet_sql(&one(DataType::Int64), &[glob.to_string()]).is_none(), "{glob}");
        }
        assert!(read_parquet_sql(&one(DataType::Int64), &files).is_some());
    }
}
