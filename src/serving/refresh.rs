//! Incremental refresh of the serving layer (reconciliation is `reconcile`, status `status`,
//! the mart cache `mart_table`).
//!
//! A refresh replaces (or removes) the changed orders in `fct_orders` and moves `mart_daily` by
//! the delta: the old revenue is retracted from the old (company, order_day), the new one added
//! to the new group, groups whose order count reaches zero disappear and new groups appear.
//! Counts live in `serving_mart_counts` because a SUM alone cannot tell "empty" from "sums to 0".
//! Everything happens in one transaction: a bad change set changes nothing.

use std::sync::Arc;
use std::time::Instant;

use duckdb::arrow::array::{Array, BooleanArray, Date32Array, Int64Array, StringArray};
use duckdb::arrow::compute::{filter_record_batch, not};
use duckdb::arrow::error::ArrowError;
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::Connection;

use crate::core::dupcheck;
use crate::core::error::Probe;
use crate::core::error::{clean_duckdb_message, Error, Result};
use crate::core::mapping::ColumnMap;
use crate::core::mart::{Delta, Mart};
use crate::core::quarantine::{self, OnBadRows};
use crate::core::schema::{Place, COUNTS, FACT, MART, META};
use crate::core::source::Origin;
use crate::core::VECTOR_SIZE;
use crate::host::transaction::Transaction;
use crate::lake::{Access, LakeTable};
use crate::serving::handoff::{Contents, Parcel, Part};
use crate::serving::layer;
use crate::serving::mart_table::{cached_mart, read_mart, remember_mart, Warm};
use crate::serving::meta::{elapsed_ms, new_generation, not_built, now_micros, refuse_read_only};
use crate::serving::quarantine::Sorted;
use crate::serving::read::{batches, batches_with, column};
use crate::serving::served::refuse_in_mart_mode;
use crate::serving::source::{AnyOrder, Given, ResolvedSource};

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
    /// Set when the refresh rebuilt the layer instead (its held snapshot was no longer the
    /// lake table's history): why.
    pub rebuilt_because: Option<String>,
    /// Orders of the change set held out (`on_bad_rows := 'quarantine'`); after a rebuild,
    /// every order held.
    pub quarantined: i64,
}

/// Typed views of one batch shaped like fct_orders (plus `deleted` in a change set).
struct ChangeRows<'a> {
    ids: &'a Int64Array,
    company: &'a StringArray,
    day: &'a Date32Array,
    revenue: &'a Int64Array,
    deleted: Option<&'a BooleanArray>,
}

impl<'a> ChangeRows<'a> {
    fn of(batch: &'a RecordBatch) -> Result<Self> {
        Ok(ChangeRows {
            ids: column(batch, 0)?,
            company: column(batch, 1)?,
            day: column(batch, 2)?,
            revenue: column(batch, 3)?,
            deleted: if batch.num_columns() > 4 { Some(column(batch, 4)?) } else { None },
        })
    }

    fn is_deleted(&self, i: usize) -> bool {
        self.deleted.is_some_and(|d| d.value(i))
    }
}

fn arrow_failed(e: ArrowError) -> Error {
    Error::internal("serving_refresh", e.to_string())
}

/// Reads the change set in fct_orders' shape plus `deleted`.
/// A failed checked cast is reported like a failed build load, naming the row after rollback.
fn read_changes(conn: &Connection, src: &ResolvedSource) -> Result<Vec<RecordBatch>> {
    let sql = format!(
        "SELECT {}, {} AS deleted FROM {}",
        src.columns.fact_select_list(),
        src.columns.deleted_sql(),
        src.relation
    );
    batches(conn, &sql, |e| Error::LoadFailed {
        source: src.raw.clone(),
        message: clean_duckdb_message(&e),
        probes: src.columns.diagnose_sql(&src.relation),
    })
}

