//! `serving_explain(company VARCHAR)`: EXPLAIN of exactly the statement serving_dashboard runs.
//! A table function is an opaque node in an outer EXPLAIN, so this is how its plan is shown.

use duckdb::core::LogicalTypeId;
use duckdb::Connection;

use super::rows::Cell;
use super::table::RowsFunction;
use crate::error::Result;
use crate::serving;

pub struct ServingExplain;

impl RowsFunction for ServingExplain {
    const NAME: &'static str = "serving_explain";
    const PARAM: Option<&'static str> = Some("company");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] =
        &[("explain_key", LogicalTypeId::Varchar), ("explain_value", LogicalTypeId::Varchar)];

    fn rows(conn: &Connection, company: &str) -> Result<Vec<Vec<Cell>>> {
        let plan = serving::explain(conn, company)?;
        Ok(plan.into_iter().map(|(k, v)| vec![Cell::Text(k), Cell::Text(v)]).collect())
    }
}
