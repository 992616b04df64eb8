//! `serving_olap(company VARCHAR [, top, from_day, to_day, grain])`: the dashboard's answer to
//! the same question aggregated straight from fct_orders, the reconciliation oracle for the mart.

use duckdb::Connection;

use super::table::CompanyFunction;
use crate::dashboard::DashboardQuery;
use crate::error::Result;
use crate::serving::{self, DayRevenue};

pub struct ServingOlap;

impl CompanyFunction for ServingOlap {
    const NAME: &'static str = "serving_olap";
    fn query(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
        serving::olap(conn, company, query)
    }
}
