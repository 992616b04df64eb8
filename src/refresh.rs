//! Incremental refresh, reconciliation and status of the serving layer.
//!
//! A refresh replaces (or removes) the changed orders in `fct_orders` and moves `mart_daily` by
//! the delta: the old revenue is retracted from the old (company, order_day), the new one added
//! to the new group, groups whose order count reaches zero disappear and new groups appear.
//! Counts live in `serving_mart_counts` because a SUM alone cannot tell "empty" from "sums to 0".
//! Everything happens in one transaction: a bad change set changes nothing.

use std::time::Instant;

use duckdb::Connection;

use crate::error::{Error, Result};
use crate::schema::{Probe, COUNTS, FACT, MART, META};
use crate::serving::{self, check_duplicates, in_transaction, load_checked, not_built, now_micros, ResolvedSource};

#[derive(Debug, Clone, Default)]
pub struct RefreshSummary {
    pub inserted: i64,
    pub updated: i64,
    pub deleted: i64,
    /// Deletions of orders that were not in fct_orders: nothing to retract.
    pub ignored_deletes: i64,
    pub mart_rows_touched: i64,
    pub fct_rows: i64,
    pub mart_rows: i64,
    pub source: String,
    pub lake_snapshot: Option<i64>,
    pub elapsed_ms: f64,
}

const CHANGES: &str = "__sh_changes";
const OLD: &str = "__sh_old";
const DELTA: &str = "__sh_delta";

fn exec(conn: &Connection, what: &str, sql: &str) -> Result<()> {
    conn.execute_batch(sql).map_err(|e| Error::duckdb(format!("serving_refresh: {what}"), &e))
}

/// Fails with NotBuilt unless a build has created the serving tables.
pub fn require_built(conn: &Connection, function: &'static str) -> Result<()> {
    conn.query_row(&format!("SELECT count(*) FROM {META}, {COUNTS} LIMIT 1"), [], |r| r.get::<_, i64>(0))
        .map(|_| ())
        .map_err(|e| not_built(function, e))
}

