//! streamhouse: the OLAP serving layer of a Paimon/Fluss streamhouse, as a DuckDB extension.
//!
//! Pure logic lives in plain modules (`source`, `schema`, `dashboard`, `dupcheck`, `tier`,
//! `quote`); `lake` reads Paimon tables through paimon-rust; `serving` and `refresh` run SQL on
//! the extension's connection (`session`); `functions` is the thin FFI layer.

pub mod dashboard;
pub mod delta;
pub mod dupcheck;
pub mod error;
mod follow;

mod functions;
pub mod handoff;
pub mod lake;
pub mod quote;
pub mod refresh;
pub mod sandbox;
pub mod schema;
pub mod serving;
mod session;
pub mod source;
pub mod tier;

// duckdb-rs 1.4's entrypoint macro predates `unsafe_op_in_unsafe_fn`; newer ones comply.
#[cfg_attr(duckdb14, allow(unsafe_op_in_unsafe_fn))]
mod entrypoint {
    use duckdb::{duckdb_entrypoint_c_api, Connection};

    use crate::{functions, session};

    /// Called by DuckDB on `LOAD`. The connection clone must happen here: the database handle
    /// behind `con` is only valid until this function returns.
    /// DuckDB 1.4 hands out the functions we need only in its unstable C API, whose struct it gives
    /// to an extension asking for its stable band (v1.2.0) when the footer pins the exact DuckDB.
    #[cfg_attr(not(duckdb14), duckdb_entrypoint_c_api(ext_name = "streamhouse", min_duckdb_version = "v1.5.6"))]
    #[cfg_attr(duckdb14, duckdb_entrypoint_c_api(ext_name = "streamhouse", min_duckdb_version = "v1.2.0"))]
    pub fn extension_entrypoint(con: Connection) -> Result<(), Box<dyn std::error::Error>> {
        let session = session::Session::start(&con)?;
        functions::register_all(&con, &session)?;
        Ok(())
    }
}
