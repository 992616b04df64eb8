//! The layer's mart as Rust holds it: `mart_daily` with its group counts
//! (`serving_mart_counts`) read into a `core::mart::Mart`, and the marts of recent refreshes
//! kept in memory by generation, so that a refresh, a publish or a lake-fact reconcile of an
//! unchanged layer never reads the tables again.

use std::sync::{Arc, Mutex};

use duckdb::arrow::array::{Date32Array, Decimal128Array, Int64Array, StringArray};
use duckdb::Connection;

use crate::core::error::Result;
use crate::core::mart::{Group, Mart};
use crate::core::schema::{Place, COUNTS, MART};
use crate::host::transaction::in_transaction;
use crate::serving::meta::{generation, not_built, require_built, served_place};
use crate::serving::read::{batches, column};

/// The marts of recent refreshes, by the generation each wrote into serving_meta. A refresh
/// whose serving_meta names one of them skips reading mart_daily and its counts. Generations
/// are random per build/refresh (`meta::new_generation`), so a mart changed by anyone else
/// (another process, a rebuild, a rolled-back refresh) never matches.
static MARTS: Mutex<Vec<(i64, Warm)>> = Mutex::new(Vec::new());

const CACHED_MARTS: usize = 4;
/// Bigger marts are read from their tables each time rather than kept in memory.
const CACHED_GROUPS: usize = 1 << 20;

/// A cached mart, and how many dead row versions fct_orders holds since its last rewrite (see
/// `refresh`'s compaction); unknown (0) after a cache miss, which only postpones a compaction.
#[derive(Clone)]
pub struct Warm {
    pub mart: Arc<Mart>,
    pub dead_rows: i64,
}

/// The mart cached under `generation`, if any.
pub fn cached_mart(generation: i64) -> Option<Warm> {
    let marts = MARTS.lock().unwrap_or_else(|p| p.into_inner());
    marts.iter().find(|(g, _)| *g == generation).map(|(_, m)| m.clone())
}

/// Keeps `mart` under `generation` (only once that generation is committed).
pub fn remember_mart(generation: i64, mart: Warm) {
    if mart.mart.len() > CACHED_GROUPS {
        return;
    }
    let mut marts = MARTS.lock().unwrap_or_else(|p| p.into_inner());
    if marts.len() >= CACHED_MARTS {
        marts.remove(0);
    }
    marts.push((generation, mart));
}

/// Reads mart_daily and its counts from the tables (when the cache cannot vouch for them).
pub fn read_mart(conn: &Connection, place: &Place) -> Result<Mart> {
    let failed = |e: duckdb::Error| not_built("serving_refresh", e);
    let mart = batches(conn, &format!("SELECT company, order_day, revenue FROM {}", place.of(MART)), failed)?;
    let counts = batches(conn, &crate::core::schema::counts_rows(&place.of(COUNTS)), failed)?;
    let mut groups = Vec::new();
    for (batch, is_mart) in mart.iter().map(|b| (b, true)).chain(counts.iter().map(|b| (b, false))) {
        let company: &StringArray = column(batch, 0)?;
        let day: &Date32Array = column(batch, 1)?;
        for i in 0..batch.num_rows() {
            let (revenue, orders) = if is_mart {
                (column::<Decimal128Array>(batch, 2)?.value(i), 0)
            } else {
                (0, column::<Int64Array>(batch, 2)?.value(i))
            };
            groups.push(Group { company: company.value(i), day: day.value(i), revenue, orders });
        }
    }
    Ok(Mart::from_groups(&groups))
}

/// The layer's mart with its counts, as one consistent read: the cached mart when
/// serving_meta's generation vouches for it, else read from the tables.
pub fn current_mart(conn: &Connection, function: &'static str) -> Result<Arc<Mart>> {
    require_built(conn, function)?;
    in_transaction(conn, || mart_in_transaction(conn, function).map(|(mart, _)| mart))
}

/// `current_mart` inside a transaction the caller holds (to read more of the same state), with
/// the generation that vouches for it.
pub fn mart_in_transaction(conn: &Connection, function: &'static str) -> Result<(Arc<Mart>, Option<i64>)> {
    let generation = generation(conn, function)?;
    if let Some(warm) = generation.and_then(cached_mart) {
        return Ok((warm.mart, generation));
    }
    Ok((Arc::new(read_mart(conn, &served_place(conn, function)?)?), generation))
}
