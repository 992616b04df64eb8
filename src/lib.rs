//! streamhouse: the OLAP serving layer of a Paimon/Fluss streamhouse, as a DuckDB extension.
//!
//! The folders are the layers; each may use only the layers listed after it:
//! - `functions` — the thin FFI layer: one file per SQL function, the DuckDB callback glue
//!   written once in `functions::glue`. Uses everything below.
//! - `serving` — the serving layer's operations on the extension's connections: build,
//!   dashboard reads, refresh, reconcile, follow, and the state they keep per database.
//!   Uses `host`, `lake`, `core`.
//! - `host` — living inside DuckDB's process: the connection pool, the writer lease and its
//!   explicit transaction, the watchdog that lets go of a closed database, the descriptor
//!   registry, the exit hook. Uses `core`.
//! - `lake` — the Paimon boundary: tables planned and read through paimon-rust, storage
//!   options, foreign errors converted and secrets scrubbed once. Uses `core`.
//! - `core` — pure logic, no DuckDB connection, no paimon: source strings, the schema contract,
//!   the mart arithmetic, the duplicate check, the tier DDL, quoting, locations, the sandbox
//!   decision, errors.

pub mod core;
mod functions;
pub mod host;
pub mod lake;
pub mod serving;

// duckdb-rs 1.4's entrypoint macro predates `unsafe_op_in_unsafe_fn`; newer ones comply.
#[cfg_attr(duckdb14, allow(unsafe_op_in_unsafe_fn))]
mod entrypoint {
    use duckdb::{duckdb_entrypoint_c_api, Connection};

    use crate::functions;
    use crate::host::session::Session;
    use crate::serving::state::Database;

    /// Called by DuckDB on `LOAD`. The connection clone must happen here: the database handle
    /// behind `con` is only valid until this function returns.
    /// DuckDB 1.4 hands out the functions we need only in its unstable C API, whose struct it gives
    /// to an extension asking for its stable band (v1.2.0) when the footer pins the exact DuckDB.
    #[cfg_attr(not(duckdb14), duckdb_entrypoint_c_api(ext_name = "streamhouse", min_duckdb_version = "v1.5.6"))]
    #[cfg_attr(duckdb14, duckdb_entrypoint_c_api(ext_name = "streamhouse", min_duckdb_version = "v1.2.0"))]
    pub fn extension_entrypoint(con: Connection) -> Result<(), Box<dyn std::error::Error>> {
        let db = Database::new(Session::start(&con)?);
        functions::register_all(&con, &db)?;
        Ok(())
    }
}
