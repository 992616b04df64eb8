//! `serving_dashboard(company VARCHAR [, top := INTEGER] [, from_day := DATE] [, to_day := DATE]
//! [, grain := VARCHAR])`: (order_day, revenue) for one company, revenue DESC then period, the
//! window and grain applied and the top N kept by the statement itself. Reads only mart_daily,
//! through a prepared statement cached per query shape, with the company and dates bound.

use duckdb::Connection;

use super::glue::rows::Ctx;
use super::glue::table::CompanyFunction;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::{Error, Result};
use crate::serving::read::{self, DayRevenue};

pub struct ServingDashboard;

impl CompanyFunction for ServingDashboard {
    const NAME: &'static str = "serving_dashboard";
    fn query(_: &Connection, _: &str, _: &DashboardQuery) -> Result<DayRevenue> {
        Err(Error::internal(Self::NAME, "is answered by query_call"))
    }

    /// The hot path: where the layer lives comes from the database's place cache while no write
    /// of ours has committed since it was found.
    fn query_call(ctx: &Ctx) -> Result<DayRevenue> {
        let at = read::Lookup {
            search_path: &ctx.call.search_path,
            places: &ctx.db.places,
            commits: ctx.db.session.commits(),
        };
        read::dashboard(ctx.conn, &ctx.call.arg, &ctx.call.dashboard, &at)
    }
}
