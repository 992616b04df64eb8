//! Building the fact layer on the extension's own connection: a source resolved against the
//! serving contract (here a table, view or file; a Paimon table in `lake_source`, a Fluss table
//! in `stream_source`), loaded, checked, and `fct_orders` / `mart_daily` / `serving_meta`
//! replaced. Each build is one transaction, so a failure leaves the previous `fct_orders` /
//! `mart_daily` exactly as they were.

use std::time::Instant;

use duckdb::arrow::array::{Array, Int64Array};
use duckdb::types::ValueRef;
use duckdb::Connection;

use crate::core::dupcheck;
use crate::core::error::{clean_duckdb_message, Error, Probe, Result};
use crate::core::mapping::ColumnMap;
use crate::core::quarantine::{self, OnBadRows, QUARANTINE};
use crate::core::quote;
use crate::core::schema::{self, Place, FACT, MART, META};
use crate::core::source::Source;
use crate::host::sandbox::Sandbox;
use crate::host::transaction::Transaction;
use crate::lake::Access;
use crate::serving::meta::{current_place, elapsed_ms, new_generation, now_micros, recorded_source, refuse_read_only};
use crate::serving::quarantine::{self as held, HELD};
use crate::serving::source::{describe, AnyOrder, BuildRequest, Given, ResolvedSource};

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
    /// Orders held out of the layer (`on_bad_rows := 'quarantine'`, `serving::quarantine`).
    pub quarantined: i64,
}

/// Resolves a source string. A Paimon source is planned (its snapshot pinned) and read where it
/// is loaded; a refresh's changed rows are staged into a temp table of our own connection.
pub fn resolve(
    conn: &Connection,
    raw: &str,
    given: Given,
    allow_deleted: bool,
    map: Option<&ColumnMap>,
    access: &Access,
) -> Result<ResolvedSource> {
    let source = match given {
        Given::Lake(table) => {
            return crate::serving::lake_source::resolve(conn, raw, table, allow_deleted, map, access)
        }
        Given::Relation(source) => source,
    };
    if !access.options.is_empty() {
        return Err(Error::BadSource {
            source: raw.into(),
            reason: "options := MAP {...} applies only to a Paimon table source; a table, view or file is read by \
                     DuckDB itself (for S3 files create a DuckDB secret)"
                .into(),
        });
    }
    if let Source::File { path, .. } = &source {
        refuse_special_file(raw, path, &access.sandbox)?;
    }
    let relation = source.relation_sql();
    let (relation, tolerant, columns) = match map {
        Some(map) => crate::serving::mapped::wrap(conn, raw, &relation, map)?.into_parts(),
        None => {
            let described = describe(conn, raw, &relation)?;
            let columns = schema::match_columns(raw, &described)?;
            (relation, None, columns)
        }
    };
    Ok(ResolvedSource { tolerant, ..ResolvedSource::relation(raw, relation, columns) })
}

/// Resolves a refresh's change set and how it marks deletes (`deleted :=`, see
/// `schema::delete_flag`): an expression must be one boolean expression over the change set's
/// columns, checked before anything runs.
pub fn resolve_changes(
    conn: &Connection,
    raw: &str,
    given: Given,
    map: Option<&ColumnMap>,
    access: &Access,
    deleted: Option<&str>,
) -> Result<ResolvedSource> {
    let mut src = resolve(conn, raw, given, true, map, access)?;
    // Only a Paimon source arrives with its deletes marked (its row kinds).
    if src.columns.deleted.is_some() {
        return match deleted {
            None => Ok(src),
            Some(_) => Err(Error::Refused {
                function: "serving_refresh",
                problem: "deleted := applies to a change-set table; a Paimon source's deletes are its row kinds".into(),
            }),
        };
    }
    let described = describe(conn, raw, &src.relation)?;
    src.columns.deleted = match schema::delete_flag(raw, &described, deleted)? {
        schema::DeleteFlag::Absent => None,
        schema::DeleteFlag::Column(name) => Some(quote::ident(&name)),
        schema::DeleteFlag::Expression(expr) => Some(boolean_expression(conn, &src, &expr)?),
    };
    Ok(src)
}

