//! The serving layer's readers: where the layer the caller sees lives (`served_place`), and the
//! dashboard's question asked of it — from `mart_daily` (the dashboard), from `fct_orders` (the
//! OLAP oracle), or of a rollup-shaped table — plus the plan of the dashboard's statement. Every
//! statement names the layer's tables at the place its `serving_meta` records, so a same-named
//! table elsewhere on the caller's search path never answers.

use duckdb::arrow::array::{Date32Array, Decimal128Array};
use duckdb::Connection;

use crate::core::dashboard::{DashboardQuery, Relation};
use crate::core::error::{Error, Result};
use crate::core::schema::{Place, META};
use crate::serving::layer::{current_place, not_built};

/// Per-company answer in columnar form: days since 1970-01-01 and exact revenues.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DayRevenue {
    pub days: Vec<i32>,
    pub revenue: Vec<i128>,
}

/// Runs one of the per-company queries through a cached prepared statement (one per query
/// shape: the values are bound, never spliced). Results are taken as whole Arrow columns, never
/// row by row: this path is what the dashboard latency is made of.
fn per_company(
    conn: &Connection,
    function: &'static str,
    sql: &str,
    company: &str,
    query: &DashboardQuery,
) -> Result<DayRevenue> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| not_built(function, e))?;
    let mut out = DayRevenue::default();
    let unexpected = |what: &str| Error::internal(function, format!("unexpected result type for {what}"));
    let params = duckdb::params_from_iter(query.parameters(company));
    for batch in stmt.query_arrow(params).map_err(|e| not_built(function, e))? {
        let days = batch.column(0).as_any().downcast_ref::<Date32Array>().ok_or_else(|| unexpected("order_day"))?;
        let revenue =
            batch.column(1).as_any().downcast_ref::<Decimal128Array>().ok_or_else(|| unexpected("revenue"))?;
        out.days.extend_from_slice(days.values());
        out.revenue.extend_from_slice(revenue.values());
    }
    Ok(out)
}

/// Where the layer the caller sees lives: the place its `serving_meta` (found on the caller's
/// search path) records. Every reader names the layer's tables there, so a same-named table
/// elsewhere on the search path (a dbt model, `USE other`) never answers for it.
pub fn served_place(conn: &Connection, function: &'static str) -> Result<Place> {
    let recorded: (Option<String>, Option<String>) = conn
        .prepare_cached(&format!("SELECT serving_catalog, serving_schema FROM {META}"))
        .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
        .map_err(|e| not_built(function, e))?;
    match recorded {
        (Some(catalog), Some(schema)) => Ok(Place { catalog, schema }),
        _ => current_place(conn),
    }
}

pub fn dashboard(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
    let place = served_place(conn, "serving_dashboard")?;
    per_company(conn, "serving_dashboard", &query.sql_at(Relation::Mart, &place), company, query)
}

pub fn olap(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<DayRevenue> {
    let place = served_place(conn, "serving_olap")?;
    per_company(conn, "serving_olap", &query.sql_at(Relation::Fact, &place), company, query)
}

/// The dashboard's question asked of `relation` (a table of the rollup's shape).
pub fn per_company_of(
    conn: &Connection,
    function: &'static str,
    relation: Relation,
    company: &str,
    query: &DashboardQuery,
) -> Result<DayRevenue> {
    per_company(conn, function, &query.sql(relation), company, query)
}

/// The physical plan of exactly the dashboard statement of `query`'s shape, with its values bound.
pub fn explain(conn: &Connection, company: &str, query: &DashboardQuery) -> Result<Vec<(String, String)>> {
    let sql = format!("EXPLAIN {}", query.sql_at(Relation::Mart, &served_place(conn, "serving_explain")?));
    let mut stmt = conn.prepare(&sql).map_err(|e| not_built("serving_explain", e))?;
    let rows = stmt
        .query_map(duckdb::params_from_iter(query.parameters(company)), |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(|e| not_built("serving_explain", e))?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| not_built("serving_explain", e))
}
