//! `serving_explain(company VARCHAR)`: EXPLAIN of exactly the statement serving_dashboard runs.
//! A table function is an opaque node in an outer EXPLAIN, so this is how its plan is shown.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Cell, Rows};
use crate::serving;

pub struct ServingExplain;

pub struct Bind {
    company: String,
}

impl VTab for ServingExplain {
    type BindData = Bind;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        rows::declare(bind, &[("explain_key", LogicalTypeId::Varchar), ("explain_value", LogicalTypeId::Varchar)]);
        Ok(Bind { company: rows::text_param(bind, "serving_explain", "company")? })
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let company = &rows::bind_data::<Bind>(init).company;
        let plan = rows::session(init).with(|conn| serving::explain(conn, company))?;
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