/// Refuses a change set with a NULL or repeated key, or an order that is not deleted but
/// lacks a serving column (it could not be placed in the mart). Returns the keys.
fn validate(raw: &str, changes: &[RecordBatch]) -> Result<Vec<i64>> {
    let bad = |problem: String| Error::BadRow { source: raw.into(), problem };
    let (mut null_ids, mut nulls, mut first) = (0usize, [0usize; 3], None::<i64>);
    let mut ids = Vec::with_capacity(changes.iter().map(|b| b.num_rows()).sum());
    for batch in changes {
        let r = ChangeRows::of(batch)?;
        null_ids += r.ids.null_count();
        ids.extend_from_slice(r.ids.values());
        if r.company.null_count() + r.day.null_count() + r.revenue.null_count() == 0 {
            continue;
        }
        for i in (0..batch.num_rows()).filter(|&i| !r.is_deleted(i) && r.ids.is_valid(i)) {
            let missing = [r.company.is_null(i), r.day.is_null(i), r.revenue.is_null(i)];
            for (n, m) in nulls.iter_mut().zip(missing) {
                *n += m as usize;
            }
            if missing.contains(&true) {
                first = Some(first.map_or(r.ids.value(i), |f| f.min(r.ids.value(i))));
            }
        }
    }
    if null_ids > 0 {
        return Err(bad(Probe::Null("order_id").message("", &null_ids.to_string())));
    }
    if let Some(id) = first {
        let (col, n) =
            ["company", "order_day", "revenue"].into_iter().zip(nulls).find(|(_, n)| *n > 0).expect("a NULL was seen");
        return Err(bad(quarantine::with_hint(&format!(
            "{} (a changed order that is not deleted needs every column)",
            Probe::Null(col).message(&id.to_string(), &n.to_string())
        ))));
    }
    match dupcheck::first_duplicate(ids.clone()) {
        None => Ok(ids),
        Some((id, n)) => Err(bad(layer::duplicate_message(id, n))),
    }
}

/// Removes the changed orders from the fact and returns their old versions. DELETE ...
/// RETURNING reads the fact once (row groups are pruned by order_id zone maps).
fn take_old_versions(conn: &Connection, place: &Place, keys: Vec<i64>) -> Result<Vec<RecordBatch>> {
    let keys = Parcel::new(Contents::Keys(keys));
    batches_with(
        conn,
        &format!(
            "DELETE FROM {} WHERE order_id IN (SELECT order_id FROM {}) \
             RETURNING order_id, company, order_day, revenue",
            place.of(FACT),
            Part::Keys.scan()
        ),
        [keys.id()],
        |e| Error::duckdb("serving_refresh: removing changed orders", &e),
    )
}

/// Inserts the new versions of the orders that are not deleted.
fn insert_new_versions(conn: &Connection, place: &Place, changes: &[RecordBatch]) -> Result<()> {
    let mut live = Vec::with_capacity(changes.len());
    for batch in changes {
        let rows = batch.project(&[0, 1, 2, 3]).map_err(arrow_failed)?;
        let rows = match ChangeRows::of(batch)?.deleted {
            Some(d) if d.true_count() > 0 => {
                filter_record_batch(&rows, &not(d).map_err(arrow_failed)?).map_err(arrow_failed)?
            }
            _ => rows,
        };
        // The handoff emits one batch per vector.
        live.extend(
            (0..rows.num_rows()).step_by(VECTOR_SIZE).map(|at| rows.slice(at, VECTOR_SIZE.min(rows.num_rows() - at))),
        );
    }
    let rows = Parcel::new(Contents::Rows(live));
    conn.prepare_cached(&format!("INSERT INTO {} SELECT * FROM {}", place.of(FACT), Part::Rows.scan()))
        .and_then(|mut stmt| stmt.execute([rows.id()]))
        .map(|_| ())
        .map_err(|e| Error::duckdb("serving_refresh: inserting changed orders", &e))
}

/// fct_orders is rewritten (dropping the row versions refreshes deleted) once the dead versions
/// exceed this share of its live rows: each refresh deletes old versions and appends new ones,
/// and an in-memory database never vacuums, so without it every refresh would scan a little
/// more than the last. Amortized: at 1/8, a 1k-change refresh on 2M orders compacts once per
/// ~250 refreshes. Readers are not blocked (they keep reading the committed table).
const COMPACT_SHARE: i64 = 8;
/// Below this many dead versions a rewrite is never worth it.
const COMPACT_MIN: i64 = 50_000;
/// Where a compaction writes the live rows before they replace fct_orders.
const COMPACTED_FACT: &str = "__streamhouse_fct_orders_compacted";
/// What a committed refresh leaves for the cache.
struct Applied {
    summary: RefreshSummary,
    generation: i64,
    mart: Warm,
}