/// `expr` as a parenthesized SQL expression once DuckDB has typed it BOOLEAN in the very select
/// list the refresh reads (so an aggregate or a window is refused here, not later). A `;` is
/// refused first: preparing text with several statements would run all but the last.
fn boolean_expression(conn: &Connection, src: &ResolvedSource, expr: &str) -> Result<String> {
    let bad = |problem: String| Error::BadArgument {
        function: "serving_refresh",
        parameter: "deleted",
        value: expr.to_string(),
        problem,
    };
    if expr.contains(';') {
        return Err(bad("a ';' is not part of a boolean expression (give one expression, no statements)".into()));
    }
    // Reads outside the row are refused by the gates; an aggregate or window by DuckDB's typing below.
    crate::serving::mapped::gate_expression(conn, "serving_refresh", "deleted", expr).map_err(|e| match e {
        Error::BadArgument { problem, .. } => bad(problem),
        other => other,
    })?;
    let probe =
        format!("DESCRIBE SELECT {}, ({expr}) AS deleted FROM {}", src.columns.fact_select_list(), src.relation);
    let t: String = conn
        .prepare(&probe)
        .and_then(|mut s| s.query_map([], |r| r.get::<_, String>(1))?.last().transpose())
        .and_then(|t| t.ok_or(duckdb::Error::QueryReturnedNoRows))
        .map_err(|e| {
            bad(format!(
                "not a column or boolean expression over the change set's columns ({})",
                clean_duckdb_message(&e)
            ))
        })?;
    if !t.eq_ignore_ascii_case("BOOLEAN") {
        return Err(bad(format!("its type is {t}, not BOOLEAN (e.g. op = 'D', is_deleted = 1)")));
    }
    Ok(format!("({expr})"))
}

/// A FIFO as a source would block DuckDB's reader forever (and a device never ends): refuse
/// anything but a regular file, before DuckDB opens it. Globs and paths the sandbox forbids are
/// left to DuckDB (which matches only files, or refuses with its own message).
fn refuse_special_file(raw: &str, path: &str, sandbox: &Sandbox) -> Result<()> {
    if path.contains(['*', '?', '[']) || path.contains("://") || !sandbox.permits(path) {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => Err(Error::BadSource {
            source: raw.into(),
            reason: "it is not a regular file (a directory, FIFO, socket or device cannot be read as a source)".into(),
        }),
        _ => Ok(()),
    }
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
/// Not when the source itself called a writer that gave up waiting for ours (a view over
/// serving_refresh, say): each probe would read it and wait that long again. Under 'fail' the
/// message of a bad order also says what 'quarantine' would do (a row without a key cannot be
/// held out, so its message does not).
pub fn explain_load_failure(conn: &Connection, err: Error, policy: OnBadRows) -> Error {
    if let Error::LoadFailed { source, probes, message } = &err {
        if crate::core::error::is_busy_message(message) {
            return err;
        }
        for (sql, probe) in probes {
            if let Some((first, second)) = first_row_strings(conn, sql) {
                let problem = probe.message(&first, &second);
                let keyed = !matches!(probe, Probe::Null("order_id"))
                    && !matches!(probe, Probe::BadValue(p) if p.starts_with("order_id"));
                let problem = match policy == OnBadRows::Fail && keyed {
                    true => quarantine::with_hint(&problem),
                    false => problem,
                };
                return Error::BadRow { source: source.clone(), problem };
            }
        }
    }
    err
}

/// Refuses a duplicated order_id in `table` (fct_orders-shaped, order_id NOT NULL).
///
/// A 3M-group GROUP BY would cost more than the rest of the build, so: when the key range is
/// dense, DuckDB ORs the keys into one bitmap in parallel (`bitstring_agg`) and the number of
/// set bits must equal the row count; sparse keys are checked in Rust (`dupcheck`). Only when a
/// duplicate exists do we pay for finding the smallest one.
pub fn check_duplicates(conn: &Connection, raw: &str, table: &str) -> Result<()> {
    match first_duplicate(conn, table)? {
        None => Ok(()),
        Some((id, n)) => Err(Error::BadRow { source: raw.into(), problem: duplicate_message(id, n) }),
    }
}

/// The smallest duplicated order_id of `table` and how often it occurs (see `check_duplicates`).
pub fn first_duplicate(conn: &Connection, table: &str) -> Result<Option<(i64, usize)>> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: checking for duplicate orders", &e);
    let (rows, lo, hi): (i64, Option<i64>, Option<i64>) = conn
        .query_row(&format!("SELECT count(*), min(order_id), max(order_id) FROM {table}"), [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .map_err(failed)?;
    let (Some(lo), Some(hi)) = (lo, hi) else { return Ok(None) };
    let range = hi as i128 - lo as i128 + 1;
    let duplicate = if range <= (rows as i128).saturating_mul(dupcheck::DENSE_FACTOR as i128) {
        let distinct: i64 = conn
            .query_row(&format!("SELECT bit_count(bitstring_agg(order_id, {lo}, {hi})) FROM {table}"), [], |r| r.get(0))
            .map_err(failed)?;
        if distinct == rows {
            None
        } else {
            conn.query_row(
                &format!(
                    "SELECT order_id, count(*) FROM {table} GROUP BY order_id HAVING count(*) > 1 \
                     ORDER BY order_id LIMIT 1"
                ),
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)? as usize)),
            )
            .map(Some)
            .map_err(failed)?
        }
    } else {
        let mut stmt = conn.prepare(&format!("SELECT order_id FROM {table}")).map_err(failed)?;
        let mut ids = Vec::with_capacity(rows as usize);
        for batch in stmt.query_arrow([]).map_err(failed)? {
            let col = batch.column(0).as_any().downcast_ref::<Int64Array>().ok_or_else(|| Error::Internal {
                function: "serving: checking for duplicate orders".into(),
                problem: "order_id is not BIGINT".into(),
            })?;
            ids.extend_from_slice(col.values());
        }
        dupcheck::first_duplicate(ids)
    };
    Ok(duplicate)
}

