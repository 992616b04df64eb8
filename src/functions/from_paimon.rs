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

use duckdb::ffi;

use crate::core::location::is_remote;
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
    // `FROM 'fluss://...'`: the Fluss table's current state, read by fluss_scan.
    #[cfg(not(duckdb14))]
    if crate::core::stream::is_fluss(&name) {
        let argument = name.trim();
        // SAFETY: as below.
        unsafe {
            ffi::duckdb_replacement_scan_set_function_name(info, c"fluss_scan".as_ptr());
            let mut value = ffi::duckdb_create_varchar_length(argument.as_ptr().cast(), argument.len() as u64);
            ffi::duckdb_replacement_scan_add_parameter(info, value);
            ffi::duckdb_destroy_value(&mut value);
        }
        return;
    }
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
            let sandbox = crate::host::settings::sandbox(conn)?;
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
    if !parquet {
        return None;
    }
    let table = LakeTable::open(NAME, path, &Access { sandbox, options: Default::default() }).ok()?;
    table.scan(None, None, None).ok()?.plain_sql().ok()?
}
