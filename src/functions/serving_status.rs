//! `serving_status()`: one row saying when and from what the serving layer was built and
//! refreshed, which lake snapshot it reflects, its sizes, and the last reconcile outcome.

use duckdb::core::{DataChunkHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::rows::{self, Call, Cell, Rows};
use crate::refresh;

pub struct ServingStatus;

impl VTab for ServingStatus {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> Result<Call, Box<dyn std::error::Error>> {
        rows::declare(
            bind,
            &[
                ("built_at", LogicalTypeId::Timestamp),
                ("source", LogicalTypeId::Varchar),
                ("refreshed_at", LogicalTypeId::Timestamp),
                ("refresh_source", LogicalTypeId::Varchar),
                ("refreshes", LogicalTypeId::Bigint),
                ("lake_snapshot", LogicalTypeId::Bigint),
                ("fct_rows", LogicalTypeId::Bigint),
                ("mart_rows", LogicalTypeId::Bigint),
                ("last_reconcile_at", LogicalTypeId::Timestamp),
                ("last_reconcile_clean", LogicalTypeId::Boolean),
                ("age_seconds", LogicalTypeId::Double),
            ],
        );
        Ok(rows::bind_call(bind, "serving_status", None)?)
    }

    fn init(init: &InitInfo) -> Result<Rows, Box<dyn std::error::Error>> {
        let s = rows::run(init, |conn, _| refresh::status(conn))?;
        let ts = |v: Option<i64>| v.map_or(Cell::Null, Cell::Timestamp);
        Ok(Rows::new(vec![vec![
            ts(s.built_at),
            s.source.into(),
            ts(s.refreshed_at),
            s.refresh_source.into(),
            s.refreshes.into(),
            s.lake_snapshot.into(),
            s.fct_rows.into(),
            s.mart_rows.into(),
            ts(s.last_reconcile_at),
            s.last_reconcile_clean.into(),
            s.age_seconds.into(),
        ]]))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }
}
