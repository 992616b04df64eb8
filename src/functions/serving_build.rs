//! `serving_build(source VARCHAR)`: (re)creates fct_orders + mart_daily in one transaction and
//! returns one summary row.

use duckdb::core::LogicalTypeId;

use super::rows::{Cell, Ctx};
use super::table::RowsFunction;
use crate::error::Result;
use crate::session::Role;
use crate::{refresh, serving};

pub struct ServingBuild;

impl RowsFunction for ServingBuild {
    const NAME: &'static str = "serving_build";
    const PARAM: Option<&'static str> = Some("source");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("fct_rows", LogicalTypeId::Bigint),
        ("mart_rows", LogicalTypeId::Bigint),
        ("companies", LogicalTypeId::Bigint),
        ("days", LogicalTypeId::Bigint),
        ("total_revenue", LogicalTypeId::Hugeint),
        ("source", LogicalTypeId::Varchar),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("elapsed_ms", LogicalTypeId::Double),
    ];
    const ROLE: Role = Role::Writer;
    const LAKE_OPTIONS: bool = true;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let s = serving::build(ctx.conn, &ctx.call.arg, &ctx.session.lake_access(&ctx.call.access, &ctx.call.arg))?;
        serving::after_commit(ctx.conn, refresh::warm);
        Ok(vec![vec![
            s.fct_rows.into(),
            s.mart_rows.into(),
            s.companies.into(),
            s.days.into(),
            s.total_revenue.into(),
            s.source.into(),
            s.lake_snapshot.into(),
            s.elapsed_ms.into(),
        ]])
    }
}
