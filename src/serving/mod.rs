//! The serving layer's operations, run on the extension's own connections (`host`): `layer`
//! builds and reads the tables (`fct_orders`, `mart_daily`, ...), `refresh` applies changes and
//! reconciles, `delta` turns a Paimon table's new snapshots into a refresh's change set, `replica` serves a mart-only layer from a Paimon mart table, `publish` writes the
//! mart to a Paimon mart table for replicas elsewhere, `follow` keeps a layer fresh from a Paimon
//! table in the background (and publishes after each apply), `handoff` passes Rust-made batches
//! to DuckDB through the internal table function, `state` is what a database keeps in memory
//! (follower, last reconcile, storage options, last publish) and the `Database` value every SQL
//! function receives. Every write is one transaction: a failure leaves the previous layer
//! exactly as it was.

pub mod delta;
pub mod follow;
pub mod handoff;
pub mod layer;
pub mod publish;
pub mod refresh;
pub mod replica;
pub mod state;

use duckdb::Connection;

use crate::core::dashboard::DashboardQuery;
use crate::core::error::{Error, Result};
use crate::core::source::Origin;
use crate::host::transaction::Transaction;
use crate::lake::{Access, LakeTable};

/// `serving_build`: a Paimon mart table makes a mart-only replica (`replica`), anything else a
/// fact layer (`layer`). Runs inside `tx`, left open for the caller to commit.
pub fn build(
    conn: &Connection,
    raw: &str,
    access: &Access,
    replace: bool,
    tx: &mut Transaction,
) -> Result<layer::BuildSummary> {
    let started = std::time::Instant::now();
    layer::refuse_read_only(conn, "serving_build")?;
    if let Origin::Lake(path) = Origin::of(raw, &access.sandbox)? {
        let table = LakeTable::open("serving", &path, access)?;
        if replica::is_mart_table(&table) {
            if !replace {
                layer::refuse_foreign_tables(conn, &layer::current_place(conn)?)?;
            }
            return replica::build(conn, raw, &table, access, tx, started);
        }
    }
    layer::build(conn, raw, access, replace, tx)
}

/// `serving_olap`: the dashboard's question asked of `fct_orders`; a replica has none and says so.
pub fn olap(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<layer::DayRevenue> {
    layer::olap(conn, company, query).or_else(|e| match e {
        // fct_orders missing while serving_meta is there: a mart-only replica.
        Error::NotBuilt { .. } => {
            replica::refuse_in_mart_mode(conn, "serving_olap", replica::NEEDS_FACT)?;
            Err(e)
        }
        e => Err(e),
    })
}
