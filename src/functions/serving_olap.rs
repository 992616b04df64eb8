//! `serving_olap(company VARCHAR)`: (order_day, revenue) for one company, revenue DESC then day.
//! Aggregates fct_orders directly: the reconciliation oracle for the dashboard.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, DayRevenueRows};
use crate::serving;

pub struct ServingOlap;

impl VTab for ServingOlap {
    type BindData = Call;
    type InitData = DayRevenueRows;

    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, &rows::DAY_REVENUE);
        Ok(rows::bind_call(bind, "serving_olap", Some("company"))?)
    }

    fn init(init: &InitInfo) -> Result<DayRevenueRows, Box<dyn std::error::Error>> {
        let result = rows::run(init, serving::olap)?;
        Ok(DayRevenueRows::new(result))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}