pub fn duplicate_message(id: i64, n: usize) -> String {
    quarantine::with_hint(&format!(
        "duplicate order_id {id} ({n} rows); the source must be the merged state with one row per \
         order (streamhouse never re-merges a changelog)"
    ))
}

/// Counts and totals of the serving tables at `place`.
pub fn summarize(
    conn: &Connection,
    place: &Place,
    source: &str,
    lake_snapshot: Option<i64>,
    started: Instant,
) -> Result<BuildSummary> {
    summarize_with(conn, place, &format!("SELECT count(*) FROM {}", place.of(FACT)), source, lake_snapshot, started)
}

/// `summarize` with the orders counted by `orders_sql` (a replica has no fct_orders to count).
pub fn summarize_with(
    conn: &Connection,
    place: &Place,
    orders_sql: &str,
    source: &str,
    lake_snapshot: Option<i64>,
    started: Instant,
) -> Result<BuildSummary> {
    let sql = format!(
        "SELECT ({orders_sql}), count(*), count(DISTINCT company), count(DISTINCT order_day), sum(revenue), \
         (SELECT coalesce(max(quarantined), 0) FROM {}) FROM {}",
        place.of(META),
        place.of(MART)
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
            elapsed_ms: elapsed_ms(started),
            quarantined: r.get(5)?,
        })
    })
    .map_err(|e| Error::duckdb("serving: summarizing", &e))
}

/// Replaces the serving tables at `place` from a resolved source; the caller owns the
/// transaction. The new fact is loaded under a staging name and renamed into place only after
/// every check, so a source that reads the current fct_orders (even through a view) still sees it.
/// Under `on_bad_rows := 'quarantine'` the bad orders are held out (`serving::quarantine`);
/// `policy` is recorded with the layer either way.
pub fn build_from(
    conn: &Connection,
    place: &Place,
    src: &ResolvedSource,
    recorded: &str,
    lake_snapshot: Option<i64>,
    map: Option<&ColumnMap>,
    policy: OnBadRows,
) -> Result<()> {
    let staged = place.of(STAGED_FACT);
    let held = match policy {
        OnBadRows::Fail => {
            let load = format!(
                "{}; INSERT INTO {staged} SELECT {} FROM {}; {}",
                schema::fact_ddl(&staged),
                src.columns.fact_select_list(),
                src.relation,
                quarantine::quarantine_ddl(&place.of(QUARANTINE))
            );
            let loaded = {
                let _any_order = src.any_order.then(|| AnyOrder::set(conn));
                load_checked(conn, src, &load)
            };
            loaded?;
            check_duplicates(conn, &src.raw, &staged)?;
            0
        }
        OnBadRows::Quarantine => {
            conn.execute_batch(&schema::fact_ddl(&staged))
                .map_err(|e| Error::duckdb("serving: creating fct_orders", &e))?;
            load_quarantining(conn, place, src, &staged)?
        }
    };
    let failed = |e: duckdb::Error| Error::duckdb("serving: building mart_daily", &e);
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {}; ALTER TABLE {staged} RENAME TO {FACT}; {}",
        place.of(FACT),
        schema::mart_ctas(place)
    ))
    .map_err(failed)?;
    conn.execute_batch(&schema::meta_ddl(place)).map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
    conn.execute(
        &format!(
            "INSERT INTO {} VALUES (make_timestamp(?), ?, NULL, NULL, 0, ?, NULL, NULL, (SELECT count(*) FROM {}), ?, ?, ?, \
             'fact', ?, NULL, ?, NULL, NULL, NULL, NULL, NULL, ?, ?)",
            place.of(META),
            place.of(FACT)
        ),
        duckdb::params![
            now_micros(),
            recorded,
            lake_snapshot,
            new_generation(),
            place.catalog,
            place.schema,
            src.lake_snapshot_millis,
            map.and_then(ColumnMap::encode),
            policy.name(),
            held
        ],
    )
    .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
    Ok(())
}

