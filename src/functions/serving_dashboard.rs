//! `serving_dashboard(company VARCHAR)`: (order_day, revenue) for one company, revenue DESC then
//! day. Reads only mart_daily, through a cached prepared statement with the company bound.

use duckdb::Connection;

use super::table::CompanyFunction;
use crate::error::Result;
use crate::serving::{self, DayRevenue};

pub struct ServingDashboard;

impl CompanyFunction for ServingDashboard {
    const NAME: &'static str = "serving_dashboard";
    fn query(conn: &Connection, company: &str) -> Result<DayRevenue> {
        serving::dashboard(conn, company)
    }
}
