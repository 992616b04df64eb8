//! The serving layer's operations, run on the extension's own connections (`host`).
//!
//! - What is served: `served` (a fact layer or a mart-only replica, decided there only), `meta`
//!   (serving_meta and the session facts every operation asks first), `state` (what a database
//!   keeps in memory).
//! - Building: `source` (a resolved source), `layer` (the fact layer; a table, view or file
//!   source), `lake_source` (a Paimon table), `stream_source` (a Fluss table, by union read;
//!   `stream_check` spot-checks what a union read loaded against Fluss's own lookups),
//!   `mapped` (a source read through `columns :=`), `replica` (a mart-only layer from a Paimon
//!   mart table).
//! - Reading: `read` (dashboard, OLAP oracle, plan, at the place the layer records),
//!   `mart_table` (the mart as Rust holds it, cached by generation), `lake_fact` (a Paimon fact
//!   table aggregated while it streams), `stream_scan` (a Fluss table's current state).
//! - Keeping fresh and checking: `refresh` (a change set applied), `delta` (a Paimon table's new
//!   snapshots as a change set), `history` (whether the lake snapshot held is still the table's),
//!   `follow` (the background follower), `publish` (the mart to a Paimon mart table),
//!   `freshness` (which fact state the mart reflects, carried by a publish, shown by status),
//!   `quarantine` (orders held out of the layer under `on_bad_rows := 'quarantine'`),
//!   `reconcile` (the mart against a fact), `status` (what the layer says of itself).
//! - `handoff` passes Rust-made rows to DuckDB.
//!
//! Every write is one transaction: a failure leaves the previous layer exactly as it was.

pub mod delta;
pub mod follow;
pub mod freshness;
pub mod handoff;
pub mod history;
pub mod lake_fact;
pub mod lake_source;
pub mod layer;
pub mod mapped;
pub mod mart_table;
pub mod meta;
pub mod publish;
pub mod quarantine;
pub mod read;
pub mod reconcile;
pub mod refresh;
pub mod replica;
pub mod served;
pub mod source;
pub mod state;
pub mod status;
#[cfg(not(duckdb14))]
pub mod stream_check;
#[cfg(not(duckdb14))]
pub mod stream_scan;
#[cfg(not(duckdb14))]
pub mod stream_source;

use duckdb::Connection;

use crate::core::dashboard::DashboardQuery;
use crate::core::error::{Error, Result};
use crate::core::quarantine::OnBadRows;
use crate::core::source::Origin;
use crate::host::transaction::Transaction;
use crate::lake::{Access, LakeTable};
use crate::serving::meta::{current_place, refuse_read_only};
use crate::serving::served::{is_mart_table, refuse_in_mart_mode, NEEDS_FACT};
use crate::serving::source::Given;

/// `serving_build`: a Paimon mart table makes a mart-only replica (`replica`), a Fluss table a
/// fact layer by union read (`stream_source`), anything else a fact layer (`layer`). Runs inside
/// `tx`, left open for the caller to commit.
#[allow(clippy::too_many_arguments)]
pub fn build(
    conn: &Connection,
    raw: &str,
    origin: &Origin,
    map: Option<&crate::core::mapping::ColumnMap>,
    lake: Option<&str>,
    access: &Access,
    (replace, policy): (bool, OnBadRows),
    tx: &mut Transaction,
) -> Result<layer::BuildSummary> {
    let started = std::time::Instant::now();
    match origin {
        Origin::Stream(address) => stream_build(conn, raw, address, map, lake, access, (replace, policy), tx),
        Origin::Relation(source) => {
            layer::build(conn, raw, Given::Relation(source), map, access, (replace, policy), tx)
        }
        Origin::Lake(path) => {
            refuse_read_only(conn, "serving_build")?;
            // Opened once: whether it is a mart table, and the fact build's read.
            let table = LakeTable::open("serving", path, access)?;
            if !is_mart_table(&table) {
                return layer::build(conn, raw, Given::Lake(&table), map, access, (replace, policy), tx);
            }
            if policy == OnBadRows::Quarantine {
                return Err(Error::Refused {
                    function: "serving_build",
                    problem: format!(
                        "on_bad_rows := 'quarantine' holds bad orders out of a fact layer, but '{raw}' is a mart \
                         table (a mart-only replica has no orders to hold out; the layer that publishes it does)"
                    ),
                });
            }
            if !replace {
                layer::refuse_foreign_tables(conn, &current_place(conn)?)?;
            }
            replica::build(conn, raw, &table, tx, started)
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[cfg(not(duckdb14))]
fn stream_build(
    conn: &Connection,
    raw: &str,
    address: &crate::core::stream::FlussAddress,
    map: Option<&crate::core::mapping::ColumnMap>,
    lake: Option<&str>,
    access: &Access,
    options: (bool, OnBadRows),
    tx: &mut Transaction,
) -> Result<layer::BuildSummary> {
    stream_source::build(conn, raw, address, map, lake, access, options, tx)
}

/// The DuckDB 1.4 artifact is built without the Fluss client.
#[allow(clippy::too_many_arguments)]
#[cfg(duckdb14)]
fn stream_build(
    _: &Connection,
    raw: &str,
    _: &crate::core::stream::FlussAddress,
    _: Option<&crate::core::mapping::ColumnMap>,
    _: Option<&str>,
    _: &Access,
    _: (bool, OnBadRows),
    _: &mut Transaction,
) -> Result<layer::BuildSummary> {
    Err(Error::BadSource {
        source: raw.into(),
        reason: "Fluss sources need the DuckDB 1.5+ artifact (the 1.4 artifact is built without the Fluss client)"
            .into(),
    })
}

/// `serving_olap`: the dashboard's question asked of the fact — the layer's `fct_orders`, or,
/// with `lake_fact` (a Paimon fact table and how to reach it), that table aggregated while it
/// streams (`lake_fact`). A replica has no fct_orders and says so.
pub fn olap(
    conn: &Connection,
    company: &str,
    query: &DashboardQuery,
    lake_fact: Option<(&str, &Access)>,
) -> Result<read::DayRevenue> {
    if let Some((fact, access)) = lake_fact {
        return lake_fact::olap_from_lake(conn, company, query, fact, access);
    }
    read::olap(conn, company, query).or_else(|e| match e {
        // fct_orders missing while serving_meta is there: a mart-only replica.
        Error::NotBuilt { .. } => {
            refuse_in_mart_mode(conn, "serving_olap", NEEDS_FACT)?;
            Err(e)
        }
        e => Err(e),
    })
}
