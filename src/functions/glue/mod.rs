//! The DuckDB callback glue every SQL function shares, written once: the table-function
//! adapters (`table`), rows and cells (`rows`), VARCHAR scalars (`scalar`), the caller's
//! settings (`settings`), Arrow batches out of the lake (`lake_batches`), the dashboard's named
//! parameters (`dashboard_args`), arguments as DuckDB hands them over (`value`), Arrow columns
//! into DuckDB vectors (`to_chunk`).

pub mod dashboard_args;
pub mod lake_batches;
pub mod rows;
pub mod scalar;
pub mod settings;
pub mod table;
pub mod to_chunk;
pub mod value;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs a callback body with a panic turned into an error. duckdb-rs 1.4's callback glue does not
/// catch panics, and a panic reaching DuckDB's C frames aborts the host process (newer duckdb-rs
/// catch them too; this costs nothing unless something panics).
pub fn guarded<T>(
    body: impl FnOnce() -> Result<T, Box<dyn std::error::Error>>,
) -> Result<T, Box<dyn std::error::Error>> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Err(format!("streamhouse internal error (please report): {what}").into())
    })
}
