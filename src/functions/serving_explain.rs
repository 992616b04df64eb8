//! `serving_explain(company VARCHAR [, top, from_day, to_day, grain])`: EXPLAIN of exactly the
//! statement serving_dashboard runs for those parameters. A table function is an opaque node in
//! an outer EXPLAIN, so this is how its plan is shown. One row per line of the rendered plan, so
//! the CLI's default box mode shows the plan as drawn instead of one cell of escaped newlines.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::host::session::Role;
use crate::serving::read;

pub struct ServingExplain;

impl RowsFunction for ServingExplain {
    const NAME: &'static str = "serving_explain";
    const PARAM: Option<&'static str> = Some("company");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("explain_key", LogicalTypeId::Varchar),
        ("line", LogicalTypeId::Bigint),
        ("explain_value", LogicalTypeId::Varchar),
    ];
    const ROLE: Role = Role::Reader;
    const DASHBOARD: bool = true;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let plan = read::explain(ctx.conn, &ctx.call.arg, &ctx.call.dashboard)?;
        Ok(numbered_lines(&plan)
            .map(|(key, line, text)| vec![Cell::Text(key.into()), Cell::BigInt(line), Cell::Text(text.into())])
            .collect())
    }
}

/// Every line of every (key, text) pair, numbered from 1 across the whole output.
pub fn numbered_lines(blocks: &[(String, String)]) -> impl Iterator<Item = (&str, i64, &str)> {
    blocks
        .iter()
        .flat_map(|(key, text)| text.lines().map(move |line| (key.as_str(), line)))
        .zip(1..)
        .map(|((key, line), n)| (key, n, line))
}
