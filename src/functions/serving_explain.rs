//! `serving_explain(company VARCHAR)`: EXPLAIN of exactly the statement serving_dashboard runs.
//! A table function is an opaque node in an outer EXPLAIN, so this is how its plan is shown.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, Cell, Rows};
use crate::serving;

pub struct ServingExplain;

impl VTab for ServingExplain {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, &[("explain_key", LogicalTypeId::Varchar), ("explain_value", LogicalTypeId::Varchar)]);
        Ok(rows::bind_call(bind, "serving_explain", Some("company"))?)
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let plan = rows::run(init, serving::explain)?;
        Ok(Rows::new(plan.into_iter().map(|(k, v)| vec![Cell::Text(k), Cell::Text(v)]).collect()))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}
