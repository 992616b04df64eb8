//! `serving_reconcile([fact := VARCHAR] [, options := MAP])`: the rows where mart_daily (with its
//! group counts) and a fresh aggregate of fct_orders differ, two-way EXCEPT ALL. Empty means the
//! mart is exact. With `fact :=` (a Paimon fact table) the aggregate is of that table's merged
//! state, streamed: how a mart-only replica, which holds no fct_orders, checks itself.

use duckdb::core::LogicalTypeId;

use super::glue::lake_batches::TableArg;
use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::serving::meta::now_micros;
use crate::serving::reconcile::{self, Reconciled};

pub struct ServingReconcile;

impl RowsFunction for ServingReconcile {
    const NAME: &'static str = "serving_reconcile";
    const PARAM: Option<&'static str> = None;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("side", LogicalTypeId::Varchar),
        ("company", LogicalTypeId::Varchar),
        ("order_day", LogicalTypeId::Date),
        ("revenue", LogicalTypeId::Hugeint),
        ("orders", LogicalTypeId::Bigint),
    ];
    const ROLE: Role = Role::Reader;
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[("fact", LogicalTypeId::Varchar)];
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("fact", TableArg::Fact)];
    const LAKE_NAMED: &'static [&'static str] = &["fact"];

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let fact = ctx.call.named_arg("fact");
        let access = fact
            .map(|f| ctx.db.lake_access(&ctx.call.access, Origin::lake_path(f, &ctx.call.access.sandbox).as_deref()));
        let (diffs, generation) = reconcile::reconcile(ctx.conn, fact.zip(access.as_ref()))?;
        let outcome = Reconciled { at: now_micros(), clean: diffs.is_empty(), generation };
        *ctx.db.reconciled() = Some(outcome);
        // Stored in serving_meta when no writer is running; otherwise status shows it from
        // memory (a reader never waits for a build).
        if let Some(stored) =
            ctx.db.session.try_writer(&ctx.call.search_path, |c| reconcile::record_reconcile(c, outcome))
        {
            stored?;
        }
        Ok(diffs
            .into_iter()
            .map(|d| {
                vec![
                    d.side.into(),
                    d.company.into(),
                    d.order_day.map_or(Cell::Null, Cell::Date),
                    d.revenue.into(),
                    d.orders.into(),
                ]
            })
            .collect())
    }
}
