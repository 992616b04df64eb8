//! streamhouse: the OLAP serving layer of a Paimon/Fluss streamhouse, as a DuckDB extension.
//!
//! The folders are the layers; each may use only the layers listed after it:
//! - `functions` — the thin FFI layer: one file per SQL function, the DuckDB callback glue
//!   written once in `functions::glue`. Uses everything below.
//! - `serving` — the serving layer's operations on the extension's connections: build,
//!   dashboard reads, refresh, reconcile, follow, and the state they keep per database.
//!   Uses `host`, `lake`, `fluss`, `core`.
//! - `fluss` — the Fluss boundary: Apache Fluss's Rust client (one runtime, one connection per
//!   cluster), tables described, the changelog read as Arrow. Uses `host` (the sandbox), `core`.
//! - `lake` — the Paimon boundary: tables planned and read through paimon-rust, storage
//!   options, foreign errors converted and secrets scrubbed once. Uses `host` (the sandbox), `core`.
//! - `host` — living inside DuckDB's process: the connection pool, the writer lease and its
//!   explicit transaction, the watchdog that lets go of a closed database, the descriptor
//!   registry, the exit hook, DuckDB's global settings as our connection reads them, and DuckDB's
//!   file sandbox (the one place that judges a path, following its links on the disk). Uses `core`.
//! - `core` — pure logic, no DuckDB connection, no paimon, no file system: source strings, the
//!   schema contract, the mart arithmetic, the duplicate check, the tier DDL, quoting, locations,
//!   errors.
//!
//! Within and across the folders no module imports one that imports it back
//! (`scripts/import_cycles.py` prints any cycle; test/python/tooling/test_import_cycles.py
//! keeps the count at zero).

pub mod core;
#[cfg(not(duckdb14))]
pub mod fluss;
mod functions;
pub mod host;
pub mod lake;
pub mod serving;

/// The entrypoint DuckDB calls on `LOAD`, written out by hand (what duckdb-rs's entrypoint macro
/// writes, plus the raw database handle the macro keeps to itself: a replacement scan is
/// registered on the database, not on a connection).
mod entrypoint {
    use std::ffi::CString;

    use duckdb::{ffi, Connection};

    use crate::functions;
    use crate::host::session::Session;
    use crate::serving::state::Database;

    /// The C API version asked for. DuckDB 1.4 hands out the functions we need only in its
    /// unstable C API, whose struct it gives to an extension asking for its stable band (v1.2.0)
    /// when the footer pins the exact DuckDB.
    #[cfg(not(duckdb14))]
    const MIN_DUCKDB: &str = "v1.5.6";
    #[cfg(duckdb14)]
    const MIN_DUCKDB: &str = "v1.2.0";

    /// Everything LOAD does. Connections are cloned and the replacement scan registered here:
    /// the database handle is only valid until the entrypoint returns.
    ///
    /// # Safety
    /// `info` and `access` are the ones DuckDB passed to the entrypoint.
    unsafe fn load(
        info: ffi::duckdb_extension_info,
        access: *const ffi::duckdb_extension_access,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        // SAFETY: `info`/`access` come from DuckDB (the caller's contract).
        if !unsafe { ffi::duckdb_rs_extension_api_init(info, access, MIN_DUCKDB)? } {
            return Ok(false); // DuckDB said why (a version it does not serve)
        }
        // SAFETY: `access` is DuckDB's table of LOAD callbacks.
        let get_database = unsafe { (*access).get_database }.ok_or("DuckDB gave no get_database callback")?;
        // SAFETY: called during LOAD, as DuckDB allows; null means DuckDB recorded why.
        let db_ptr = unsafe { get_database(info) };
        if db_ptr.is_null() {
            return Ok(false);
        }
        // SAFETY: a non-null pointer from get_database holds the live database handle.
        let db: ffi::duckdb_database = unsafe { *db_ptr };
        // SAFETY: `db` is live during LOAD.
        let con = unsafe { Connection::open_from_raw(db.cast()) }?;
        let database = Database::new(Session::start(&con)?);
        functions::register_all(&con, &database)?;
        // SAFETY: `db` is live during LOAD.
        unsafe { functions::register_replacement_scan(db, &database) };
        Ok(true)
    }

    /// Called by DuckDB on `LOAD streamhouse`.
    ///
    /// # Safety
    /// DuckDB calls it with its own `info` and `access`.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn streamhouse_init_c_api(
        info: ffi::duckdb_extension_info,
        access: *const ffi::duckdb_extension_access,
    ) -> bool {
        // A panic must not unwind into DuckDB: it becomes the load's error.
        // SAFETY: `info`/`access` are DuckDB's own (this function's contract).
        let outcome = std::panic::catch_unwind(|| unsafe { load(info, access) })
            .unwrap_or_else(|_| Err("streamhouse: internal error (a panic) while loading".into()));
        match outcome {
            Ok(loaded) => loaded,
            Err(e) => {
                // SAFETY: `access` is DuckDB's; set_error copies the message.
                if let Some(set_error) = unsafe { (*access).set_error } {
                    let message = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
                    // SAFETY: `info` is DuckDB's; the message outlives the call.
                    unsafe { set_error(info, message.as_ptr()) };
                }
                false
            }
        }
    }
}