/// Stages the change set as a temp table (order_id NOT NULL, `deleted` defaulting to false),
/// then checks that live rows carry every serving column and that no order appears twice.
fn stage(conn: &Connection, src: &ResolvedSource) -> Result<()> {
    let deleted = src.columns.deleted.as_deref().map_or("false".to_string(), |d| {
        format!("COALESCE({}, false)", crate::quote::ident(d))
    });
    let sql = format!(
        "CREATE OR REPLACE TEMP TABLE {CHANGES} (order_id BIGINT NOT NULL, company VARCHAR, order_day DATE, \
         revenue BIGINT, deleted BOOLEAN NOT NULL); INSERT INTO {CHANGES} SELECT {}, {deleted} FROM {}",
        src.columns.fact_select_list(),
        src.relation
    );
    load_checked(conn, src, &sql)?;
    let (first, company, day, revenue): (Option<i64>, i64, i64, i64) = conn
        .query_row(
            &format!(
                "SELECT min(order_id) FILTER (WHERE company IS NULL OR order_day IS NULL OR revenue IS NULL), \
                 count(*) FILTER (WHERE company IS NULL), count(*) FILTER (WHERE order_day IS NULL), \
                 count(*) FILTER (WHERE revenue IS NULL) FROM {CHANGES} WHERE NOT deleted"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .map_err(|e| Error::duckdb("serving_refresh: checking the change set", &e))?;
    if let Some(id) = first {
        let (col, n) = [("company", company), ("order_day", day), ("revenue", revenue)]
            .into_iter()
            .find(|(_, n)| *n > 0)
            .unwrap_or(("company", 0));
        return Err(Error::BadRow {
            source: src.raw.clone(),
            problem: format!("{} (a changed order that is not deleted needs every column)", Probe::Null(col).message(&id.to_string(), &n.to_string())),
        });
    }
    check_duplicates(conn, &src.raw, CHANGES)
}

/// Removes the changed orders from the fact, keeping their old versions in a temp table.
/// DELETE ... RETURNING scans the fact once; the returned rows go back in through the appender.
fn take_old_versions(conn: &Connection) -> Result<()> {
    exec(conn, "staging old versions", &format!("{}; ", crate::schema::fact_ddl(OLD, true)))?;
    let failed = |e: duckdb::Error| Error::duckdb("serving_refresh: removing changed orders", &e);
    let mut stmt = conn
        .prepare(&format!(
            "DELETE FROM {FACT} WHERE order_id IN (SELECT order_id FROM {CHANGES}) \
             RETURNING order_id, company, order_day, revenue"
        ))
        .map_err(failed)?;
    let batches: Vec<_> = stmt.query_arrow([]).map_err(failed)?.collect();
    let mut appender = conn.appender(OLD).map_err(failed)?;
    for batch in batches.into_iter().filter(|b| b.num_rows() > 0) {
        appender.append_record_batch(batch).map_err(failed)?;
    }
    appender.flush().map_err(failed)
}

fn apply(conn: &Connection, src: &ResolvedSource, lake_snapshot: Option<i64>, started: Instant) -> Result<RefreshSummary> {
    require_built(conn, "serving_refresh")?;
    stage(conn, src)?;
    take_old_versions(conn)?;
    let (inserted, updated, deleted, ignored): (i64, i64, i64, i64) = conn
        .query_row(
            &format!(
                "SELECT count(*) FILTER (WHERE NOT c.deleted AND o.order_id IS NULL), \
                        count(*) FILTER (WHERE NOT c.deleted AND o.order_id IS NOT NULL), \
                        count(*) FILTER (WHERE c.deleted AND o.order_id IS NOT NULL), \
                        count(*) FILTER (WHERE c.deleted AND o.order_id IS NULL) \
                 FROM {CHANGES} c LEFT JOIN {OLD} o USING (order_id)"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .map_err(|e| Error::duckdb("serving_refresh: counting changes", &e))?;
    // The delta per group carries the group's order count after the change (from the counts
    // before it). The mart and its counts are small (company x day), so they are rewritten from
    // "old rows of untouched groups + new values of touched groups": cheaper than DuckDB's
    // row-by-row MERGE, and it keeps the mart sorted by company for pruning.
    let next = |table: &str, value: &str, new_value: &str| {
        format!(
            "CREATE OR REPLACE TEMP TABLE __sh_next AS
               SELECT company, order_day, {value} FROM {table} t ANTI JOIN {DELTA} d USING (company, order_day)
               UNION ALL
               SELECT d.company, d.order_day, {new_value} FROM {DELTA} d LEFT JOIN {table} t USING (company, order_day)
               WHERE d.new_orders <> 0;
             CREATE OR REPLACE TABLE {table} AS SELECT * FROM __sh_next ORDER BY company, order_day;"
        )
    };
    exec(
        conn,
        "applying changes",
        &format!(
            "INSERT INTO {FACT} SELECT order_id, company, order_day, revenue FROM {CHANGES} WHERE NOT deleted;
             CREATE OR REPLACE TEMP TABLE {DELTA} AS
               SELECT d.*, coalesce(c.orders, 0) + d.dcnt AS new_orders FROM (
                 SELECT company, order_day, CAST(SUM(rev) AS HUGEINT) AS drev, SUM(cnt) AS dcnt FROM (
                   SELECT company, order_day, -CAST(revenue AS HUGEINT) AS rev, -1 AS cnt FROM {OLD}
                   UNION ALL
                   SELECT company, order_day, revenue, 1 FROM {CHANGES} WHERE NOT deleted)
                 GROUP BY company, order_day HAVING SUM(rev) <> 0 OR SUM(cnt) <> 0) d
               LEFT JOIN {COUNTS} c USING (company, order_day);
             {}
             {}
             DROP TABLE __sh_next;",
            next(MART, "revenue", "CAST(coalesce(t.revenue, 0) + d.drev AS HUGEINT) AS revenue"),
            next(COUNTS, "orders", "d.new_orders AS orders"),
        ),
    )?;
    let (touched, broken): (i64, i64) = conn
        .query_row(&format!("SELECT count(*), count(*) FILTER (WHERE new_orders < 0) FROM {DELTA}"), [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map_err(|e| Error::duckdb("serving_refresh: counting mart changes", &e))?;
    if broken > 0 {
        return Err(Error::DuckDb {
            context: "serving_refresh".into(),
            message: format!(
                "{broken} mart group(s) would have a negative order count: fct_orders or {COUNTS} was changed \
                 outside streamhouse; run serving_build to rebuild"
            ),
        });
    }
    conn.execute(
        &format!(
            "UPDATE {META} SET refreshed_at = make_timestamp(?), refresh_source = ?, refreshes = refreshes + 1, \
             lake_snapshot = coalesce(?, lake_snapshot)"
        ),
        duckdb::params![now_micros(), src.raw, lake_snapshot],
    )
    .map_err(|e| Error::duckdb("serving_refresh: writing serving_meta", &e))?;
    let (fct_rows, mart_rows): (i64, i64) = conn
        .query_row(&format!("SELECT (SELECT count(*) FROM {FACT}), (SELECT count(*) FROM {MART})"), [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .map_err(|e| Error::duckdb("serving_refresh: counting", &e))?;
    exec(conn, "cleaning up", &format!("DROP TABLE {CHANGES}; DROP TABLE {OLD}; DROP TABLE {DELTA};"))?;
    Ok(RefreshSummary {
        inserted,
        updated,
        deleted,
        ignored_deletes: ignored,
        mart_rows_touched: touched,
        fct_rows,
        mart_rows,
        source: src.raw.clone(),
        lake_snapshot,
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

pub fn refresh(conn: &Connection, raw: &str) -> Result<RefreshSummary> {
    let started = Instant::now();
    let src = serving::resolve(conn, raw, true)?;
    in_transaction(conn, || apply(conn, &src, src.lake_snapshot, started))
    .map_err(|e| serving::explain_load_failure(conn, e))
}

/// One differing row of a reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub side: String,
    pub company: Option<String>,
    /// Days since 1970-01-01.
    pub order_day: Option<i32>,
    pub revenue: Option<i128>,
    pub orders: Option<i64>,
}

/// Whole-mart check against the fact; records the outcome in serving_meta.
pub fn reconcile(conn: &Connection) -> Result<Vec<Difference>> {
    use duckdb::types::ValueRef;
    require_built(conn, "serving_reconcile")?;
    in_transaction(conn, || {
        let failed = |e: duckdb::Error| Error::duckdb("serving_reconcile", &e);
        let mut stmt = conn.prepare(&crate::schema::reconcile_sql()).map_err(failed)?;
        let diffs = stmt
            .query_map([], |r| {
                Ok(Difference {
                    side: r.get(0)?,
                    company: r.get(1)?,
                    order_day: match r.get_ref(2)? {
                        ValueRef::Date32(d) => Some(d),
                        _ => None,
                    },
                    revenue: match r.get_ref(3)? {
                        ValueRef::HugeInt(v) => Some(v),
                        _ => None,
                    },
                    orders: r.get(4)?,
                })
            })
            .map_err(failed)?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(failed)?;
        conn.execute(
            &format!("UPDATE {META} SET last_reconcile_at = make_timestamp(?), last_reconcile_clean = ?"),
            duckdb::params![now_micros(), diffs.is_empty()],
        )
        .map_err(failed)?;
        Ok(diffs)
    })
}

#[derive(Debug, Clone, Default)]
pub struct Status {
    pub built_at: Option<i64>,
    pub source: Option<String>,
    pub refreshed_at: Option<i64>,
    pub refresh_source: Option<String>,
    pub refreshes: i64,
    pub lake_snapshot: Option<i64>,
    pub fct_rows: i64,
    pub mart_rows: i64,
    pub last_reconcile_at: Option<i64>,
    pub last_reconcile_clean: Option<bool>,
    /// Seconds since the serving tables last changed (build or refresh).
    pub age_seconds: f64,
}

pub fn status(conn: &Connection) -> Result<Status> {
    require_built(conn, "serving_status")?;
    let epoch_us = |col: &str| format!("epoch_us({col})");
    let sql = format!(
        "SELECT {}, source, {}, refresh_source, refreshes, lake_snapshot, \
         (SELECT count(*) FROM {FACT}), (SELECT count(*) FROM {MART}), {}, last_reconcile_clean FROM {META}",
        epoch_us("built_at"),
        epoch_us("refreshed_at"),
        epoch_us("last_reconcile_at"),
    );
    let mut s = conn
        .query_row(&sql, [], |r| {
            Ok(Status {
                built_at: r.get(0)?,
                source: r.get(1)?,
                refreshed_at: r.get(2)?,
                refresh_source: r.get(3)?,
                refreshes: r.get(4)?,
                lake_snapshot: r.get(5)?,
                fct_rows: r.get(6)?,
                mart_rows: r.get(7)?,
                last_reconcile_at: r.get(8)?,
                last_reconcile_clean: r.get(9)?,
                age_seconds: 0.0,
            })
        })
        .map_err(|e| not_built("serving_status", e))?;
    let changed = s.refreshed_at.or(s.built_at).unwrap_or(0);
    s.age_seconds = (now_micros() - changed) as f64 / 1e6;
    Ok(s)
}
