//! `serving_explain(company VARCHAR [, top, from_day, to_day, grain])`: EXPLAIN of exactly the
//! statement serving_dashboard runs for those parameters. A table function is an opaque node in
//! an outer EXPLAIN, so this is how its plan is shown.

use duckdb::core::LogicalTypeId;

use super::rows::{Cell, Ctx};
use super::table::RowsFunction;
use crate::error::Result;
use crate::serving;
use crate::session::Role;

pub struct ServingExplain;

impl RowsFunction for ServingExplain {
    const NAME: &'static str = "serving_explain";
    const PARAM: Option<&'static str> = Some("company");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] =
        &[("explain_key", LogicalTypeId::Varchar), ("explain_value", LogicalTypeId::Varchar)];
    const ROLE: Role = Role::Reader;
    const DASHBOARD: bool = true;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let plan = serving::explain(ctx.conn, &ctx.call.arg, &ctx.call.dashboard)?;
        Ok(plan.into_iter().map(|(k, v)| vec![Cell::Text(k), Cell::Text(v)]).collect())
    }
}
