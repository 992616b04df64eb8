//! Mart-only replicas. A serving layer built from a Paimon *mart* table — columns `company,
//! order_day, revenue, orders`, primary key `(company, order_day)`, as `paimon_mart_ddl` makes it
//! and a Ray job, a Flink job or another streamhouse fills it — holds `mart_daily` and the group
//! counts only, never `fct_orders`: its memory grows with the mart, not with the fact. The
//! dashboard reads it exactly as in fact mode. Following such a table applies each new
//! snapshot in one transaction (readers see the old or the new mart, never a mix): the changed
//! groups only, from the snapshots' changes, when they are plain appends (what a publisher or a
//! streaming job commits); the whole snapshot when one of them overwrote the table.
//!
//! Each build or apply records the fact state the mart snapshot it read carries (`freshness`):
//! what serving_status shows and what serving_reconcile(fact := ...) reads the fact as of.
//!
//! Which mode a layer is in is decided in `served`; how a replica checks itself against the lake
//! fact is `lake_fact`.

use std::time::Instant;

use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::quote;
use crate::core::schema::{self, Place, COUNTS, FACT, MART, META};
use crate::core::tier::MART_COLUMNS;
use crate::host::transaction::Transaction;
use crate::lake::{Access, LakeTable};
use crate::serving::freshness::carried;
use crate::serving::layer::{self, BuildSummary};
use crate::serving::meta::{current_place, new_generation, not_built, now_micros, recorded_source};
use crate::serving::source::duckdb_type_name;

/// The mart table's column names, in the order they are read.
const MART_NAMES: [&str; 4] = [MART_COLUMNS[0].0, MART_COLUMNS[1].0, MART_COLUMNS[2].0, MART_COLUMNS[3].0];
/// Where a replica build stages the mart table's rows (a temp table of our own connection).
const STAGE: &str = "__sh_mart_stage";

/// Reads the mart table's latest snapshot into the stage and checks it: no NULL key, no
/// duplicate group, a positive order count and a revenue on every group. Returns the snapshot.
fn stage(conn: &Connection, raw: &str, table: &LakeTable) -> Result<Option<i64>> {
    let schema = table.schema()?;
    let mut missing = Vec::new();
    let mut projection = Vec::new();
    for want in MART_NAMES {
        match schema.fields().iter().find(|f| f.name().eq_ignore_ascii_case(want)) {
            Some(f) => projection.push(f.name().clone()),
            None => missing.push(want),
        }
    }
    if let Some(column) = missing.first() {
        let found = schema.fields().iter().map(|f| f.name().clone()).collect();
        let column = MART_NAMES.iter().find(|c| *c == column).expect("listed");
        return Err(Error::MissingColumn { source: raw.into(), column, found });
    }
    let scan = table.scan(None, None, Some(projection))?;
    let snapshot = scan.snapshot;
    let failed = |e: duckdb::Error| Error::duckdb(format!("serving: staging the mart table '{raw}'"), &e);
    // The lake's types are cast on the way in: text to VARCHAR, a date to DATE, any exact
    // number to HUGEINT/BIGINT (a fractional revenue fails the cast and is reported below).
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {STAGE} (company VARCHAR, order_day DATE, revenue HUGEINT, orders BIGINT)"
    ))
    .map_err(failed)?;
    let raw_stage = format!("{STAGE}_raw");
    let mut first = true;
    for batch in scan.stream(1) {
        let batch = batch?;
        if first {
            let cols = batch
                .schema()
                .fields()
                .iter()
                .zip(MART_NAMES)
                .map(|(f, name)| format!("{} {}", quote::ident(name), duckdb_type_name(f.data_type())))
                .collect::<Vec<_>>()
                .join(", ");
            conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE {raw_stage} ({cols})")).map_err(failed)?;
            first = false;
        }
        let mut appender = conn.appender(&raw_stage).map_err(failed)?;
        appender.append_record_batch(batch).map_err(failed)?;
        appender.flush().map_err(failed)?;
    }
    if !first {
        conn.execute_batch(&format!(
            "INSERT INTO {STAGE} SELECT company, order_day, revenue, orders FROM {raw_stage}; DROP TABLE {raw_stage}"
        ))
        .map_err(|e| Error::BadRow {
            source: raw.into(),
            problem: format!(
                "a value does not convert to the mart's types ({})",
                crate::core::error::clean_duckdb_message(&e)
            ),
        })?;
    }
    check_rows(conn, raw)?;
    Ok(snapshot)
}

