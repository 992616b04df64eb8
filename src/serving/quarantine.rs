//! The layer's side of `on_bad_rows` (the rules are `core::quarantine`'s): the policy
//! serving_meta records, a change set read tolerantly and sorted into the rows a refresh applies
//! and the orders it holds (a build's load does the same in SQL: `layer`), the upkeep of
//! `serving_quarantine`, and what `serving_status` and a lake reconcile read of it.
//!
//! Invariants: an order listed in `serving_quarantine` is in neither `fct_orders` nor
//! `mart_daily`; `serving_meta.quarantined` is the table's row count (so a refresh under 'fail'
//! with nothing held pays for nothing here); every change happens in the caller's transaction.

use std::sync::Arc;

use duckdb::arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, StringArray};
use duckdb::arrow::compute::filter_record_batch;
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, Error, Result};
use crate::core::quarantine::{self, OnBadRows, QUARANTINE};
use crate::core::schema::{Place, META};
use crate::serving::handoff::{Contents, Parcel, Part};
use crate::serving::meta::{not_built, now_micros};
use crate::serving::read::{batches, column};
use crate::serving::source::ResolvedSource;

/// Where held orders are staged (a temp table of our own connection, dropped after).
pub const HELD: &str = "__sh_held";

/// The policy the layer records (`serving_meta.on_bad_rows`).
pub fn recorded(conn: &Connection, function: &'static str) -> Result<OnBadRows> {
    let text: Option<String> = conn
        .query_row(&format!("SELECT on_bad_rows FROM {META}"), [], |r| r.get(0))
        .map_err(|e| not_built(function, e))?;
    Ok(OnBadRows::recorded(text.as_deref()))
}

/// Records `policy` as the layer's, for every later refresh, follower tick and rebuild.
pub fn record(conn: &Connection, policy: OnBadRows, function: &'static str) -> Result<()> {
    conn.execute(&format!("UPDATE {META} SET on_bad_rows = ?"), [policy.name()])
        .map(|_| ())
        .map_err(|e| not_built(function, e))
}

/// The tolerant read of `src` (`core::quarantine::tolerant_read`) with `deleted` the SQL of
/// its delete flag.
pub fn tolerant_sql(src: &ResolvedSource, deleted: &str) -> String {
    let relation = src.tolerant.as_deref().unwrap_or(&src.relation);
    quarantine::tolerant_read(&src.columns, relation, deleted, src.tolerant.is_some())
}

/// The refusal of rows of `src` without a usable order_id.
pub fn keyless(src: &ResolvedSource, count: usize, first: &str) -> Error {
    Error::BadRow { source: src.raw.clone(), problem: quarantine::keyless(count, first) }
}

/// A change set under 'quarantine': the rows to apply, and the orders held with their reasons.
pub struct Sorted {
    /// `order_id, company, order_day, revenue, deleted`, as a strict read gives them.
    pub changes: Vec<RecordBatch>,
    pub held: Vec<(i64, String)>,
}

/// Reads the change set `src` tolerantly and sorts its rows (`core::quarantine::sort_out`);
/// rows without a usable order_id are refused.
pub fn read_sorted(conn: &Connection, src: &ResolvedSource, deleted: &str) -> Result<Sorted> {
    let read = batches(conn, &tolerant_sql(src, deleted), |e| Error::LoadFailed {
        source: src.raw.clone(),
        message: clean_duckdb_message(&e),
        probes: Vec::new(),
    })?;
    let (mut ids, mut problems) = (Vec::new(), Vec::new());
    let (mut without_key, mut first) = (0usize, None::<String>);
    for batch in &read {
        let key_problem: &StringArray = column(batch, 6)?;
        if key_problem.null_count() < batch.num_rows() {
            without_key += batch.num_rows() - key_problem.null_count();
            first = first.or_else(|| key_problem.iter().flatten().next().map(str::to_string));
        }
        ids.extend_from_slice(column::<Int64Array>(batch, 0)?.values());
        problems.extend(column::<StringArray>(batch, 5)?.iter());
    }
    if without_key > 0 {
        return Err(keyless(src, without_key, first.as_deref().unwrap_or("order_id is NULL")));
    }
    let verdict = quarantine::sort_out(&ids, &problems);
    let mut at = 0;
    let mut changes = Vec::with_capacity(read.len());
    for batch in &read {
        let keep = BooleanArray::from(verdict.good[at..at + batch.num_rows()].to_vec());
        at += batch.num_rows();
        let kept = filter_record_batch(&batch.project(&[0, 1, 2, 3, 4]).map_err(arrow_failed)?, &keep)
            .map_err(arrow_failed)?;
        if kept.num_rows() > 0 {
            changes.push(kept);
        }
    }
    Ok(Sorted { changes, held: verdict.held })
}

