//! What a serving layer holds — a fact layer (`fct_orders` and the mart built from it) or a
//! mart-only replica (the mart alone, from a Paimon mart table: `replica`) — decided here and
//! nowhere else. A build asks [`is_mart_table`] of its Paimon source; every later operation asks
//! [`mode`] of the layer, and a function that needs the fact asks [`refuse_in_mart_mode`].
//!
//! The mode is recorded in `serving_meta.mode` ('fact' or 'mart'); a layer built by an older
//! release has no such column and is a fact layer. A fact layer whose `fct_orders` a user
//! dropped stays a fact layer (its functions say "run serving_build"), never a replica.

use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, Error, Result};
use crate::core::schema::META;
use crate::core::tier::MART_KEY;
use crate::lake::LakeTable;
use crate::serving::meta::not_built;

/// What to do instead of a fact-only function on a replica.
pub const NEEDS_FACT: &str =
    "serving_reconcile(fact := 'paimon:<lake fact table>') checks this replica against the lake fact \
     without loading it; serving_olap needs a database built from the fact table";

/// What a serving layer holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// `fct_orders` and the mart built from it.
    #[default]
    Fact,
    /// Only the mart, read from a Paimon mart table.
    Mart,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fact => "fact",
            Mode::Mart => "mart",
        }
    }
}

/// Whether a Paimon table is a mart table, so that a build from it makes a replica: its primary
/// key is exactly `(company, order_day)` (a fact table's key is `order_id`). Its columns are
/// checked when it is read, so a mart table missing one is refused by name rather than taken
/// for a fact table.
pub fn is_mart_table(table: &LakeTable) -> bool {
    let keys = table.primary_keys();
    keys.len() == MART_KEY.len() && MART_KEY.iter().all(|k| keys.iter().any(|p| p.eq_ignore_ascii_case(k)))
}

/// The mode of the layer `serving_meta` (as the caller's search_path resolves it) records.
pub fn mode(conn: &Connection, function: &'static str) -> Result<Mode> {
    match conn.query_row(&format!("SELECT mode FROM {META}"), [], |r| r.get::<_, Option<String>>(0)) {
        Ok(Some(mode)) if mode == Mode::Mart.name() => Ok(Mode::Mart),
        Ok(_) => Ok(Mode::Fact),
        Err(e) => {
            let message = clean_duckdb_message(&e);
            // No `mode` column: a layer of an older release, always a fact layer.
            if message.contains("Binder Error") && message.contains("mode") {
                Ok(Mode::Fact)
            } else {
                Err(not_built(function, e))
            }
        }
    }
}

/// Refuses `function` on a mart-only replica: it needs the fact, which a replica does not hold.
pub fn refuse_in_mart_mode(conn: &Connection, function: &'static str, instead: &str) -> Result<()> {
    match mode(conn, function) {
        Ok(Mode::Mart) => {}
        // Not built (or a fact layer): the function's own checks say what is wrong, in their order.
        Ok(Mode::Fact) | Err(Error::NotBuilt { .. }) => return Ok(()),
        Err(e) => return Err(e),
    }
    Err(Error::Refused {
        function,
        problem: format!(
            "this serving layer is a mart-only replica (built from a Paimon mart table): it holds mart_daily \
             but no fct_orders, which {function} needs; {instead}"
        ),
    })
}