/// The first row `sql` returns, if any.
fn first_row<T>(
    conn: &Connection,
    sql: &str,
    row: impl FnOnce(&duckdb::Row<'_>) -> duckdb::Result<T>,
) -> Result<Option<T>> {
    match conn.query_row(sql, [], row) {
        Ok(v) => Ok(Some(v)),
        Err(duckdb::Error::QueryReturnedNoRows) => Ok(None),
        Err(e) => Err(Error::duckdb("serving: checking the mart table", &e)),
    }
}

/// The first problem in the staged mart, if any, named with its group.
fn check_rows(conn: &Connection, raw: &str) -> Result<()> {
    // One pass says whether anything is wrong (what a follower's every apply pays); only then
    // do the queries below find the first offending group to name.
    let clean = first_row(
        conn,
        &format!(
            "SELECT count(*) FILTER (WHERE company IS NULL OR order_day IS NULL OR revenue IS NULL OR orders IS NULL \
                 OR orders <= 0) = 0 AND count(*) = count(DISTINCT (company, order_day)) FROM {STAGE}"
        ),
        |r| r.get::<_, bool>(0),
    )?;
    if clean == Some(true) {
        return Ok(());
    }
    let checks = [
        ("company IS NULL", "company is NULL"),
        ("order_day IS NULL", "order_day is NULL"),
        ("revenue IS NULL", "revenue is NULL"),
        ("orders IS NULL", "orders is NULL"),
        ("orders <= 0", "the order count is not positive"),
    ];
    for (predicate, problem) in checks {
        let found: Option<(Option<String>, Option<String>, Option<i64>)> = first_row(
            conn,
            &format!(
                "SELECT company, CAST(order_day AS VARCHAR), orders FROM {STAGE} WHERE {predicate} \
                 ORDER BY company, order_day LIMIT 1"
            ),
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        if let Some((company, day, orders)) = found {
            let show = |v: Option<String>| v.map_or("NULL".to_string(), |s| format!("'{s}'"));
            return Err(Error::BadRow {
                source: raw.into(),
                problem: format!(
                    "mart group (company {}, order_day {}, orders {}): {problem}; a mart table holds one row per \
                     (company, order_day) with its revenue and a positive order count",
                    show(company),
                    show(day),
                    orders.map_or("NULL".to_string(), |o| o.to_string())
                ),
            });
        }
    }
    let duplicate: Option<(String, String, i64)> = first_row(
        conn,
        &format!(
            "SELECT company, CAST(order_day AS VARCHAR), count(*) FROM {STAGE} GROUP BY ALL HAVING count(*) > 1 \
             ORDER BY ALL LIMIT 1"
        ),
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    if let Some((company, day, n)) = duplicate {
        return Err(Error::BadRow {
            source: raw.into(),
            problem: format!(
                "mart group (company '{company}', order_day '{day}') appears {n} times; its key must be unique"
            ),
        });
    }
    Ok(())
}

/// Replaces the mart and counts at `place` with the staged mart (the caller owns the
/// transaction); a fact layer's `fct_orders` there is dropped: the layer is now a replica.
fn install(conn: &Connection, place: &Place) -> Result<()> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: installing the mart", &e);
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS {fact}; \
         CREATE OR REPLACE TABLE {mart} AS SELECT company, order_day, revenue FROM {STAGE} ORDER BY company, order_day; \
         CREATE OR REPLACE TABLE {counts} AS SELECT company, list(order_day ORDER BY order_day) AS order_days, \
             list(orders ORDER BY order_day) AS orders FROM {STAGE} GROUP BY company ORDER BY company",
        fact = place.of(FACT),
        mart = place.of(MART),
        counts = place.of(COUNTS),
    ))
    .map_err(failed)
}

