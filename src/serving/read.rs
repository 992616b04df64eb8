//! The serving layer's readers: the dashboard's question asked of the layer — from `mart_daily`
//! (the dashboard), from `fct_orders` (the OLAP oracle), or of a rollup-shaped table — plus the
//! plan of the dashboard's statement, and a query's rows as Arrow batches for the code that folds
//! them in Rust (`batches`). Every statement names the layer's tables at the place its
//! `serving_meta` records (`meta::served_place`), so a same-named table elsewhere on the caller's
//! search path never answers.

use std::sync::Arc;

use duckdb::arrow::array::{Array, ArrayRef, Date32Array, Decimal128Array};
use duckdb::arrow::compute::cast;
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::Connection;

use crate::core::dashboard::{DashboardQuery, Relation};
use crate::core::error::{Error, Result};
use crate::serving::meta::{not_built, served_place, PlaceCache};

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

/// Where a call finds the layer: the caller's search_path, the places found for it so far, and
/// how many writes of ours had committed when the call began (`meta::PlaceCache`).
pub struct Lookup<'a> {
    pub search_path: &'a str,
    pub places: &'a PlaceCache,
    pub commits: u64,
}

/// The dashboard: one statement on the mart when the layer's place is known (`PlaceCache`),
/// `served_place` first otherwise.
pub fn dashboard(conn: &Connection, company: &str, query: &DashboardQuery, at: &Lookup) -> Result<DayRevenue> {
    const F: &str = "serving_dashboard";
    if let Some(place) = at.places.get(at.search_path, at.commits) {
        match per_company(conn, F, &query.sql_at(Relation::Mart, &place), company, query) {
            Ok(rows) => return Ok(rows),
            // The layer's tables moved under the cached place (a user's DDL): ask again.
            Err(_) => at.places.forget(at.search_path),
        }
    }
    let place = served_place(conn, F)?;
    let rows = per_company(conn, F, &query.sql_at(Relation::Mart, &place), company, query)?;
    at.places.remember(at.search_path, at.commits, place);
    Ok(rows)
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

/// Runs a query and returns its non-empty Arrow batches, strings as plain UTF-8.
pub fn batches(conn: &Connection, sql: &str, failed: impl Fn(duckdb::Error) -> Error) -> Result<Vec<RecordBatch>> {
    batches_with(conn, sql, [], failed)
}

/// `batches` with parameters, through the connection's statement cache (the same statements
/// recur every refresh; DuckDB re-binds them if the catalog changed in between).
pub fn batches_with<P: duckdb::Params>(
    conn: &Connection,
    sql: &str,
    params: P,
    failed: impl Fn(duckdb::Error) -> Error,
) -> Result<Vec<RecordBatch>> {
    let mut stmt = conn.prepare_cached(sql).map_err(&failed)?;
    let batches: Vec<RecordBatch> = stmt.query_arrow(params).map_err(&failed)?.collect();
    batches.into_iter().filter(|b| b.num_rows() > 0).map(plain_strings).collect()
}

fn plain_strings(batch: RecordBatch) -> Result<RecordBatch> {
    let failed = |e: duckdb::arrow::error::ArrowError| Error::internal("serving_refresh", e.to_string());
    let is_other_string = |c: &ArrayRef| matches!(c.data_type(), DataType::Utf8View | DataType::LargeUtf8);
    if !batch.columns().iter().any(is_other_string) {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .map(|c| if is_other_string(c) { cast(c, &DataType::Utf8) } else { Ok(c.clone()) })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(failed)?;
    let fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(failed)
}

/// Column `i` of `batch` as the Arrow array type `T` it must be.
pub fn column<T: 'static>(batch: &RecordBatch, i: usize) -> Result<&T> {
    batch.column(i).as_any().downcast_ref::<T>().ok_or_else(|| Error::Internal {
        function: "serving_refresh".into(),
        problem: format!("unexpected Arrow type {} for column {i}", batch.column(i).data_type()),
    })
}
