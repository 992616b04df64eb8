//! Reconciling the served mart against a fact: the layer's own `fct_orders` (a fact layer), or
//! a Paimon fact table's merged state aggregated while it streams (`lake_fact`; how a mart-only
//! replica checks itself, as of the fact snapshot its mart reflects), as two-way differences; and the outcome recorded in serving_meta for
//! `serving_status`, unless the layer has moved on since.

use duckdb::types::ValueRef;
use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::fact_mark::FactMark;
use crate::core::mart::Group;
use crate::core::schema::META;
use crate::host::transaction::in_transaction;
use crate::lake::Access;
use crate::serving::freshness::layer_mark;
use crate::serving::lake_fact::lake_fact_mart;
use crate::serving::mart_table::mart_in_transaction;
use crate::serving::meta::{read_only, require_built, served_place};
use crate::serving::served::{mode, refuse_in_mart_mode, Mode, NEEDS_FACT};

/// One differing row of a reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub side: String,
    pub company: Option<String>,
    /// Days since 1970-01-01.
    pub order_day: Option<i32>,
    pub revenue: Option<i128>,
    pub orders: Option<i64>,
}

/// `serving_reconcile`: the served mart against a fact — the layer's own `fct_orders`, or, with
/// `lake_fact` (a Paimon fact table and how to reach it), that table's merged state. Returns
/// the differences and the generation of the state checked.
pub fn reconcile(conn: &Connection, lake_fact: Option<(&str, &Access)>) -> Result<(Vec<Difference>, Option<i64>)> {
    match lake_fact {
        Some((fact, access)) => against_lake_fact(conn, fact, access),
        None => against_layer_fact(conn),
    }
}

/// Whole-mart check against the layer's fact, on one committed state (a read transaction, so a
/// refresh committing meanwhile is seen entirely or not at all).
fn against_layer_fact(conn: &Connection) -> Result<(Vec<Difference>, Option<i64>)> {
    require_built(conn, "serving_reconcile")?;
    refuse_in_mart_mode(conn, "serving_reconcile", NEEDS_FACT)?;
    in_transaction(conn, || {
        let failed = |e: duckdb::Error| Error::duckdb("serving_reconcile", &e);
        let generation: Option<i64> =
            conn.query_row(&format!("SELECT generation FROM {META}"), [], |r| r.get(0)).map_err(failed)?;
        let place = served_place(conn, "serving_reconcile")?;
        let mut stmt = conn.prepare(&crate::core::schema::reconcile_sql(&place)).map_err(failed)?;
        let diffs = stmt
            .query_map([], |r| {
                Ok(Difference {
                    side: r.get(0)?,
                    company: r.get(1)?,
                    order_day: match r.get_ref(2)? {
                        ValueRef::Date32(d) => Some(d),
                        _ => None,
                    },
                    revenue: match r.get_ref(3)? {
                        ValueRef::HugeInt(v) => Some(v),
                        _ => None,
                    },
                    orders: r.get(4)?,
                })
            })
            .map_err(failed)?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(failed)?;
        Ok((diffs, generation))
    })
}

/// A reconcile's outcome: when, whether clean, and which state (generation) it checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled {
    pub at: i64,
    pub clean: bool,
    pub generation: Option<i64>,
}

/// Stores a reconcile's outcome in serving_meta, unless the layer has moved on since.
pub fn record_reconcile(conn: &Connection, r: Reconciled) -> Result<()> {
    // Checking needs only reads: on a read-only database the outcome stays in memory.
    if read_only(conn) {
        return Ok(());
    }
    conn.execute(
        &format!(
            "UPDATE {META} SET last_reconcile_at = make_timestamp(?), last_reconcile_clean = ? \
             WHERE generation IS NOT DISTINCT FROM ?"
        ),
        duckdb::params![r.at, r.clean, r.generation],
    )
    .map(|_| ())
    .map_err(|e| Error::duckdb("serving_reconcile: recording the outcome", &e))
}

/// `serving_reconcile(fact := ...)`: the served mart (with its counts) against the mart of a
/// Paimon fact table aggregated while streaming it, as two-way differences like a fact layer's
/// reconcile. Works in both modes; a replica has no other way to check itself, and is checked
/// against the fact snapshot its mart reflects when its publisher recorded one (`freshness`).
fn against_lake_fact(conn: &Connection, fact: &str, access: &Access) -> Result<(Vec<Difference>, Option<i64>)> {
    const FUNCTION: &str = "serving_reconcile";
    require_built(conn, FUNCTION)?;
    // One state: the mart, its generation and the fact state it reflects, read together. A
    // replica is checked against that fact state, not the latest: lagging behind the fact is not
    // a difference (serving_status reports it), a wrong mart is.
    let (served, generation, at) = in_transaction(conn, || {
        let (served, generation) = mart_in_transaction(conn, FUNCTION)?;
        let at = match mode(conn, FUNCTION)? {
            Mode::Mart => layer_mark(conn, FUNCTION)?,
            Mode::Fact => FactMark::default(),
        };
        Ok((served, generation, at))
    })?;
    let (fresh, _snapshot) = lake_fact_mart(conn, "serving_reconcile", fact, access, None, &at)?;
    let side = |name: &str, groups: Vec<Group<'_>>| -> Vec<Difference> {
        groups
            .into_iter()
            .map(|g| Difference {
                side: name.to_string(),
                company: Some(g.company.to_string()),
                order_day: Some(g.day),
                revenue: Some(g.revenue),
                orders: Some(g.orders),
            })
            .collect()
    };
    let mut diffs = side("mart_only", served.changes_since(&fresh).upserts);
    diffs.extend(side("fact_only", fresh.changes_since(&served).upserts));
    diffs.sort_by(|a, b| (&a.company, a.order_day, &a.side).cmp(&(&b.company, b.order_day, &b.side)));
    Ok((diffs, generation))
}
