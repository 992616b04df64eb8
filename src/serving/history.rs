//! The lake history a layer reflects, checked before anything is applied on top of it.
//!
//! A refresh, a follower (fact or mart mode) and a replica hold one Paimon snapshot: its id
//! (`serving_meta.lake_snapshot`) and commit time (`lake_snapshot_millis`). Before an
//! incremental apply they ask `rewritten` whether that snapshot is still the table's
//! (`core::lineage` decides); when it is not (expired, rolled back, recreated) the caller
//! rebuilds from the latest snapshot in one transaction and records why (`rebuilt_because`),
//! so readers see the old layer or the new one, never the changes of another history.

use duckdb::Connection;

use crate::core::error::Result;
use crate::core::lineage;
use crate::core::schema::META;
use crate::lake::LakeTable;
use crate::serving::meta::not_built;

/// The snapshot the layer reflects and the commit time recorded with it, from serving_meta.
pub fn held(conn: &Connection, function: &'static str) -> Result<(Option<i64>, Option<i64>)> {
    // Not cached: see `meta::served_place` (a cached statement keeps the layer it was bound to).
    conn.query_row(&format!("SELECT lake_snapshot, lake_snapshot_millis FROM {META}"), [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .map_err(|e| not_built(function, e))
}

/// Why the layer holding snapshot `held` (committed at `millis`) no longer reflects `table`'s
/// history; None while it does (or when it holds no snapshot).
pub fn rewritten(table: &LakeTable, held: Option<i64>, millis: Option<i64>) -> Result<Option<String>> {
    let Some(held) = held.filter(|&h| h > 0) else { return Ok(None) };
    Ok(lineage::judge(held, millis, &table.observe(held)?))
}

/// The commit time of snapshot `id` of `table`, recorded beside it (None: no snapshot).
pub fn commit_millis(table: &LakeTable, id: Option<i64>) -> Result<Option<i64>> {
    id.filter(|&i| i > 0).map(|i| table.snapshot_time_millis(i)).transpose()
}

/// The words a failed rebuild adds: what was held, what the lake has, what to run.
pub fn cannot_rebuild(why: &str, source: &str, failure: &str) -> String {
    format!("{why}; rebuilding from the latest snapshot failed ({failure}); run serving_build('{source}') once the table is readable")
}
