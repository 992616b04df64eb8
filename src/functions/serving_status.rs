//! `serving_status()`: one row saying when and from what the serving layer was built and
//! refreshed, which lake snapshot it reflects, its sizes, the last reconcile outcome, and, for a
//! Paimon source, how far behind the lake it is and what its follower is doing. `state` is one of
//! 'not built', 'built', 'following', 'failing' (the follower's latest apply failed),
//! 'rewritten' (the lake table's history no longer holds the snapshot served: a refresh rebuilds)
//! and 'rebuilding' (the same, seen while a follower runs: its next look rebuilds).
//! Times are TIMESTAMPTZ (comparable with `now()`). `lag_ms` is the one alert metric (see
//! `alert_lag`); `last_checked_at` is the follower's last look; `age_seconds` is the seconds since
//! the serving tables last changed (a build or a refresh), which grows on a quiet source while
//! the layer is current: alert on `lag_ms`, not on it. `data_as_of` is the commit time of the snapshot served; `history` says why it is no longer
//! the table's, `rebuilt_because` why a refresh or follower last rebuilt the layer.
//! `published_to` / `published_snapshot`: this process's last `serving_publish` (memory only).
//! `fact_snapshot` / `fact_commit_time`: which fact state the served mart reflects
//! (`serving::freshness`): a fact layer's own lake snapshot and its commit time (for a source
//! without snapshots, none and the time the layer last read it); on a replica what the mart
//! table's snapshot it serves carries, written there by the publisher — a replica's `lag_ms`
//! is then measured from that fact commit time (see `alert_lag`).
//! `on_bad_rows` is the layer's policy; `quarantined` how many orders it holds out (listed with
//! their reasons in `serving_quarantine`) and `quarantined_ids` the first of them.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::{Error, Result};
use crate::host::session::Role;
use crate::serving::status;

pub struct ServingStatus;

/// Where `state` is among the columns.
const STATE: usize = 18;
/// `state` before the first build.
const NOT_BUILT: &str = "not built";

impl RowsFunction for ServingStatus {
    const NAME: &'static str = "serving_status";
    const PARAM: Option<&'static str> = None;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("built_at", LogicalTypeId::TimestampTZ),
        ("source", LogicalTypeId::Varchar),
        ("refreshed_at", LogicalTypeId::TimestampTZ),
        ("refresh_source", LogicalTypeId::Varchar),
        ("refreshes", LogicalTypeId::Bigint),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("fct_rows", LogicalTypeId::Bigint),
        ("mart_rows", LogicalTypeId::Bigint),
        ("last_reconcile_at", LogicalTypeId::TimestampTZ),
        ("last_reconcile_clean", LogicalTypeId::Boolean),
        ("age_seconds", LogicalTypeId::Double),
        ("following", LogicalTypeId::Varchar),
        ("follow_every_ms", LogicalTypeId::Bigint),
        ("lake_latest_snapshot", LogicalTypeId::Bigint),
        ("lag_snapshots", LogicalTypeId::Bigint),
        ("lag_ms", LogicalTypeId::Bigint),
        ("last_error", LogicalTypeId::Varchar),
        ("last_error_at", LogicalTypeId::TimestampTZ),
        ("state", LogicalTypeId::Varchar),
        ("mode", LogicalTypeId::Varchar),
        ("published_to", LogicalTypeId::Varchar),
        ("published_snapshot", LogicalTypeId::Bigint),
        ("data_as_of", LogicalTypeId::TimestampTZ),
        ("history", LogicalTypeId::Varchar),
        ("rebuilt_because", LogicalTypeId::Varchar),
        ("columns", LogicalTypeId::Varchar),
        ("fluss_offset", LogicalTypeId::Bigint),
        ("lag_records", LogicalTypeId::Bigint),
        ("last_checked_at", LogicalTypeId::TimestampTZ),
        ("stream_read", LogicalTypeId::Varchar),
        ("fact_snapshot", LogicalTypeId::Bigint),
        ("fact_commit_time", LogicalTypeId::TimestampTZ),
        ("on_bad_rows", LogicalTypeId::Varchar),
        ("quarantined", LogicalTypeId::Bigint),
        ("quarantined_ids", LogicalTypeId::Varchar),
    ];
    const ROLE: Role = Role::Reader;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let s = match status::status(ctx.conn) {
            Ok(s) => s,
            // Before the first build: a row that says so (a monitor polls this from the start).
            Err(Error::NotBuilt { .. }) => {
                let mut row = vec![Cell::Null; Self::COLUMNS.len()];
                row[4] = Cell::BigInt(0);
                row[STATE] = Cell::Text(NOT_BUILT.into());
                return Ok(vec![row]);
            }
            Err(e) => return Err(e),
        };
        let r = status::report(ctx.conn, ctx.db, &ctx.call.access, s)?;
        let (s, progress, lag, stream, fact) = (r.status, r.progress, r.lag, r.stream, r.fact);
        let (following, every, lag_ms, published, state) = (r.following, r.every, r.lag_ms, r.published, r.state);
        let ts = |v: Option<i64>| v.map_or(Cell::Null, Cell::Timestamp);
        Ok(vec![vec![
            ts(s.built_at),
            s.source.into(),
            ts(s.refreshed_at),
            s.refresh_source.into(),
            s.refreshes.into(),
            s.lake_snapshot.into(),
            s.fct_rows.into(),
            s.mart_rows.into(),
            ts(s.last_reconcile_at),
            s.last_reconcile_clean.into(),
            s.age_seconds.into(),
            following.into(),
            every.into(),
            lag.latest.into(),
            lag.snapshots.into(),
            lag_ms.into(),
            progress.last_error.into(),
            ts(progress.last_error_at),
            Cell::Text(state.into()),
            Cell::Text(s.mode.name().into()),
            published.as_ref().map(|p| p.target.clone()).into(),
            published.and_then(|p| p.snapshot).into(),
            s.lake_snapshot_millis.map_or(Cell::Null, |ms| Cell::Timestamp(ms * 1000)),
            lag.rewritten.into(),
            s.rebuilt_because.into(),
            s.columns.into(),
            stream.map(|(at, _)| at).into(),
            stream.and_then(|(_, behind)| behind).into(),
            ts(progress.last_checked_at),
            s.stream_read.into(),
            fact.snapshot.into(),
            fact.commit_millis.map_or(Cell::Null, |ms| Cell::Timestamp(ms * 1000)),
            s.on_bad_rows.into(),
            s.quarantined.into(),
            s.quarantined_ids.into(),
        ]])
    }
}
