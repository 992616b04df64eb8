//! What the layer says about itself for `serving_status`: when and from what it was built and
//! refreshed, the lake snapshot (or Fluss position) it reflects, its sizes and mode, the last
//! reconcile's outcome, its age, and the orders it holds out (`on_bad_rows`) — `status` — and,
//! with what the database keeps in memory (the follower's progress, the last reconcile and
//! publish) and the source's lag (`follow`, `stream_source`), the whole report `serving_status`
//! shows (`report`): its `state` and `lag_ms` decided here.

use duckdb::Connection;

use crate::core::error::Result;
use crate::core::fact_mark::FactMark;
use crate::core::schema::{FACT, MART, META};
use crate::core::source::Origin;
use crate::lake::Access;
use crate::serving::freshness;
use crate::serving::meta::{not_built, now_micros, require_built, served_place};
use crate::serving::publish::Published;
use crate::serving::served::{mode, Mode};
use crate::serving::state::Database;
use crate::serving::{follow, stream_source};

/// What `serving_meta` says of the layer, with its sizes and age.
#[derive(Debug, Clone, Default)]
pub struct Status {
    pub built_at: Option<i64>,
    pub source: Option<String>,
    pub refreshed_at: Option<i64>,
    pub refresh_source: Option<String>,
    pub refreshes: i64,
    pub lake_snapshot: Option<i64>,
    /// Rows of fct_orders (None on a mart-only replica, which has none).
    pub fct_rows: Option<i64>,
    pub mart_rows: i64,
    pub last_reconcile_at: Option<i64>,
    pub last_reconcile_clean: Option<bool>,
    /// Seconds since the serving tables last changed (build or refresh).
    pub age_seconds: f64,
    /// Which state serving_meta describes.
    pub generation: Option<i64>,
    pub mode: Mode,
    /// Commit time (ms) of `lake_snapshot`, and why the layer was last rebuilt by a refresh.
    pub lake_snapshot_millis: Option<i64>,
    pub rebuilt_because: Option<String>,
    /// The column map the layer was built with (`core::mapping`'s recorded form).
    pub columns: Option<String>,
    /// For a Fluss source: each bucket's log offset read up to (`bucket:offset,...`), and how
    /// its last union read started (`readable`/`latest` lake snapshot, or `log` and why).
    pub stream_position: Option<String>,
    pub stream_read: Option<String>,
    /// What a refresh does with a bad row, how many orders are held out and the first of their
    /// ids (`serving::quarantine`; None on a replica).
    pub on_bad_rows: Option<String>,
    pub quarantined: Option<i64>,
    pub quarantined_ids: Option<String>,
}

/// The layer's status as recorded (the follower's and the lake's side are added by the caller).
pub fn status(conn: &Connection) -> Result<Status> {
    require_built(conn, "serving_status")?;
    let mode = mode(conn, "serving_status")?;
    let place = served_place(conn, "serving_status")?;
    let fact_rows = match mode {
        Mode::Fact => format!("(SELECT count(*) FROM {})", place.of(FACT)),
        Mode::Mart => "CAST(NULL AS BIGINT)".to_string(),
    };
    let epoch_us = |col: &str| format!("epoch_us({col})");
    let sql = format!(
        "SELECT {}, source, {}, refresh_source, refreshes, lake_snapshot, \
         {fact_rows}, (SELECT count(*) FROM {}), {}, last_reconcile_clean, generation, lake_snapshot_millis, \
         rebuilt_because, columns, stream_position, stream_read, on_bad_rows, quarantined FROM {META}",
        epoch_us("built_at"),
        epoch_us("refreshed_at"),
        place.of(MART),
        epoch_us("last_reconcile_at"),
    );
    let mut s = conn
        .query_row(&sql, [], |r| {
            Ok(Status {
                built_at: r.get(0)?,
                source: r.get(1)?,
                refreshed_at: r.get(2)?,
                refresh_source: r.get(3)?,
                refreshes: r.get(4)?,
                lake_snapshot: r.get(5)?,
                fct_rows: r.get(6)?,
                mart_rows: r.get(7)?,
                last_reconcile_at: r.get(8)?,
                last_reconcile_clean: r.get(9)?,
                age_seconds: 0.0,
                generation: r.get(10)?,
                mode,
                lake_snapshot_millis: r.get(11)?,
                rebuilt_because: r.get(12)?,
                columns: r.get(13)?,
                stream_position: r.get(14)?,
                stream_read: r.get(15)?,
                on_bad_rows: r.get(16)?,
                quarantined: r.get(17)?,
                quarantined_ids: None,
            })
        })
        .map_err(|e| not_built("serving_status", e))?;
    if mode == Mode::Mart {
        (s.on_bad_rows, s.quarantined) = (None, None);
    } else {
        s.quarantined_ids = crate::serving::quarantine::listed(conn, &place, s.quarantined.unwrap_or(0))?;
    }
    let changed = s.refreshed_at.or(s.built_at).unwrap_or(0);
    s.age_seconds = (now_micros() - changed) as f64 / 1e6;
    Ok(s)
}