/// Where a build loads the new fact before it replaces fct_orders.
const STAGED_FACT: &str = "__streamhouse_fct_orders_new";
/// Where a quarantining build stages its source's rows, every conversion tried.
const CHECKED: &str = "__sh_checked";

/// A quarantining build's load: the source's rows read tolerantly into CHECKED, the held orders
/// (a problem row, or more than one row) listed as the new `serving_quarantine` at `place`, and
/// every other row inserted into `staged` (fct_orders-shaped). Returns how many are held.
fn load_quarantining(conn: &Connection, place: &Place, src: &ResolvedSource, staged: &str) -> Result<i64> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: sorting out bad rows", &e);
    {
        let _any_order = src.any_order.then(|| AnyOrder::set(conn));
        let sql = format!("CREATE OR REPLACE TEMP TABLE {CHECKED} AS {}", held::tolerant_sql(src, "false"));
        load_checked(conn, src, &sql)?;
    }
    let (without_key, first): (i64, Option<String>) = conn
        .query_row(
            &format!("SELECT count(*), min(key_problem) FROM {CHECKED} WHERE key_problem IS NOT NULL"),
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(failed)?;
    if without_key > 0 {
        return Err(held::keyless(src, without_key as usize, first.as_deref().unwrap_or("order_id is NULL")));
    }
    // Duplicates are looked for by the build's fast check; listed only when there are some.
    let duplicates = match first_duplicate(conn, CHECKED)? {
        None => String::new(),
        Some(_) => format!(
            "UNION ALL SELECT order_id, 0, {} || count(*) || {} FROM {CHECKED} GROUP BY order_id HAVING count(*) > 1",
            quote::literal(quarantine::DUPLICATE.0),
            quote::literal(quarantine::DUPLICATE.1)
        ),
    };
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {HELD} AS SELECT order_id, arg_min(reason, rank) AS reason FROM \
             (SELECT order_id, 1 AS rank, problem AS reason FROM {CHECKED} WHERE problem IS NOT NULL {duplicates}) \
         GROUP BY order_id; \
         INSERT INTO {staged} SELECT order_id, company, order_day, revenue FROM {CHECKED} \
             WHERE problem IS NULL AND order_id NOT IN (SELECT order_id FROM {HELD}); \
         DROP TABLE {CHECKED}; \
         {ddl}; \
         INSERT INTO {table} SELECT order_id, reason, to_timestamp({now} / 1e6) FROM {HELD} ORDER BY order_id; \
         DROP TABLE {HELD}",
        ddl = quarantine::quarantine_ddl(&place.of(QUARANTINE)),
        table = place.of(QUARANTINE),
        now = now_micros(),
    ))
    .map_err(failed)?;
    conn.query_row(&format!("SELECT count(*) FROM {}", place.of(QUARANTINE)), [], |r| r.get(0)).map_err(failed)
}

