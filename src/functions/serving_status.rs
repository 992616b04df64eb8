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
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::serving::meta::now_micros;
use crate::serving::served::Mode;
use crate::serving::status::{self, Status};
use crate::serving::{follow, freshness};

pub struct ServingStatus;

/// `lag_ms`, the one number to alert on: 0 when the layer holds everything its source had at the
/// follower's last look; otherwise how long the oldest change not served has waited — for a
/// Paimon source the age of its oldest unapplied commit, for a Fluss source the time since the
/// follower last caught up — and, while the follower fails, at least the time since its last
/// successful look (or since it started, if none succeeded). None when it cannot be known (not a lake or
/// stream source, the source unreachable from a layer nobody follows). On a replica whose mart carries the
/// fact's commit time (`replica_fact_millis`) it is at least the age of that fact state: the replica
/// cannot see the fact, only how old the fact state it serves is, so a replica of a stopped publisher
/// never reports 0 (and one of a quiet fact grows too).
fn alert_lag(
    lag: &follow::Lag,
    stream: Option<(i64, Option<i64>)>,
    following: &Option<String>,
    progress: &follow::Progress,
    replica_fact_millis: Option<i64>,
) -> Option<i64> {
    let now_ms = now_micros() / 1000;
    let since_ok = progress.last_ok_at.or(progress.started_at).map(|at| (now_ms - at / 1000).max(0));
    let waiting = match stream {
        Some((_, Some(0))) => Some(0),
        Some(_) => since_ok,
        None => lag.millis,
    };
    let waiting = match replica_fact_millis {
        Some(fact_ms) => Some(waiting.unwrap_or(0).max(now_ms - fact_ms).max(0)),
        None => waiting,
    };
    match (following, progress.failing) {
        (Some(_), true) => Some(waiting.unwrap_or(0).max(since_ok.unwrap_or(0))),
        _ => waiting,
    }
}

/// A Fluss layer's position (recorded locally) and how many records its table's log holds
/// beyond it (None while the cluster does not answer).
#[cfg(not(duckdb14))]
fn stream_lag(s: &Status, access: &crate::lake::Access) -> Option<(i64, Option<i64>)> {
    let source = s.source.as_deref().filter(|src| crate::core::stream::is_fluss(src))?;
    crate::serving::stream_source::lag(source, s.stream_position.as_deref(), access)
}

#[cfg(duckdb14)]
fn stream_lag(_: &Status, _: &crate::lake::Access) -> Option<(i64, Option<i64>)> {
    None
}

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
        let mut s = match status::status(ctx.conn) {
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
        // A reconcile that ran while a writer was busy is only in memory.
        if let Some(r) = *ctx.db.reconciled() {
            if r.generation == s.generation && s.last_reconcile_at.is_none_or(|at| at < r.at) {
                s.last_reconcile_at = Some(r.at);
                s.last_reconcile_clean = Some(r.clean);
            }
        }
        // A clean reconcile says nothing about a layer that changed after it.
        let changed = s.refreshed_at.or(s.built_at);
        if s.last_reconcile_at.zip(changed).is_some_and(|(at, changed)| at < changed) {
            s.last_reconcile_clean = None;
        }
        let (following, every, progress) = match &*ctx.db.follower() {
            Some(f) => (Some(f.source.clone()), Some(f.every.as_millis() as i64), f.progress()),
            None => (None, None, follow::Progress::default()),
        };
        let lag = s
            .source
            .as_deref()
            .map(|src| {
                follow::lag(
                    src,
                    s.lake_snapshot,
                    s.lake_snapshot_millis,
                    &ctx.db.lake_access(&ctx.call.access, Origin::lake_path(src, &ctx.call.access.sandbox).as_deref()),
                )
            })
            .unwrap_or_default();
        let stream = stream_lag(&s, &ctx.call.access);
        let fact = freshness::layer_mark(ctx.conn, Self::NAME)?;
        let replica_fact_millis = fact.commit_millis.filter(|_| s.mode == Mode::Mart);
        let lag_ms = alert_lag(&lag, stream, &following, &progress, replica_fact_millis);
        let published = ctx.db.published.get().clone();
        let ts = |v: Option<i64>| v.map_or(Cell::Null, Cell::Timestamp);
        // A layer whose snapshot is no longer the table's history is never reported as fresh:
        // a follower rebuilds it at its next look, a refresh when one runs.
        let state = match (&following, progress.failing, lag.rewritten.is_some()) {
            (Some(_), true, _) => "failing",
            (Some(_), false, true) => "rebuilding",
            (Some(_), false, false) => "following",
            (None, _, true) => "rewritten",
            (None, _, false) => "built",
        };
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
