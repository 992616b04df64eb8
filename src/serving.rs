//! The serving layer's operations, run on the extension's own connection: build, dashboard,
//! OLAP oracle and plan. Each build is one transaction, so a failure leaves the previous
//! `fct_orders` / `mart_daily` exactly as they were.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use duckdb::types::ValueRef;
use duckdb::Connection;

use crate::error::{clean_duckdb_message, Error, Result};
use crate::schema::{self, SourceColumns, FACT, MART, META};
use crate::source::Source;

/// The one row serving_build returns.
#[derive(Debug, Clone, Default)]
pub struct BuildSummary {
    pub fct_rows: i64,
    pub mart_rows: i64,
    pub companies: i64,
    pub days: i64,
    pub total_revenue: Option<i128>,
    pub source: String,
    pub lake_snapshot: Option<i64>,
    pub elapsed_ms: f64,
}

/// One dashboard row: days since 1970-01-01 and the exact revenue.
pub type DayRevenue = (i32, i128);

/// Runs `f` inside BEGIN/COMMIT; any error rolls everything back.
pub fn in_transaction<R>(conn: &Connection, f: impl FnOnce() -> Result<R>) -> Result<R> {
    conn.execute_batch("BEGIN TRANSACTION").map_err(|e| Error::duckdb("streamhouse: BEGIN", &e))?;
    match f() {
        Ok(v) => match conn.execute_batch("COMMIT") {
            Ok(()) => Ok(v),
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(Error::duckdb("streamhouse: COMMIT failed, nothing was changed", &e))
            }
        },
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// `(name, type)` of every column of a relation, or SourceNotFound.
pub fn describe(conn: &Connection, raw: &str, relation: &str) -> Result<Vec<(String, String)>> {
    let not_found = |e: duckdb::Error| Error::SourceNotFound { source: raw.into(), detail: clean_duckdb_message(&e) };
    let mut stmt = conn.prepare(&format!("DESCRIBE SELECT * FROM {relation}")).map_err(not_found)?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(not_found)?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(not_found)
}

pub fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// The source resolved and checked against the contract, ready to SELECT from.
pub struct ResolvedSource {
    pub raw: String,
    pub relation: String,
    pub columns: SourceColumns,
}

pub fn resolve(conn: &Connection, raw: &str, allow_deleted: bool) -> Result<ResolvedSource> {
    let source = Source::parse(raw)?;
    if source.is_serving_table() {
        return Err(Error::BadSource {
            source: raw.into(),
            reason: "it is one of the serving tables that this call replaces".into(),
        });
    }
    let relation = source.relation_sql();
    let described = describe(conn, raw, &relation)?;
    let columns = schema::match_columns(raw, &described, allow_deleted)?;
    Ok(ResolvedSource { raw: raw.into(), relation, columns })
}

fn first_row_strings(conn: &Connection, sql: &str) -> Option<(String, String)> {
    conn.query_row(sql, [], |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, Option<String>>(1)?)))
        .ok()
        .map(|(a, b)| (a.unwrap_or_else(|| "NULL".into()), b.unwrap_or_else(|| "NULL".into())))
}

/// Executes a statement that reads the source. A failed checked cast aborts the transaction,
/// so the row that caused it is looked up later by `explain_load_failure`.
pub fn load_checked(conn: &Connection, src: &ResolvedSource, sql: &str) -> Result<()> {
    conn.execute_batch(sql).map_err(|e| Error::LoadFailed {
        source: src.raw.clone(),
        message: clean_duckdb_message(&e),
        probes: src.columns.diagnose_sql(&src.relation),
    })
}

/// Turns a `LoadFailed` into a message naming the offending row and value. Run after ROLLBACK.
pub fn explain_load_failure(conn: &Connection, err: Error) -> Error {
    if let Error::LoadFailed { source, probes, .. } = &err {
        for (probe, problem) in probes {
            if let Some((id, value)) = first_row_strings(conn, probe) {
                return Error::BadRow { source: source.clone(), problem: format!("value '{value}' (order_id {id}): {problem}") };
            }
        }
    }
    err
}

