//! `serving_olap(company VARCHAR [, top, from_day, to_day, grain])`: the dashboard's answer to
//! the same question aggregated straight from fct_orders, the reconciliation oracle for the mart.

use duckdb::Connection;

use super::glue::table::CompanyFunction;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::Result;
use crate::serving::layer::DayRevenue;

pub struct ServingOlap;

impl CompanyFunction for ServingOlap {
    const NAME: &'static str = "serving_olap";
    fn query(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
        crate::serving::olap(conn, company, query)
    }
}