/// `serving_build` of a mart table, inside `tx` (left open for the caller to commit).
pub fn build(
    conn: &Connection,
    raw: &str,
    table: &LakeTable,
    tx: &mut Transaction,
    started: Instant,
) -> Result<BuildSummary> {
    let snapshot = stage(conn, raw, table)?;
    let fact = carried(table, snapshot)?;
    tx.run(conn, || {
        let place = current_place(conn)?;
        let recorded = recorded_source(raw, Some(table.path()));
        install(conn, &place)?;
        conn.execute_batch(&schema::meta_ddl(&place))
            .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
        conn.execute(
            &format!(
                "INSERT INTO {} VALUES (make_timestamp(?), ?, NULL, NULL, 0, ?, NULL, NULL, \
                 (SELECT coalesce(sum(orders), 0) FROM {STAGE}), ?, ?, ?, 'mart', ?, NULL, NULL, NULL, NULL, NULL, ?, ?, NULL, \
                 NULL)",
                place.of(META)
            ),
            duckdb::params![
                now_micros(),
                recorded,
                snapshot,
                new_generation(),
                place.catalog,
                place.schema,
                crate::serving::history::commit_millis(table, snapshot)?,
                fact.snapshot,
                fact.commit_millis
            ],
        )
        .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))?;
        let orders = format!("SELECT coalesce(sum(orders), 0) FROM {STAGE}");
        layer::summarize_with(conn, &place, &orders, &recorded, snapshot, started)
    })
}

/// Where an incremental apply stages the changed rows of the mart table, in arrival order.
const CHANGES: &str = "__sh_mart_changes";
/// The keys an incremental apply touches (upserted or deleted).
const KEYS: &str = "__sh_mart_keys";

/// Whether snapshots `served+1..=latest` can be applied from their changes: only appends (and
/// compactions, which change no row); an OVERWRITE (a rewrite, a Ray job) drops rows its changes
/// do not list, so it needs a full read.
fn incremental(table: &LakeTable, served: i64, latest: i64) -> Result<bool> {
    crate::serving::delta::additive_since(table, served, latest)
}

/// Stages the net effect of snapshots `from..=to` on each group: the last row written for a key
/// wins (the mart table's deduplicate merge engine, in commit order); upserts into the stage
/// (checked like a full read), every touched key into `KEYS`.
fn stage_changes(conn: &Connection, raw: &str, table: &LakeTable, from: i64, to: i64) -> Result<()> {
    let failed =
        |e: duckdb::Error| Error::duckdb(format!("serving: staging the changes of the mart table '{raw}'"), &e);
    let mut first = true;
    for item in table.changes(from, to) {
        let (_, batch) = item?;
        if first {
            conn.execute_batch(&crate::serving::source::temp_table_for(CHANGES, &batch.schema())).map_err(failed)?;
            first = false;
        }
        let mut appender = conn.appender(CHANGES).map_err(failed)?;
        appender.append_record_batch(batch).map_err(failed)?;
        appender.flush().map_err(failed)?;
    }
    if first {
        conn.execute_batch(&format!(
            "CREATE OR REPLACE TEMP TABLE {STAGE} (company VARCHAR, order_day DATE, revenue HUGEINT, orders BIGINT); \
             CREATE OR REPLACE TEMP TABLE {KEYS} (company VARCHAR, order_day DATE)"
        ))
        .map_err(failed)?;
        return Ok(());
    }
    // A temp table's rowid is its insertion order: the order the changes were committed in.
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {KEYS} AS SELECT DISTINCT company, order_day FROM {CHANGES}; \
         CREATE OR REPLACE TEMP TABLE {STAGE} (company VARCHAR, order_day DATE, revenue HUGEINT, orders BIGINT); \
         INSERT INTO {STAGE} SELECT company, order_day, revenue, orders FROM ( \
             SELECT *, row_number() OVER (PARTITION BY company, order_day ORDER BY rowid DESC) AS latest \
             FROM {CHANGES}) WHERE latest = 1 AND rowkind IN ('+I', '+U'); \
         DROP TABLE {CHANGES}"
    ))
    .map_err(|e| Error::BadRow {
        source: raw.into(),
        problem: format!(
            "a changed value does not convert to the mart's types ({})",
            crate::core::error::clean_duckdb_message(&e)
        ),
    })?;
    check_rows(conn, raw)
}

