//! `serving_olap(company VARCHAR)`: the dashboard's answer aggregated straight from fct_orders,
//! the reconciliation oracle for the mart.

use duckdb::Connection;

use super::table::CompanyFunction;
use crate::error::Result;
use crate::serving::{self, DayRevenue};

pub struct ServingOlap;

impl CompanyFunction for ServingOlap {
    const NAME: &'static str = "serving_olap";
    fn query(conn: &Connection, company: &str) -> Result<DayRevenue> {
        serving::olap(conn, company)
    }
}
