//! `serving_status()`: one row saying when and from what the serving layer was built and
//! refreshed, which lake snapshot it reflects, its sizes, and the last reconcile outcome.

use duckdb::core::LogicalTypeId;
use duckdb::Connection;

use super::rows::Cell;
use super::table::RowsFunction;
use crate::error::Result;
use crate::refresh;

pub struct ServingStatus;

impl RowsFunction for ServingStatus {
    const NAME: &'static str = "serving_status";
    const PARAM: Option<&'static str> = None;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
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
    ];

    fn rows(conn: &Connection, _: &str) -> Result<Vec<Vec<Cell>>> {
        let s = refresh::status(conn)?;
        let ts = |v: Option<i64>| v.map_or(Cell::Null, Cell::Timestamp);
        Ok(vec![vec![
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
        ]])
    }
}