/// Rejects NULL serving keys and duplicated orders in `table` (which has the fct_orders shape).
pub fn check_rows(conn: &Connection, raw: &str, table: &str) -> Result<()> {
    let bad = |problem: String| Error::BadRow { source: raw.into(), problem };
    let (n_id, n_company, n_day, n_rev, example): (i64, i64, i64, i64, Option<String>) = conn
        .query_row(&schema::null_check_sql(table), [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .map_err(|e| Error::duckdb("serving: checking for NULLs", &e))?;
    if n_id > 0 {
        return Err(bad(format!("order_id is NULL in {n_id} row(s); every order needs its key")));
    }
    let example = example.unwrap_or_default();
    for (n, column) in [(n_company, "company"), (n_day, "order_day"), (n_rev, "revenue")] {
        if n > 0 {
            return Err(bad(format!("{column} is NULL in {n} row(s), e.g. order_id {example}")));
        }
    }
    let dup: Option<(i64, i64)> = conn
        .query_row(&schema::duplicate_check_sql(table), [], |r| Ok((r.get(0)?, r.get(1)?)))
        .map(Some)
        .or_else(|e| match e {
            duckdb::Error::QueryReturnedNoRows => Ok(None),
            e => Err(Error::duckdb("serving: checking for duplicate orders", &e)),
        })?;
    if let Some((id, n)) = dup {
        return Err(bad(format!(
            "duplicate order_id {id} ({n} rows); the source must be the merged state with one row per \
             order (streamhouse never re-merges a changelog)"
        )));
    }
    Ok(())
}

pub const META_DDL: &str = "CREATE TABLE IF NOT EXISTS serving_meta (\
    built_at TIMESTAMP, refreshed_at TIMESTAMP, source VARCHAR, lake_snapshot BIGINT, \
    refreshes BIGINT, last_reconcile_at TIMESTAMP, last_reconcile_clean BOOLEAN)";

/// Counts and totals of the current serving tables.
pub fn summarize(conn: &Connection, source: &str, lake_snapshot: Option<i64>, started: Instant) -> Result<BuildSummary> {
    let sql = format!(
        "SELECT (SELECT count(*) FROM {FACT}), count(*), count(DISTINCT company), count(DISTINCT order_day), \
         sum(revenue) FROM {MART}"
    );
    conn.query_row(&sql, [], |r| {
        Ok(BuildSummary {
            fct_rows: r.get(0)?,
            mart_rows: r.get(1)?,
            companies: r.get(2)?,
            days: r.get(3)?,
            total_revenue: match r.get_ref(4)? {
                ValueRef::HugeInt(v) => Some(v),
                _ => None,
            },
            source: source.into(),
            lake_snapshot,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    })
    .map_err(|e| Error::duckdb("serving: summarizing", &e))
}

/// Replaces the serving tables from `relation` (already resolved); the caller owns the transaction.
pub fn build_from(conn: &Connection, src: &ResolvedSource, lake_snapshot: Option<i64>) -> Result<()> {
    let ctas = format!("CREATE OR REPLACE TABLE {FACT} AS SELECT {} FROM {}", src.columns.fact_select_list(), src.relation);
    load_checked(conn, src, &ctas)?;
    check_rows(conn, &src.raw, FACT)?;
    conn.execute_batch(&schema::mart_ctas()).map_err(|e| Error::duckdb("serving: building mart_daily", &e))?;
    conn.execute_batch(&format!("{META_DDL}; DELETE FROM {META}"))
        .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
    conn.execute(
        &format!("INSERT INTO {META} VALUES (make_timestamp(?), NULL, ?, ?, 0, NULL, NULL)"),
        duckdb::params![now_micros(), src.raw, lake_snapshot],
    )
    .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
    Ok(())
}

pub fn build(conn: &Connection, raw: &str) -> Result<BuildSummary> {
    let started = Instant::now();
    in_transaction(conn, || {
        let src = resolve(conn, raw, false)?;
        build_from(conn, &src, None)?;
        summarize(conn, raw, None, started)
    })
    .map_err(|e| explain_load_failure(conn, e))
}

fn not_built(function: &'static str, e: duckdb::Error) -> Error {
    let msg = clean_duckdb_message(&e);
    if msg.contains("Catalog Error") && (msg.contains(MART) || msg.contains(FACT)) {
        Error::NotBuilt { function }
    } else {
        Error::DuckDb { context: function.into(), message: msg }
    }
}

/// Runs one of the per-company queries through a cached prepared statement.
fn per_company(conn: &Connection, function: &'static str, sql: &str, company: &str) -> Result<Vec<DayRevenue>> {
    let mut stmt = conn.prepare_cached(sql).map_err(|e| not_built(function, e))?;
    let mut rows = stmt.query([company]).map_err(|e| not_built(function, e))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().map_err(|e| not_built(function, e))? {
        let day = match r.get_ref(0) {
            Ok(ValueRef::Date32(d)) => d,
            _ => return Err(Error::DuckDb { context: function.into(), message: "order_day is not a DATE".into() }),
        };
        let rev = match r.get_ref(1) {
            Ok(ValueRef::HugeInt(v)) => v,
            Ok(ValueRef::BigInt(v)) => v as i128,
            _ => return Err(Error::DuckDb { context: function.into(), message: "revenue is not an integer".into() }),
        };
        out.push((day, rev));
    }
    Ok(out)
}

pub fn dashboard(conn: &Connection, company: &str) -> Result<Vec<DayRevenue>> {
    per_company(conn, "serving_dashboard", &schema::dashboard_sql(), company)
}

pub fn olap(conn: &Connection, company: &str) -> Result<Vec<DayRevenue>> {
    per_company(conn, "serving_olap", &schema::olap_sql(), company)
}

/// The physical plan of exactly the dashboard statement, with `company` bound.
pub fn explain(conn: &Connection, company: &str) -> Result<Vec<(String, String)>> {
    let sql = format!("EXPLAIN {}", schema::dashboard_sql());
    let mut stmt = conn.prepare(&sql).map_err(|e| not_built("serving_explain", e))?;
    let rows = stmt
        .query_map([company], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(|e| not_built("serving_explain", e))?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| not_built("serving_explain", e))
}
