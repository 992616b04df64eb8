//! `serving_olap(company VARCHAR [, top, from_day, to_day, grain] [, fact := VARCHAR]
//! [, options := MAP])`: the dashboard's answer to the same question aggregated straight from
//! fct_orders, the reconciliation oracle for the mart; with `fact :=`, from that Paimon fact
//! table, aggregated while it streams (how a mart-only replica asks the oracle).

use duckdb::Connection;

use super::glue::rows::Ctx;
use super::glue::table::CompanyFunction;
use crate::core::dashboard::DashboardQuery;
use crate::core::error::Result;
use crate::core::source::Origin;
use crate::serving::read::DayRevenue;

pub struct ServingOlap;

impl CompanyFunction for ServingOlap {
    const NAME: &'static str = "serving_olap";
    const LAKE_FACT: bool = true;
    fn query(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
        crate::serving::olap(conn, company, query, None)
    }
    fn query_call(ctx: &Ctx) -> Result<DayRevenue> {
        let fact = ctx.call.named_arg("fact");
        let access = fact
            .map(|f| ctx.db.lake_access(&ctx.call.access, Origin::lake_path(f, &ctx.call.access.sandbox).as_deref()));
        crate::serving::olap(ctx.conn, &ctx.call.arg, &ctx.call.dashboard, fact.zip(access.as_ref()))
    }
}