/// Moves the mart and counts at `place` by the staged changes (the caller owns the transaction).
fn merge_changes(conn: &Connection, place: &Place) -> Result<()> {
    let (mart, counts) = (place.of(MART), place.of(COUNTS));
    conn.execute_batch(&format!(
        "DELETE FROM {mart} WHERE (company, order_day) IN (SELECT company, order_day FROM {KEYS}); \
         INSERT INTO {mart} SELECT company, order_day, revenue FROM {STAGE} ORDER BY company, order_day; \
         CREATE OR REPLACE TEMP TABLE __sh_mart_counts_next AS \
             SELECT company, list(order_day ORDER BY order_day) AS order_days, list(orders ORDER BY order_day) AS orders \
             FROM (SELECT * FROM ({counts_rows}) c WHERE company IN (SELECT company FROM {KEYS}) \
                     AND (company, order_day) NOT IN (SELECT company, order_day FROM {KEYS}) \
                   UNION ALL SELECT company, order_day, orders FROM {STAGE}) \
             GROUP BY company; \
         DELETE FROM {counts} WHERE company IN (SELECT company FROM {KEYS}); \
         INSERT INTO {counts} SELECT * FROM __sh_mart_counts_next ORDER BY company; \
         DROP TABLE __sh_mart_counts_next",
        counts_rows = schema::counts_rows(&counts),
    ))
    .map_err(|e| Error::duckdb("serving_follow: applying the mart's changes", &e))
}

/// A follower's apply on a replica: the mart table's snapshots after the one served, applied in
/// one transaction — their changed groups only when they are plain appends, else the latest
/// snapshot read whole. Returns the snapshot applied.
pub fn apply(
    conn: &Connection,
    raw: &str,
    path: &str,
    access: &Access,
    served: Option<i64>,
    millis: Option<i64>,
) -> Result<Option<i64>> {
    let table = LakeTable::open("serving_follow", path, access)?;
    // A mart table whose history no longer holds the snapshot served is read whole again.
    let rewritten = crate::serving::history::rewritten(&table, served, millis)?;
    let Some(latest) = table.latest_snapshot()? else {
        return match rewritten {
            Some(why) => Err(Error::Refused {
                function: "serving_follow",
                problem: crate::serving::history::cannot_rebuild(&why, raw, "the mart table has no snapshot"),
            }),
            None => Ok(None),
        };
    };
    if rewritten.is_none() && served.is_some_and(|s| latest <= s) {
        return Ok(None);
    }
    let by_changes = match served {
        Some(s) if rewritten.is_none() => incremental(&table, s, latest)?,
        _ => false,
    };
    let snapshot = if by_changes {
        stage_changes(conn, raw, &table, served.expect("checked") + 1, latest)?;
        Some(latest)
    } else {
        stage(conn, raw, &table)?
    };
    let fact = carried(&table, snapshot)?;
    let mut tx = Transaction::new();
    let done = tx.run(conn, || {
        let place = current_place(conn)?;
        if by_changes {
            merge_changes(conn, &place)?;
        } else {
            install(conn, &place)?;
        }
        conn.execute(
            &format!(
                "UPDATE {} SET refreshed_at = make_timestamp(?), refresh_source = source, refreshes = refreshes + 1, \
                 lake_snapshot = ?, fct_rows = (SELECT coalesce(sum(list_sum(orders)), 0) FROM {}), generation = ?, \
                 lake_snapshot_millis = ?, rebuilt_because = coalesce(?, rebuilt_because), fact_snapshot = ?, \
                 fact_commit_millis = ?",
                place.of(META),
                place.of(COUNTS)
            ),
            duckdb::params![
                now_micros(),
                snapshot,
                new_generation(),
                crate::serving::history::commit_millis(&table, snapshot)?,
                rewritten,
                fact.snapshot,
                fact.commit_millis
            ],
        )
        .map_err(|e| not_built("serving_follow", e))?;
        Ok(())
    });
    match done {
        Ok(()) => {
            tx.commit(conn)?;
            Ok(snapshot)
        }
        Err(e) => {
            tx.rollback(conn);
            Err(e)
        }
    }
}