/// Builds the layer inside `tx`, left open for the caller to commit.
pub fn build(conn: &Connection, req: &BuildRequest, given: Given, tx: &mut Transaction) -> Result<BuildSummary> {
    let started = Instant::now();
    let BuildRequest { raw, map, access, replace, policy, .. } = *req;
    refuse_read_only(conn, "serving_build")?;
    let recorded = recorded_source(raw, given.lake_path());
    // Resolved before the transaction: a Paimon source's planned read (its parcel) must survive
    // a rollback so that explain_load_failure can read it again for the offending row, and
    // whether the load may insert in any order is asked where a refusal aborts nothing.
    let src = resolve(conn, raw, given, false, map, access)?;
    // Checked before the transaction: its probes fail for a name that does not exist, and a
    // failed statement would abort the build's transaction.
    if !replace {
        refuse_foreign_tables(conn, &current_place(conn)?)?;
    }
    tx.run(conn, || {
        let place = current_place(conn)?;
        build_from(conn, &place, &src, &recorded, src.lake_snapshot, map, policy)?;
        summarize(conn, &place, &recorded, src.lake_snapshot, started)
    })
    .map_err(|e| {
        if src.any_order {
            // Rolled back by now: a load that failed could not reset its setting (see AnyOrder).
            AnyOrder::reset(conn);
        }
        explain_load_failure(conn, e, policy)
    })
}

/// The columns of each table a build replaces, as streamhouse creates them (`name TYPE`, in order),
/// and as earlier releases created them (a layer of theirs is rebuilt, not refused).
const OUR_SHAPES: [(&str, &str); 5] = [
    (FACT, "order_id BIGINT, company VARCHAR, order_day DATE, revenue BIGINT"),
    (MART, "company VARCHAR, order_day DATE, revenue HUGEINT"),
    (schema::COUNTS, "company VARCHAR, order_days DATE[], orders BIGINT[]"),
    (schema::COUNTS, "company VARCHAR, order_day DATE, orders BIGINT"),
    (QUARANTINE, quarantine::QUARANTINE_SHAPE),
];

/// The columns (`name TYPE, ...`) of the relation `name` at `place`, None when there is none. A
/// DESCRIBE of the one qualified name: it resolves names as DuckDB does (case-insensitively) and
/// never lists other attached catalogs (a remote one may be slow or unreachable).
fn columns_at(conn: &Connection, place: &Place, name: &str) -> Option<String> {
    let mut stmt = conn.prepare(&format!("DESCRIBE {}", place.of(name))).ok()?;
    let cols: Vec<String> = stmt
        .query_map([], |r| Ok(format!("{} {}", r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .ok()?
        .collect::<std::result::Result<_, _>>()
        .ok()?;
    Some(cols.join(", "))
}

/// Whether `name` at `place` is a view (DROP TABLE would refuse it: it is never the layer's).
fn is_view(conn: &Connection, place: &Place, name: &str) -> bool {
    conn.query_row(
        "SELECT count(*) FROM duckdb_views() WHERE lower(database_name) = lower(?) AND lower(schema_name) = lower(?) \
         AND lower(view_name) = lower(?)",
        duckdb::params![place.catalog, place.schema, name],
        |r| r.get::<_, i64>(0),
    )
    .is_ok_and(|n| n > 0)
}

/// Refuses a build that would replace a table or view streamhouse did not create. A table is
/// the layer's when the layer is recorded at `place` (a `serving_meta` of ours there) and it has
/// exactly the columns streamhouse gives it; anything else is the user's (a dbt model named
/// `fct_orders`, a hand-made `mart_daily`), and a build never drops it without `replace := true`.
pub fn refuse_foreign_tables(conn: &Connection, place: &Place) -> Result<()> {
    let meta = columns_at(conn, place, META);
    let layer_recorded = meta.as_deref().is_some_and(|c| {
        c.split(", ").any(|col| col == "built_at TIMESTAMP") && c.split(", ").any(|col| col == "source VARCHAR")
    }) && !is_view(conn, place, META);
    for name in [FACT, MART, schema::COUNTS, QUARANTINE, META] {
        let Some(cols) = (if name == META { meta.clone() } else { columns_at(conn, place, name) }) else { continue };
        let view = is_view(conn, place, name);
        let ours = layer_recorded
            && !view
            && (name == META || OUR_SHAPES.iter().any(|(t, shape)| *t == name && cols == *shape));
        if !ours {
            let what = if view {
                format!("a view {}", place.of(name))
            } else {
                format!("a table {} ({cols})", place.of(name))
            };
            return Err(Error::Refused {
                function: "serving_build",
                problem: format!(
                    "{what} already exists and was not created by streamhouse; a build never replaces it. Build in \
                     another schema or database (USE other_schema), rename or drop it, or pass replace := true to \
                     let the build drop it"
                ),
            });
        }
    }
    Ok(())
}
