//! `serving_reconcile()`: the rows where mart_daily (with its group counts) and a fresh
//! aggregate of fct_orders differ, two-way EXCEPT ALL. Empty means the mart is exact.

use duckdb::core::LogicalTypeId;
use duckdb::Connection;

use super::rows::Cell;
use super::table::RowsFunction;
use crate::error::Result;
use crate::refresh;

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

    fn rows(conn: &Connection, _: &str) -> Result<Vec<Vec<Cell>>> {
        Ok(refresh::reconcile(conn)?
            .into_iter()
            .map(|d| {
                vec![d.side.into(), d.company.into(), d.order_day.map_or(Cell::Null, Cell::Date), d.revenue.into(), d.orders.into()]
            })
            .collect())
    }
}
