//! `serving_refresh(changes VARCHAR [, deleted := VARCHAR])`: applies the latest merged rows of
//! changed orders (a BOOLEAN `deleted` column, or what `deleted :=` names, marks deletes) to
//! fct_orders and moves mart_daily by the delta, atomically.

use duckdb::core::LogicalTypeId;

use super::rows::{Cell, Ctx};
use super::table::RowsFunction;
use crate::error::Result;
use crate::refresh;
use crate::session::Role;

pub struct ServingRefresh;

impl RowsFunction for ServingRefresh {
    const NAME: &'static str = "serving_refresh";
    const PARAM: Option<&'static str> = Some("changes");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("inserted", LogicalTypeId::Bigint),
        ("updated", LogicalTypeId::Bigint),
        ("deleted", LogicalTypeId::Bigint),
        ("ignored_deletes", LogicalTypeId::Bigint),
        ("mart_rows_touched", LogicalTypeId::Bigint),
        ("fct_rows", LogicalTypeId::Bigint),
        ("mart_rows", LogicalTypeId::Bigint),
        ("source", LogicalTypeId::Varchar),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("elapsed_ms", LogicalTypeId::Double),
    ];
    const ROLE: Role = Role::Writer;
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[("deleted", LogicalTypeId::Varchar)];
    const LAKE_OPTIONS: bool = true;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let access = ctx.session.lake_access(&ctx.call.access, &ctx.call.arg);
        let deleted = ctx.call.named.first().cloned().flatten();
        let s = refresh::refresh(ctx.conn, &ctx.call.arg, &access, deleted.as_deref())?;
        Ok(vec![vec![
            s.inserted.into(),
            s.updated.into(),
            s.deleted.into(),
            s.ignored_deletes.into(),
            s.mart_rows_touched.into(),
            s.fct_rows.into(),
            s.mart_rows.into(),
            s.source.into(),
            s.lake_snapshot.into(),
            s.elapsed_ms.into(),
        ]])
    }
}
