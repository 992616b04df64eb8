//! The serving layer's operations, run on the extension's own connections (`host`).
//!
//! - What is served: `served` (a fact layer or a mart-only replica, decided there only), `meta`
//!   (serving_meta and the session facts every operation asks first), `state` (what a database
//!   keeps in memory).
//! - Building: `source` (a resolved source; `BuildRequest`, a build's options as one value),
//!   `layer` (the fact layer; a table, view or file source), `lake_source` (a Paimon table),
//!   `stream_source` (a Fluss table: the union read, the follower's tick, `check` — the spot check
//!   against Fluss's own lookups — and `scan`, the table's current state; in the DuckDB 1.4
//!   artifact `stream_off.rs`, which refuses Fluss sources: the one place that artifact differs
//!   here), `mapped` (a source read through `columns :=`, and the expression gate), `replica`
//!   (a mart-only layer from a Paimon mart table).
//! - Reading: `read` (dashboard, OLAP oracle, plan, at the place the layer records),
//!   `mart_table` (the mart as Rust holds it, cached by generation), `lake_fact` (a Paimon fact
//!   table aggregated while it streams).
//! - Keeping fresh and checking: `refresh` (a change set applied), `delta` (a Paimon table's new
//!   snapshots as a change set), `history` (whether the lake snapshot held is still the table's),
//!   `follow` (the background follower), `start_follow` (serving_follow: the checks, the first
//!   publish, the swap), `publish` (the mart to a Paimon mart table),
//!   `freshness` (which fact state the mart reflects, carried by a publish, shown by status),
//!   `quarantine` (orders held out of the layer under `on_bad_rows := 'quarantine'`),
//!   `reconcile` (the mart against a fact), `status` (what the layer says of itself, and the whole
//!   serving_status report: its state and lag_ms).
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
pub mod start_follow;
pub mod state;
pub mod status;
// The one place the DuckDB 1.4 artifact differs here: it is built without the Fluss client, and
// its `stream_source` is a stand-in that refuses a Fluss source in the same words everywhere.
#[cfg_attr(duckdb14, path = "stream_off.rs")]
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
use crate::serving::source::{BuildRequest, Given};

/// `serving_build`: a Paimon mart table makes a mart-only replica (`replica`), a Fluss table a
/// fact layer by union read (`stream_source`), anything else a fact layer (`layer`). Runs inside
/// `tx`, left open for the caller to commit.
pub fn build(conn: &Connection, req: &BuildRequest, tx: &mut Transaction) -> Result<layer::BuildSummary> {
    let started = std::time::Instant::now();
    match req.origin {
        Origin::Stream(address) => stream_source::build(conn, req, address, tx),
        Origin::Relation(source) => layer::build(conn, req, Given::Relation(source), tx),
        Origin::Lake(path) => {
            refuse_read_only(conn, "serving_build")?;
            // Opened once: whether it is a mart table, and the fact build's read.
            let table = LakeTable::open("serving", path, req.access)?;
            if !is_mart_table(&table) {
                return layer::build(conn, req, Given::Lake(&table), tx);
            }
            if req.policy == OnBadRows::Quarantine {
                return Err(Error::Refused {
                    function: "serving_build",
                    problem: format!(
                        "on_bad_rows := 'quarantine' holds bad orders out of a fact layer, but '{}' is a mart \
                         table (a mart-only replica has no orders to hold out; the layer that publishes it does)",
                        req.raw
                    ),
                });
            }
            if !req.replace {
                layer::refuse_foreign_tables(conn, &current_place(conn)?)?;
            }
            replica::build(conn, req.raw, &table, tx, started)
        }
    }
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
