//! `serving_olap(company VARCHAR)`: (order_day, revenue) for one company, revenue DESC then day.
//! Aggregates fct_orders directly: the reconciliation oracle for the dashboard.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, DayRevenueRows};
use crate::serving;

pub struct ServingOlap;

pub struct Bind {
    company: String,
}

impl VTab for ServingOlap {
    type BindData = Bind;
    type InitData = DayRevenueRows;

    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        rows::declare(bind, &rows::DAY_REVENUE);
        Ok(Bind { company: rows::text_param(bind, "serving_olap", "company")? })
    }

    fn init(init: &InitInfo) -> Result<DayRevenueRows, Box<dyn std::error::Error>> {
        let company = &rows::bind_data::<Bind>(init).company;
        let result = rows::session(init).with(|conn| serving::olap(conn, company))?;
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