/// Counts the kinds of change and folds the delta (old versions out, new versions in) into
/// the current mart. Pure Rust over the batches.
fn fold_changes(
    changes: &[RecordBatch],
    old: &[RecordBatch],
    current: &Mart,
    s: &mut RefreshSummary,
) -> Result<(Mart, usize)> {
    let mut delta = Delta::with_capacity(changes.iter().chain(old).map(|b| b.num_rows()).sum());
    let mut previous = Vec::with_capacity(old.iter().map(|b| b.num_rows()).sum());
    for batch in old {
        let r = ChangeRows::of(batch)?;
        previous.extend_from_slice(r.ids.values());
        for i in 0..batch.num_rows() {
            delta.retract(r.company.value(i), r.day.value(i), r.revenue.value(i));
        }
    }
    previous.sort_unstable();
    for batch in changes {
        let r = ChangeRows::of(batch)?;
        for i in 0..batch.num_rows() {
            let existed = previous.binary_search(&r.ids.value(i)).is_ok();
            match (r.is_deleted(i), existed) {
                (true, true) => s.deleted += 1,
                (true, false) => s.ignored_deletes += 1,
                (false, existed) => {
                    *(if existed { &mut s.updated } else { &mut s.inserted }) += 1;
                    delta.add(r.company.value(i), r.day.value(i), r.revenue.value(i));
                }
            }
        }
    }
    current.fold(&delta).map_err(|broken| Error::Refused {
        function: "serving_refresh",
        problem: format!(
            "{broken} mart group(s) would have a negative order count: fct_orders or {COUNTS} was changed \
             outside streamhouse; run serving_build to rebuild"
        ),
    })
}

/// What serving_meta says a refresh needs: the state cached, the fact's size, where the layer
/// lives, what to do with bad rows and how many orders are held.
struct Recorded {
    generation: Option<i64>,
    fct_rows: Option<i64>,
    place: Place,
    policy: OnBadRows,
    quarantined: i64,
}

fn recorded(conn: &Connection) -> Result<Recorded> {
    // serving_meta is found like the caller would find it; it says where the whole layer lives.
    conn.prepare_cached(&format!(
        "SELECT generation, fct_rows, serving_catalog, serving_schema, on_bad_rows, quarantined FROM {META}"
    ))
    .and_then(|mut stmt| {
        stmt.query_row([], |r| {
            Ok(Recorded {
                generation: r.get(0)?,
                fct_rows: r.get(1)?,
                place: Place { catalog: r.get(2)?, schema: r.get(3)? },
                policy: OnBadRows::recorded(r.get::<_, Option<String>>(4)?.as_deref()),
                quarantined: r.get::<_, Option<i64>>(5)?.unwrap_or(0),
            })
        })
    })
    .map_err(|e| not_built("serving_refresh", e))
}

/// The change set's rows, and the orders held out of it with why. Under 'quarantine' the bad
/// orders are sorted out first: their keys are taken out of the fact like any changed order's
/// (their previous version leaves the mart), nothing comes in.
fn changes_and_held(conn: &Connection, src: &ResolvedSource, policy: OnBadRows) -> Result<Sorted> {
    match policy {
        OnBadRows::Fail => Ok(Sorted { changes: read_changes(conn, src)?, held: Vec::new() }),
        OnBadRows::Quarantine => crate::serving::quarantine::read_sorted(conn, src, &src.columns.deleted_sql()),
    }
}

