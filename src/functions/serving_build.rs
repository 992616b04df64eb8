//! `serving_build(source VARCHAR)`: (re)creates fct_orders + mart_daily in one transaction.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, Cell, Rows};
use crate::serving::{self, BuildSummary};

pub struct ServingBuild;

pub const SUMMARY: [(&str, LogicalTypeId); 8] = [
    ("fct_rows", LogicalTypeId::Bigint),
    ("mart_rows", LogicalTypeId::Bigint),
    ("companies", LogicalTypeId::Bigint),
    ("days", LogicalTypeId::Bigint),
    ("total_revenue", LogicalTypeId::Hugeint),
    ("source", LogicalTypeId::Varchar),
    ("lake_snapshot", LogicalTypeId::Bigint),
    ("elapsed_ms", LogicalTypeId::Double),
];

pub fn summary_row(s: BuildSummary) -> Vec<Cell> {
    vec![
        s.fct_rows.into(),
        s.mart_rows.into(),
        s.companies.into(),
        s.days.into(),
        s.total_revenue.into(),
        s.source.into(),
        s.lake_snapshot.into(),
        s.elapsed_ms.into(),
    ]
}

impl VTab for ServingBuild {
    type BindData = Call;
    type InitData = Rows;

    // Bind only declares the result: it also runs under EXPLAIN and PREPARE, which must not build.
    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, &SUMMARY);
        Ok(rows::bind_call(bind, "serving_build", Some("source"))?)
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let summary = rows::run(init, serving::build)?;
        Ok(Rows::new(vec![summary_row(summary)]))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }
}
