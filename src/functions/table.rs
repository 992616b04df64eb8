//! The one VTab adapter our table functions share. Each SQL function only says its name, its
//! optional VARCHAR parameter, its columns and how to compute its rows on the extension's
//! connection; bind (no side effects: it also runs under EXPLAIN/PREPARE), init (does the
//! work) and func (streams the rows out) are written once here.

use std::marker::PhantomData;

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};
use duckdb::Connection;

use super::rows::{self, Call, Cell, DayRevenueRows, Rows};
use crate::error::Result;
use crate::serving::DayRevenue;

/// A table function returning materialized rows.
pub trait RowsFunction {
    const NAME: &'static str;
    /// Name of the single VARCHAR parameter, if the function takes one.
    const PARAM: Option<&'static str>;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)];
    fn rows(conn: &Connection, arg: &str) -> Result<Vec<Vec<Cell>>>;
}

/// A per-company (order_day, revenue) function, emitted column-wise (the dashboard hot path).
pub trait CompanyFunction {
    const NAME: &'static str;
    fn query(conn: &Connection, company: &str) -> Result<DayRevenue>;
}

pub struct Table<F>(PhantomData<F>);
pub struct PerCompany<F>(PhantomData<F>);

fn varchar_param(param: Option<&'static str>) -> Option<Vec<LogicalTypeHandle>> {
    Some(param.map(|_| vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)]).unwrap_or_default())
}

impl<F: RowsFunction> VTab for Table<F> {
    type BindData = Call;
    type InitData = Rows;

    fn bind(bind: &BindInfo) -> std::result::Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, F::COLUMNS);
        Ok(rows::bind_call(bind, F::NAME, F::PARAM)?)
    }

    fn init(init: &InitInfo) -> std::result::Result<Rows, Box<dyn std::error::Error>> {
        Ok(Rows::new(rows::run(init, F::rows)?))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> std::result::Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        varchar_param(F::PARAM)
    }
}

impl<F: CompanyFunction> VTab for PerCompany<F> {
    type BindData = Call;
    type InitData = DayRevenueRows;

    fn bind(bind: &BindInfo) -> std::result::Result<Call, Box<dyn std::error::Error>> {
        rows::declare(bind, &rows::DAY_REVENUE);
        Ok(rows::bind_call(bind, F::NAME, Some("company"))?)
    }

    fn init(init: &InitInfo) -> std::result::Result<DayRevenueRows, Box<dyn std::error::Error>> {
        Ok(DayRevenueRows::new(rows::run(init, F::query)?))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> std::result::Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output);
        Ok(())
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        varchar_param(Some("company"))
    }
}