fn apply(conn: &Connection, src: &ResolvedSource, lake_snapshot: Option<i64>, started: Instant) -> Result<Applied> {
    let Recorded { generation, fct_rows, place, policy, quarantined } = recorded(conn)?;
    let Sorted { changes, held } = changes_and_held(conn, src, policy)?;
    let mut keys = validate(&src.raw, &changes)?;
    keys.extend(held.iter().map(|(id, _)| *id));
    // serving_quarantine is touched only when it holds something or will.
    let listed = (quarantined > 0 || !held.is_empty()).then(|| keys.clone());
    let old = take_old_versions(conn, &place, keys)?;
    let warm = generation.and_then(cached_mart);
    let dead_before = warm.as_ref().map_or(0, |w| w.dead_rows);
    let current = match warm {
        Some(w) => w.mart,
        None => Arc::new(read_mart(conn, &place)?),
    };
    let replaced = old.iter().map(|b| b.num_rows() as i64).sum::<i64>();
    let mut s = RefreshSummary { source: src.raw.clone(), lake_snapshot, ..Default::default() };
    insert_new_versions(conn, &place, &changes)?;
    let (next, touched) = fold_changes(&changes, &old, &current, &mut s)?;
    let next = Arc::new(next);
    let parcel = Parcel::new(Contents::Mart(next.clone()));
    for (table, part) in [(MART, Part::Mart), (COUNTS, Part::Counts)] {
        conn.prepare_cached(&format!("CREATE OR REPLACE TABLE {} AS SELECT * FROM {}", place.of(table), part.scan()))
            .and_then(|mut stmt| stmt.execute([parcel.id()]))
            .map_err(|e| Error::duckdb("serving_refresh: writing mart_daily", &e))?;
    }
    s.mart_rows_touched = touched as i64;
    s.mart_rows = next.len() as i64;
    s.quarantined = held.len() as i64;
    // Every old version left (a held order's too); every applied new version came in.
    s.fct_rows = match fct_rows {
        Some(n) => n - replaced + s.inserted + s.updated,
        None => conn
            .query_row(&format!("SELECT count(*) FROM {}", place.of(FACT)), [], |r| r.get(0))
            .map_err(|e| Error::duckdb("serving_refresh: counting fct_orders", &e))?,
    };
    let quarantined = match listed {
        Some(changed) => crate::serving::quarantine::keep(conn, &place, &held, changed)?,
        None => quarantined,
    };

    let generation = new_generation();
    conn.prepare_cached(&format!(
        "UPDATE {} SET refreshed_at = make_timestamp(?), refresh_source = ?, refreshes = refreshes + 1, \
         lake_snapshot = coalesce(?, lake_snapshot), lake_snapshot_millis = coalesce(?, lake_snapshot_millis), \
         fct_rows = ?, generation = ?, quarantined = ?",
        place.of(META)
    ))
    .and_then(|mut stmt| {
        stmt.execute(duckdb::params![
            now_micros(),
            src.raw,
            lake_snapshot,
            src.lake_snapshot_millis,
            s.fct_rows,
            generation,
            quarantined
        ])
    })
    .map_err(|e| Error::duckdb("serving_refresh: writing serving_meta", &e))?;
    let mut dead_rows = dead_before + replaced;
    if dead_rows >= COMPACT_MIN.max(s.fct_rows / COMPACT_SHARE) {
        // Same DDL as a build (NOT NULL kept), live rows copied, then swapped in.
        let (fact, next) = (place.of(FACT), place.of(COMPACTED_FACT));
        conn.execute_batch(&format!(
            "{}; INSERT INTO {next} SELECT * FROM {fact}; DROP TABLE {fact}; ALTER TABLE {next} RENAME TO {FACT}",
            crate::core::schema::fact_ddl(&next)
        ))
        .map_err(|e| Error::duckdb("serving_refresh: compacting fct_orders", &e))?;
        dead_rows = 0;
    }
    s.elapsed_ms = elapsed_ms(started);
    Ok(Applied { summary: s, generation, mart: Warm { mart: next, dead_rows } })
}

/// Applies a resolved change set inside the caller's open transaction (a Fluss union read
/// applies its changelog onto the lake part this way, in the build's transaction).
pub fn apply_changes(conn: &Connection, src: &ResolvedSource, started: Instant) -> Result<RefreshSummary> {
    apply(conn, src, None, started).map(|a| a.summary)
}

