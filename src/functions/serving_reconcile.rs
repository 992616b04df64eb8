//! `serving_reconcile()`: the rows where mart_daily (with its group counts) and a fresh
//! aggregate of fct_orders differ, two-way EXCEPT ALL. Empty means the mart is exact.

use duckdb::core::{DataChunkHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, Cell, Rows};
use crate::refresh;

pub struct ServingReconcile;

impl VTab for ServingReconcile {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(
            bind,
            &[
                ("side", LogicalTypeId::Varchar),
                ("company", LogicalTypeId::Varchar),
                ("order_day", LogicalTypeId::Date),
                ("revenue", LogicalTypeId::Hugeint),
                ("orders", LogicalTypeId::Bigint),
            ],
        );
        Ok(rows::bind_call(bind, "serving_reconcile", None)?)
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let diffs = rows::run(init, |conn, _| refresh::reconcile(conn))?;
        Ok(Rows::new(
            diffs
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
                .collect(),
        ))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }
}
