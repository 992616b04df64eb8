//! What the layer says about itself for `serving_status`: when and from what it was built and
//! refreshed, the lake snapshot (or Fluss position) it reflects, its sizes and mode, the last
//! reconcile's outcome, its age, and the orders it holds out (`on_bad_rows`). The follower's
//! progress and the source's lag are added by `serving_status` from `follow` and `stream_source`.

use duckdb::Connection;

use crate::core::error::Result;
use crate::core::schema::{FACT, MART, META};
use crate::serving::meta::{not_built, now_micros, require_built, served_place};
use crate::serving::served::{mode, Mode};

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