/// Leaves the writer connection warm after a build, so the first refresh costs what later ones
/// do: the refresh path runs once on an empty change set in a transaction that is rolled back
/// (each statement prepared and executed once; nothing changes) and the built mart is cached
/// under the build's generation. Best effort: a failure here only means a colder refresh.
pub fn warm(conn: &Connection) {
    let Ok(src) = ResolvedSource::empty("(warm-up)", "warm_up") else { return };
    let Ok(Some(generation)) =
        conn.query_row(&format!("SELECT generation FROM {META}"), [], |r| r.get::<_, Option<i64>>(0))
    else {
        return;
    };
    if conn.execute_batch("BEGIN TRANSACTION").is_err() {
        return;
    }
    let applied = apply(conn, &src, None, Instant::now());
    let _ = conn.execute_batch("ROLLBACK");
    if let Ok(a) = applied {
        remember_mart(generation, Warm { mart: a.mart.mart, dead_rows: 0 });
    }
}

/// Applies the changes inside `tx`, left open for the caller to commit. `deleted` is what
/// `deleted :=` says marks a deleted order (None: the default, see `schema::delete_flag`).
/// `on_bad_rows`, when given, becomes the layer's policy (recorded in the same transaction).
pub fn refresh(
    conn: &Connection,
    raw: &str,
    origin: &Origin,
    (map, on_bad_rows): (Option<&ColumnMap>, Option<OnBadRows>),
    access: &Access,
    deleted: Option<&str>,
    tx: &mut Transaction,
) -> Result<RefreshSummary> {
    let started = Instant::now();
    refuse_read_only(conn, "serving_refresh")?;
    refuse_in_mart_mode(
        conn,
        "serving_refresh",
        "a replica is kept fresh by serving_follow on its mart table, or rebuilt by serving_build",
    )?;
    refuse_local_changes_on_lake(conn, raw, origin, access)?;
    // The map given, else the one the layer was built with (a change set has the source's shape).
    // Before the first build there is none; the source's own problems are reported first.
    let map = match map {
        Some(m) => Some(m.clone()),
        None => recorded_map(conn).or_else(|e| if matches!(e, Error::NotBuilt { .. }) { Ok(None) } else { Err(e) })?,
    };
    let src = match origin {
        Origin::Relation(source) => {
            layer::resolve_changes(conn, raw, Given::Relation(source), map.as_ref(), access, deleted)?
        }
        Origin::Lake(path) => {
            let table = LakeTable::open("serving", path, access)?;
            layer::resolve_changes(conn, raw, Given::Lake(&table), map.as_ref(), access, deleted)?
        }
        Origin::Stream(_) => return Err(stream_is_no_change_set(raw)),
    };
    // The policy given, else the layer's (read only where it is needed: `apply` reads its own).
    let policy = |conn: &Connection| match on_bad_rows {
        Some(p) => p,
        None => crate::serving::quarantine::recorded(conn, "serving_refresh").unwrap_or_default(),
    };
    if let Some(why) = src.rebuild.clone() {
        return rebuild(conn, &src, (map.as_ref(), policy(conn)), &why, tx, started);
    }
    let applied = tx
        .run(conn, || {
            if let Some(given) = on_bad_rows {
                crate::serving::quarantine::record(conn, given, "serving_refresh")?;
            }
            apply(conn, &src, src.lake_snapshot, started)
        })
        .map_err(|e| layer::explain_load_failure(conn, e, policy(conn)))?;
    // Cached only once committed: a rolled-back refresh's generation number is used again.
    let (generation, mart) = (applied.generation, applied.mart);
    tx.after_commit(conn, move |_| remember_mart(generation, mart));
    Ok(applied.summary)
}

/// The column map the layer was built with (`serving_meta.columns`), if any.
pub fn recorded_map(conn: &Connection) -> Result<Option<ColumnMap>> {
    let text: Option<String> = conn
        .query_row(&format!("SELECT columns FROM {META}"), [], |r| r.get(0))
        .map_err(|e| not_built("serving_refresh", e))?;
    match text {
        None => Ok(None),
        Some(t) => ColumnMap::decode(&t).map(Some).ok_or_else(|| Error::Refused {
            function: "serving_refresh",
            problem: format!("serving_meta records a column map that cannot be read ('{t}'); run serving_build again"),
        }),
    }
}

