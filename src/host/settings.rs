//! DuckDB's global settings as the extension's own connection reads them — global, so they are
//! what the user's connections see too: the file sandbox and `threads`, for work that runs
//! outside a bound call (a follower's tick, a replacement scan, the DuckDB 1.4 artifact, whose
//! binds cannot see the caller's settings) or that needs the number of reader threads.

use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::host::sandbox::Sandbox;

/// The sandbox settings as they stand now.
pub fn sandbox(conn: &Connection) -> Result<Sandbox> {
    let failed = |e: duckdb::Error| Error::duckdb("streamhouse: reading the sandbox settings", &e);
    let list = |name: &str| -> Result<Vec<String>> {
        // Not `prepare_cached`: DuckDB folds current_setting() into the plan when it is
        // prepared, so a cached statement would keep answering the settings of its first use.
        let mut stmt = conn.prepare(&format!("SELECT unnest(current_setting('{name}'))::VARCHAR")).map_err(failed)?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(failed)?;
        rows.collect::<std::result::Result<Vec<_>, _>>().map_err(failed)
    };
    let external_access: bool = conn
        .query_row("SELECT current_setting('enable_external_access')::BOOLEAN", [], |r| r.get(0))
        .map_err(failed)?;
    Ok(Sandbox {
        external_access,
        allowed_directories: list("allowed_directories")?,
        allowed_paths: list("allowed_paths")?,
    })
}

/// DuckDB's `threads` setting.
pub fn threads(conn: &Connection) -> Result<i64> {
    conn.query_row("SELECT current_setting('threads')::BIGINT", [], |r| r.get(0))
        .map_err(|e| Error::duckdb("streamhouse: reading threads", &e))
}
