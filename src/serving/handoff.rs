//! Values computed in Rust, handed to a SQL statement of the extension's own connection.
//!
//! A refresh ends in statements like `DELETE ... WHERE order_id IN (<changed keys>)`,
//! `INSERT INTO fct_orders <new versions>` and `CREATE TABLE mart_daily AS <folded groups>`.
//! Feeding those rows through an internal table function (`__streamhouse_handoff`) lets
//! DuckDB run each as one pipeline: no temp table to
//! create and drop, no casts, and table names resolve through the session's search_path (an
//! appender would only look in `main`). Parcels are keyed by a random id and withdrawn when
//! dropped, so refreshes of different databases running at once never see each other's rows.
//! A build from a Paimon table parks its planned read the same way: the load statement scans
//! it on DuckDB's threads, with no staged copy of the rows.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use duckdb::arrow::datatypes::SchemaRef;
use duckdb::arrow::record_batch::RecordBatch;

use crate::core::mart::Mart;
use crate::lake::Scan;

pub const FUNCTION: &str = "__streamhouse_handoff";

/// What a parcel holds.
pub enum Contents {
    Keys(Vec<i64>),
    Mart(Arc<Mart>),
    /// fct_orders-shaped Arrow batches (order_id, company, order_day, revenue), none longer
    /// than a DuckDB vector (`core::VECTOR_SIZE` rows).
    Rows(Vec<RecordBatch>),
    /// A planned read of a Paimon table, read on DuckDB's threads each time it is scanned; its
    /// columns (`schema`, as the table declares them) in the order the read projects them.
    Lake {
        scan: Box<Scan>,
        schema: SchemaRef,
    },
}

/// Which columns a scan of a parcel returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `order_id BIGINT` of a Keys parcel.
    Keys,
    /// `company, order_day, revenue` of a Mart parcel: the mart_daily rows.
    Mart,
    /// `order_id, company, order_day, revenue` of a Rows parcel.
    Rows,
    /// `company, order_days, orders` of a Mart parcel: per company, its days and their order
    /// counts as aligned lists (the layout of serving_mart_counts).
    Counts,
    /// The columns of a Lake parcel.
    Lake,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Keys => "keys",
            Part::Mart => "mart",
            Part::Counts => "counts",
            Part::Rows => "rows",
            Part::Lake => "lake",
        }
    }

    pub fn parse(s: &str) -> Option<Part> {
        [Part::Keys, Part::Mart, Part::Counts, Part::Rows, Part::Lake].into_iter().find(|p| p.name() == s)
    }
}

static PARCELS: Mutex<Option<HashMap<i64, Arc<Contents>>>> = Mutex::new(None);

fn parcels() -> std::sync::MutexGuard<'static, Option<HashMap<i64, Arc<Contents>>>> {
    PARCELS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new parcel id: a random non-negative BIGINT (serving_meta's generations have their own,
/// `meta::new_generation`).
fn parcel_id() -> i64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 1) as i64
}

/// Rows parked for SQL to read until the parcel is dropped.
pub struct Parcel {
    id: i64,
}

impl Parcel {
    pub fn new(contents: Contents) -> Parcel {
        let id = parcel_id();
        parcels().get_or_insert_with(HashMap::new).insert(id, Arc::new(contents));
        Parcel { id }
    }

    /// The parcel's id, the first argument of the scan (a statement parameter, so that the
    /// statements stay the same from one refresh to the next and their plans can be cached).
    pub fn id(&self) -> i64 {
        self.id
    }
}

impl Part {
    /// The table-function call that scans this part of the parcel whose id is parameter `?`.
    pub fn scan(self) -> String {
        format!("{FUNCTION}(?, '{}')", self.name())
    }

    /// The table-function call that scans this part of parcel `id` (for a relation read by
    /// several statements, none of which takes parameters).
    pub fn scan_of(self, id: i64) -> String {
        format!("{FUNCTION}({id}, '{}')", self.name())
    }
}

impl Drop for Parcel {
    fn drop(&mut self) {
        if let Some(map) = parcels().as_mut() {
            map.remove(&self.id);
        }
    }
}

/// The contents of a live parcel.
pub fn open(id: i64) -> Option<Arc<Contents>> {
    parcels().as_ref().and_then(|m| m.get(&id).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parcels_are_withdrawn_when_dropped() {
        let p = Parcel::new(Contents::Keys(vec![1, 2]));
        let id = p.id();
        assert!(matches!(open(id).as_deref(), Some(Contents::Keys(k)) if k == &[1, 2]));
        drop(p);
        assert!(open(id).is_none());
        assert_ne!(parcel_id(), parcel_id());
        assert_eq!(Part::parse("counts"), Some(Part::Counts));
        assert_eq!(Part::parse("x"), None);
    }
}