/// A Fluss table is not a change set: its changelog is applied by a follower, from the position
/// the layer records (which checks that the log still holds it).
fn stream_is_no_change_set(raw: &str) -> Error {
    let shown = crate::core::stream::redacted(raw);
    Error::Refused {
        function: "serving_refresh",
        problem: format!(
            "'{shown}' is a Fluss table, which is followed, not refreshed: serving_follow('{shown}') applies its \
             changelog from the position the layer records, serving_build('{shown}') reads it anew"
        ),
    }
}

/// A layer built from a Paimon (or Fluss) table moves with that table only: a local change set
/// would make it diverge from it, and the next change to such an order could not be applied.
fn refuse_local_changes_on_lake(conn: &Connection, raw: &str, origin: &Origin, access: &Access) -> Result<()> {
    if !matches!(origin, Origin::Relation(_)) {
        return Ok(());
    }
    let source: Option<String> = match conn.query_row(&format!("SELECT source FROM {META}"), [], |r| r.get(0)) {
        Ok(s) => s,
        Err(e) => {
            return match not_built("serving_refresh", e) {
                // Not built: the source's own problems are reported first, then that.
                Error::NotBuilt { .. } => Ok(()),
                other => Err(other),
            };
        }
    };
    if let Some(table) = source.as_deref().filter(|s| crate::core::stream::is_fluss(s)) {
        return Err(Error::Refused {
            function: "serving_refresh",
            problem: format!(
                "the serving layer is served from the Fluss table '{table}', so a local change set ('{raw}') would \
                 make it diverge from that table; write the change to it and follow it (serving_follow('{table}')), \
                 or serving_build('{raw}') to serve that source instead"
            ),
        });
    }
    match source.as_deref().and_then(|s| Origin::lake_path(s, &access.sandbox)) {
        None => Ok(()),
        Some(lake) => Err(Error::Refused {
            function: "serving_refresh",
            problem: format!(
                "the serving layer is served from the Paimon table '{lake}', so a local change set ('{raw}') would \
                 make it diverge from the lake; retract in the lake (write the change, e.g. a -D row, to that table) \
                 and refresh or follow from it, or serving_build('{raw}') to serve that source instead"
            ),
        }),
    }
}

/// A lake refresh whose held snapshot is no longer the table's history (`serving::history`):
/// the layer is rebuilt from the latest snapshot `src` reads, at the place and under the source
/// serving_meta records, in the caller's transaction, and `why` is recorded. A rebuild that
/// fails says what was held and what to run.
fn rebuild(
    conn: &Connection,
    src: &ResolvedSource,
    (map, policy): (Option<&ColumnMap>, OnBadRows),
    why: &str,
    tx: &mut Transaction,
    started: Instant,
) -> Result<RefreshSummary> {
    let (source, refreshes, place): (String, i64, Place) = conn
        .query_row(&format!("SELECT source, refreshes, serving_catalog, serving_schema FROM {META}"), [], |r| {
            Ok((r.get(0)?, r.get(1)?, Place { catalog: r.get(2)?, schema: r.get(3)? }))
        })
        .map_err(|e| not_built("serving_refresh", e))?;
    let built = tx.run(conn, || {
        layer::build_from(conn, &place, src, &source, src.lake_snapshot, map, policy)?;
        conn.execute(
            &format!(
                "UPDATE {} SET refreshed_at = make_timestamp(?), refresh_source = ?, refreshes = ?, rebuilt_because = ?",
                place.of(META)
            ),
            duckdb::params![now_micros(), src.raw, refreshes + 1, why],
        )
        .map_err(|e| Error::duckdb("serving_refresh: writing serving_meta", &e))?;
        layer::summarize(conn, &place, &source, src.lake_snapshot, started)
    });
    let summary = built.map_err(|e| {
        if src.any_order {
            AnyOrder::reset(conn);
        }
        let e = layer::explain_load_failure(conn, e, policy);
        Error::Refused {
            function: "serving_refresh",
            problem: crate::serving::history::cannot_rebuild(why, &source, &e.to_string()),
        }
    })?;
    Ok(RefreshSummary {
        fct_rows: summary.fct_rows,
        mart_rows: summary.mart_rows,
        source: src.raw.clone(),
        lake_snapshot: summary.lake_snapshot,
        elapsed_ms: elapsed_ms(started),
        rebuilt_because: Some(why.to_string()),
        quarantined: summary.quarantined,
        ..Default::default()
    })
}