/// `lag_ms`, the one number to alert on: 0 when the layer holds everything its source had at the
/// follower's last look; otherwise how long the oldest change not served has waited — for a
/// Paimon source the age of its oldest unapplied commit, for a Fluss source the time since the
/// follower last caught up, or, nobody following a layer whose log has moved on, the time since
/// the layer last read it (its build or last apply: an upper bound, never an under-report) — and,
/// while the follower fails, at least the time since its last
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
    read_at_micros: Option<i64>,
) -> Option<i64> {
    let now_ms = now_micros() / 1000;
    let since_ok = progress.last_ok_at.or(progress.started_at).map(|at| (now_ms - at / 1000).max(0));
    let since_read = read_at_micros.map(|at| (now_ms - at / 1000).max(0));
    let waiting = match stream {
        Some((_, Some(0))) => Some(0),
        Some((_, Some(_))) => since_ok.or(since_read),
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
fn stream_lag(s: &Status, access: &Access) -> Option<(i64, Option<i64>)> {
    let source = s.source.as_deref().filter(|src| crate::core::stream::is_fluss(src))?;
    stream_source::lag(source, s.stream_position.as_deref(), access)
}

/// Everything `serving_status` shows of a built layer.
pub struct Report {
    pub status: Status,
    pub following: Option<String>,
    pub every: Option<i64>,
    pub progress: follow::Progress,
    pub lag: follow::Lag,
    /// A Fluss layer's position and how far its log is beyond it (`stream_lag`).
    pub stream: Option<(i64, Option<i64>)>,
    pub fact: FactMark,
    pub lag_ms: Option<i64>,
    pub published: Option<Published>,
    /// 'built', 'following', 'failing', 'rewritten' or 'rebuilding'.
    pub state: &'static str,
}

/// The report of the built layer whose recorded status is `s`, with what `db` keeps in memory
/// and the source's lag (asked with the call's `access`).
pub fn report(conn: &Connection, db: &Database, access: &Access, mut s: Status) -> Result<Report> {
    // A reconcile that ran while a writer was busy is only in memory.
    if let Some(r) = *db.reconciled() {
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
    let (following, every, progress) = match &*db.follower() {
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
                &db.lake_access(access, Origin::lake_path(src, &access.sandbox).as_deref()),
            )
        })
        .unwrap_or_default();
    let stream = stream_lag(&s, access);
    let fact = freshness::layer_mark(conn, "serving_status")?;
    let replica_fact_millis = fact.commit_millis.filter(|_| s.mode == Mode::Mart);
    let lag_ms = alert_lag(&lag, stream, &following, &progress, replica_fact_millis, s.refreshed_at.or(s.built_at));
    let published = db.published.get().clone();
    // A layer whose snapshot is no longer the table's history is never reported as fresh:
    // a follower rebuilds it at its next look, a refresh when one runs.
    let state = match (&following, progress.failing, lag.rewritten.is_some()) {
        (Some(_), true, _) => "failing",
        (Some(_), false, true) => "rebuilding",
        (Some(_), false, false) => "following",
        (None, _, true) => "rewritten",
        (None, _, false) => "built",
    };
    Ok(Report { status: s, following, every, progress, lag, stream, fact, lag_ms, published, state })
}