fn arrow_failed(e: duckdb::arrow::error::ArrowError) -> Error {
    Error::internal("serving_refresh: sorting out bad rows", e.to_string())
}

/// Brings `serving_quarantine` at `place` up to date after a change set whose keys are
/// `changed`: the orders in `held` are listed (a new reason replaces the old one, `since`
/// stays), every other changed order leaves the list (its good version or delete was applied).
/// Returns how many orders are listed now.
pub fn keep(conn: &Connection, place: &Place, held: &[(i64, String)], changed: Vec<i64>) -> Result<i64> {
    let failed = |e: duckdb::Error| Error::duckdb("serving_refresh: updating serving_quarantine", &e);
    let table = place.of(QUARANTINE);
    stage_held(conn, held)?;
    let keys = Parcel::new(Contents::Keys(changed));
    conn.execute(
        &format!("UPDATE {table} SET reason = h.reason FROM {HELD} h WHERE {table}.order_id = h.order_id"),
        [],
    )
    .map_err(failed)?;
    conn.prepare_cached(&format!(
        "DELETE FROM {table} WHERE order_id IN (SELECT order_id FROM {}) AND order_id NOT IN (SELECT order_id FROM {HELD})",
        Part::Keys.scan()
    ))
    .and_then(|mut s| s.execute([keys.id()]))
    .map_err(failed)?;
    conn.execute(
        &format!(
            "INSERT INTO {table} SELECT order_id, reason, to_timestamp(? / 1e6) FROM {HELD} \
             WHERE order_id NOT IN (SELECT order_id FROM {table})"
        ),
        [now_micros()],
    )
    .map_err(failed)?;
    conn.execute_batch(&format!("DROP TABLE {HELD}")).map_err(failed)?;
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0)).map_err(failed)
}

/// Stages `held` into the temp table HELD (order_id, reason).
fn stage_held(conn: &Connection, held: &[(i64, String)]) -> Result<()> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: staging the held orders", &e);
    conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE {HELD} (order_id BIGINT, reason VARCHAR)"))
        .map_err(failed)?;
    if held.is_empty() {
        return Ok(());
    }
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(held.iter().map(|(id, _)| *id)));
    let reasons: ArrayRef = Arc::new(StringArray::from_iter_values(held.iter().map(|(_, r)| r.as_str())));
    let batch = RecordBatch::try_from_iter([("order_id", ids), ("reason", reasons)]).map_err(arrow_failed)?;
    let mut appender = conn.appender(HELD).map_err(failed)?;
    appender.append_record_batch(batch).map_err(failed)?;
    appender.flush().map_err(failed)
}

/// For `serving_status`: how many orders are held and the first of their ids.
pub fn listed(conn: &Connection, place: &Place, count: i64) -> Result<Option<String>> {
    if count == 0 {
        return Ok(None);
    }
    let ids = first_ids(conn, place, quarantine::LISTED)?;
    Ok(quarantine::listed(&ids))
}

fn first_ids(conn: &Connection, place: &Place, limit: usize) -> Result<Vec<i64>> {
    let sql = format!("SELECT order_id FROM {} ORDER BY order_id LIMIT {limit}", place.of(QUARANTINE));
    let mut stmt = conn.prepare(&sql).map_err(|e| not_built("serving_status", e))?;
    let ids = stmt.query_map([], |r| r.get(0)).map_err(|e| not_built("serving_status", e))?;
    ids.collect::<std::result::Result<_, _>>().map_err(|e| not_built("serving_status", e))
}

/// The ids the caller's layer holds out, for a reader comparing it with its lake fact (empty
/// when nothing is held, nothing is built, or the layer is a replica).
pub fn held_ids(conn: &Connection) -> Vec<i64> {
    let recorded =
        conn.query_row(&format!("SELECT quarantined, serving_catalog, serving_schema FROM {META}"), [], |r| {
            Ok((r.get::<_, Option<i64>>(0)?, Place { catalog: r.get(1)?, schema: r.get(2)? }))
        });
    match recorded {
        Ok((Some(n), place)) if n > 0 => first_ids(conn, &place, n as usize).unwrap_or_default(),
        _ => Vec::new(),
    }
}
