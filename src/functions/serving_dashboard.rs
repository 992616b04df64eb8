//! `serving_dashboard(company VARCHAR [, top := INTEGER] [, from_day := DATE] [, to_day := DATE]
//! [, grain := VARCHAR])`: (order_day, revenue) for one company, revenue DESC then period, the
//! window and grain applied and the top N kept by the statement itself. Reads only mart_daily,
//! through a prepared statement cached per query shape, with the company and dates bound.

use duckdb::Connection;

use super::glue::table::CompanyFunction;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::Result;
use crate::serving::read::{self, DayRevenue};

pub struct ServingDashboard;

impl CompanyFunction for ServingDashboard {
    const NAME: &'static str = "serving_dashboard";
    fn query(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
        read::dashboard(conn, company, query)
    }
}
