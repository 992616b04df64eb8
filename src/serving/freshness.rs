//! Which fact state a layer's mart reflects: its fact mark (`core::fact_mark`). A publish
//! carries it in the mart commit, `serving_status` shows it (`fact_snapshot`,
//! `fact_commit_time`), and `serving_reconcile(fact := ...)` on a replica reads the fact as of it.
//!
//! - A fact layer built from a Paimon table: the lake snapshot it reflects and its commit time.
//! - A fact layer built from anything else (a DuckDB table or view, files, a Fluss table, whose
//!   position is per-bucket log offsets, not a snapshot): no snapshot, and the time the layer
//!   last read its source (its last refresh or follower apply, else its build).
//! - A mart-only replica: what the mart table's snapshot it serves carries, recorded in
//!   `serving_meta` (`fact_snapshot`, `fact_commit_millis`) by the build or apply that read it,
//!   so it stays known when that snapshot later expires; nothing for a mart table written by a
//!   writer that carries no mark (a Flink job).

use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, Result};
use crate::core::fact_mark::{self, FactMark};
use crate::core::schema::META;
use crate::lake::LakeTable;
use crate::serving::meta::not_built;
use crate::serving::served::Mode;

/// The fact mark of the layer `serving_meta` (as the caller's search path resolves it) records.
/// A layer of an older release, without the columns, has none.
pub fn layer_mark(conn: &Connection, function: &'static str) -> Result<FactMark> {
    // The read time floored to the millisecond (epoch_ms rounds): never later than the read.
    let sql = format!(
        "SELECT mode, source, lake_snapshot, lake_snapshot_millis, epoch_us(coalesce(refreshed_at, built_at)) // 1000, \
         fact_snapshot, fact_commit_millis FROM {META}"
    );
    type Row = (Option<String>, Option<String>, Option<i64>, Option<i64>, Option<i64>, Option<i64>, Option<i64>);
    let row: Row = match conn
        .query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?)))
    {
        Ok(row) => row,
        Err(e) if clean_duckdb_message(&e).contains("Binder Error") => return Ok(FactMark::default()),
        Err(e) => return Err(not_built(function, e)),
    };
    let (mode, source, lake_snapshot, lake_millis, read_at, fact_snapshot, fact_millis) = row;
    if mode.as_deref() == Some(Mode::Mart.name()) {
        return Ok(FactMark { snapshot: fact_snapshot, commit_millis: fact_millis });
    }
    let fluss = source.as_deref().is_some_and(crate::core::stream::is_fluss);
    Ok(match lake_snapshot {
        // Built from a Paimon table (0: while it had no snapshot, so nothing to point at).
        Some(id) if !fluss => FactMark { snapshot: Some(id).filter(|&i| i > 0), commit_millis: lake_millis },
        _ => FactMark { snapshot: None, commit_millis: read_at },
    })
}

/// What snapshot `snapshot` of a mart table carries (nothing for no snapshot, or a commit of a
/// writer that carries no mark).
pub fn carried(table: &LakeTable, snapshot: Option<i64>) -> Result<FactMark> {
    let Some(id) = snapshot.filter(|&i| i > 0) else { return Ok(FactMark::default()) };
    Ok(fact_mark::read(&table.commit_user(id)?).map(|(_, mark)| mark).unwrap_or_default())
}
