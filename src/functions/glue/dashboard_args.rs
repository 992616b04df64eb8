//! The dashboard's named parameters (`top`, `from_day`, `to_day`, `grain`), shared by
//! serving_dashboard, serving_olap and serving_explain: declared once here, read and checked at
//! bind, so a bad value fails the statement before anything runs.

use duckdb::core::{LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, Value};

use super::rows;
#[cfg(duckdb14)]
use super::settings::ValueExt;
use super::value;
use crate::core::dashboard::{DashboardQuery, DayArg};
use crate::core::error::{Error, Result};

const NAMED: [(&str, LogicalTypeId); 4] = [
    ("top", LogicalTypeId::Integer),
    ("from_day", LogicalTypeId::Date),
    ("to_day", LogicalTypeId::Date),
    ("grain", LogicalTypeId::Varchar),
];

/// The named parameters as the VTab declares them.
pub fn declare() -> Vec<(String, LogicalTypeHandle)> {
    NAMED.iter().map(|(name, ty)| (name.to_string(), rows::type_handle(ty))).collect()
}

/// The value of a named parameter if it was given. NULL is refused: leaving a parameter out is
/// how its default is asked for, so a NULL is more likely a mistake than a request.
fn given(bind: &BindInfo, function: &'static str, parameter: &'static str) -> Result<Option<Value>> {
    match bind.get_named_parameter(parameter) {
        Some(v) if v.is_null() => Err(Error::NullArgument { function, parameter }),
        v => Ok(v),
    }
}

/// Reads and checks the dashboard parameters of `function` at bind.
pub fn bind(bind: &BindInfo, function: &'static str) -> Result<DashboardQuery> {
    let top = given(bind, function, "top")?.map(|v| value::int_arg(&v));
    let day = |parameter| -> Result<Option<DayArg>> {
        Ok(given(bind, function, parameter)?.map(|v| DayArg { days: value::date_arg(&v), text: v.to_string() }))
    };
    let (from_day, to_day) = (day("from_day")?, day("to_day")?);
    let grain = given(bind, function, "grain")?.map(|v| value::text_arg(&v, function, "grain")).transpose()?;
    DashboardQuery::parse(function, top, from_day, to_day, grain.as_deref())
}
