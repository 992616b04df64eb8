//! `serving_refresh(changes VARCHAR [, deleted := VARCHAR] [, on_bad_rows := VARCHAR])`: applies
//! the latest merged rows of changed orders (a BOOLEAN `deleted` column, or what `deleted :=`
//! names, marks deletes) to fct_orders and moves mart_daily by the delta, atomically; a bad
//! order fails the change set, or, under `on_bad_rows := 'quarantine'`, is held out
//! (`core::quarantine`; the policy given becomes the layer's).

use duckdb::core::LogicalTypeId;

use super::glue::lake_batches::TableArg;
use super::glue::rows::{on_bad_rows, Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::host::transaction::Transaction;
use crate::serving::refresh;

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
        ("rebuilt_because", LogicalTypeId::Varchar),
        ("quarantined", LogicalTypeId::Bigint),
    ];
    const ROLE: Role = Role::Writer;
    const NAMED: &'static [(&'static str, LogicalTypeId)] =
        &[("deleted", LogicalTypeId::Varchar), ("on_bad_rows", LogicalTypeId::Varchar)];
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("changes", TableArg::Source)];
    const COLUMN_MAP: bool = true;

    fn write(ctx: &Ctx, tx: &mut Transaction) -> Result<Vec<Vec<Cell>>> {
        let on_bad_rows = on_bad_rows(ctx, Self::NAME)?;
        // The source decided once; everything below takes this value, never the string again.
        let origin = Origin::of(&ctx.call.arg, &ctx.call.access.sandbox)?;
        let access = ctx.db.lake_access(&ctx.call.access, origin.lake());
        let deleted = ctx.call.named_arg("deleted");
        let (raw, map) = (ctx.call.arg.as_str(), ctx.call.columns.as_ref());
        let s = refresh::refresh(ctx.conn, raw, &origin, (map, on_bad_rows), &access, deleted, tx)?;
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
            s.rebuilt_because.into(),
            s.quarantined.into(),
        ]])
    }
}
