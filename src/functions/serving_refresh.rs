//! `serving_refresh(changes VARCHAR)`: applies the latest merged rows of changed orders (plus an
//! optional boolean `deleted`) to fct_orders and moves mart_daily by the delta, atomically.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, Cell, Rows};
use crate::refresh::{self, RefreshSummary};

pub struct ServingRefresh;

pub const SUMMARY: [(&str, LogicalTypeId); 10] = [
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

pub fn summary_row(s: RefreshSummary) -> Vec<Cell> {
    vec![
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
    ]
}

impl VTab for ServingRefresh {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, &SUMMARY);
        Ok(rows::bind_call(bind, "serving_refresh", Some("changes"))?)
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let summary = rows::run(init, refresh::refresh)?;
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
