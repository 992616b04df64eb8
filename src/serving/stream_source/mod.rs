//! A Fluss primary-key table as the source of the serving layer: the union read of a build and
//! the changelog a follower applies.
//!
//! A build reads (1) the lake snapshot Fluss's tiering committed for the table — the Paimon
//! table of the same path, read by streamhouse's own lake reader at exactly that snapshot, Fluss's
//! system columns `__bucket`, `__offset`, `__timestamp` left out — and (2) every bucket's
//! changelog from the offset that snapshot holds up to the end offsets taken when the build
//! starts, then keeps the last change per key and applies it onto (1) as a refresh, all in one
//! transaction: no row missed, none twice, and the build finishes. A table without tiering is
//! read from its changelog alone, which must then still start at offset 0.
//!
//! The layer records where each bucket's log was read up to (`serving_meta.stream_position`),
//! so a follower tails the log from exactly there (`follow_stream`), each batch one atomic
//! retraction-exact refresh.

use std::time::{Duration, Instant};

use duckdb::arrow::record_batch::RecordBatch as Batch60;
use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::mapping::ColumnMap;
use crate::core::quarantine::OnBadRows;
use crate::core::quote;
use crate::core::schema::{self, Place, META};
use crate::core::stream::{self, FlussAddress};
use crate::fluss::log::{Polled, Tail, BUCKET, KIND, OFFSET};
use crate::fluss::table::{self, Facts, Position};
use crate::fluss::Site;
use crate::host::transaction::Transaction;
use crate::lake::Access;
use crate::serving::layer::{self, BuildSummary};
use crate::serving::meta::{current_place, not_built, refuse_read_only};
use crate::serving::source::BuildRequest;
use crate::serving::source::{describe, AnyOrder, ResolvedSource};
use crate::serving::{lake_source, mapped, refresh};

pub mod check;
pub mod scan;

/// Where the changelog read by a build or an apply is staged, and its last change per key.
const LOG: &str = "__sh_fluss_log";
const CHANGES: &str = "__sh_fluss_changes";
/// How long a build may take to read the changelog up to its end offsets.
const LOG_READ_LIMIT: Duration = Duration::from_secs(120);

/// The Fluss address in `raw`, or a BadSource naming what is wrong with it.
pub fn address(raw: &str) -> Result<FlussAddress> {
    stream::parse(raw).map_err(|reason| Error::BadSource { source: stream::redacted(raw), reason })
}

/// The table's columns a read decodes: the four serving columns (by name, any case), or the
/// key and what the map uses; the key first.
fn read_columns(raw: &str, facts: &Facts, map: Option<&ColumnMap>) -> Result<Vec<String>> {
    match map {
        Some(map) => {
            let key = map.key_column(&facts.columns).ok_or_else(|| Error::BadArgument {
                function: "serving_build",
                parameter: "columns",
                value: map.exprs[0].clone().unwrap_or_else(|| "order_id".into()),
                problem: format!(
                    "for a Fluss table order_id must be its primary key column, by name (the table's key is {})",
                    facts.primary_keys.join(", ")
                ),
            })?;
            let mut cols = vec![key.clone()];
            cols.extend(map.inputs(&facts.columns).into_iter().filter(|c| *c != key).cloned());
            Ok(cols)
        }
        None => {
            let typed: Vec<(String, String)> = facts.columns.iter().map(|c| (c.clone(), "ANY".into())).collect();
            let find = |want: &str| typed.iter().find(|(n, _)| n.eq_ignore_ascii_case(want)).map(|(n, _)| n.clone());
            crate::core::mapping::SERVING
                .iter()
                .map(|want| {
                    find(want).ok_or_else(|| Error::MissingColumn {
                        source: raw.into(),
                        column: want,
                        found: facts.columns.clone(),
                    })
                })
                .collect()
        }
    }
}

/// Refuses what a serving source cannot be: a log table (no primary key), a partitioned table,
/// a key that is not the serving key.
fn check_table(site: &Site, facts: &Facts, key: &str) -> Result<()> {
    let refuse = |problem: String| Error::Fluss { function: site.function, table: site.address.uri(), problem };
    if facts.primary_keys.is_empty() {
        return Err(refuse(
            "it is a log table without a primary key; streamhouse serves a primary-key table (one merged row per \
             order): create it with PRIMARY KEY (order_id) NOT ENFORCED"
                .into(),
        ));
    }
    if facts.partitioned {
        return Err(refuse("it is partitioned, which streamhouse does not read yet".into()));
    }
    if facts.primary_keys.len() != 1 || !facts.primary_keys[0].eq_ignore_ascii_case(key) {
        return Err(refuse(format!(
            "its primary key is ({}), but order_id is read from '{key}': the serving key must be the table's key",
            facts.primary_keys.join(", ")
        )));
    }
    Ok(())
}

/// The Paimon table Fluss tiers this table into: `<warehouse>/<database>.db/<table>`, the
/// warehouse given (`lake :=`) or the cluster's `datalake.paimon.warehouse`.
pub fn lake_path(site: &Site, given: Option<&str>) -> Result<String> {
    let warehouse = match given {
        Some(w) => w.trim().trim_start_matches("paimon:").to_string(),
        None => table::lake_warehouse(site)?.ok_or_else(|| {
            site.err(
                "the table is tiered into Paimon but the cluster does not tell its warehouse; give it: \
                 lake := '<datalake.paimon.warehouse>'",
            )
        })?,
    };
    let warehouse = warehouse.trim_start_matches("file://").trim_end_matches('/');
    let table = format!("{}.db/{}", site.address.database, site.address.table);
    // A layer records the table's own directory (`serving_meta.stream_lake`), and a follower's
    // rebuild hands that back: it is the table already, never joined onto again.
    if warehouse.ends_with(&format!("/{table}")) {
        return Ok(warehouse.to_string());
    }
    Ok(format!("{warehouse}/{table}"))
}

/// Stages changelog batches into `LOG` (its columns as the batches bring them) and the last
/// change per key into `CHANGES` (the read columns, then `deleted`). False: nothing arrived.
fn stage_log(conn: &Connection, read: &[String], batches: &[Batch60]) -> Result<bool> {
    let failed = |e: duckdb::Error| Error::duckdb("serving: staging the Fluss changelog", &e);
    let Some(first) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(false) };
    conn.execute_batch(&crate::serving::source::temp_table_for(LOG, &first.schema())).map_err(failed)?;
    {
        let mut appender = conn.appender(LOG).map_err(failed)?;
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            appender.append_record_batch(b.clone()).map_err(failed)?;
        }
        appender.flush().map_err(failed)?;
    }
    let key = quote::ident(&read[0]);
    let others: String =
        read[1..].iter().map(|c| format!("CASE WHEN gone THEN NULL ELSE {0} END AS {0}, ", quote::ident(c))).collect();
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TEMP TABLE {CHANGES} AS \
         SELECT {key}, {others}gone AS deleted FROM ( \
             SELECT *, {KIND} IN ('-D', '-U') AS gone, \
                    row_number() OVER (PARTITION BY {key} ORDER BY {BUCKET}, {OFFSET} DESC) AS latest FROM {LOG}) \
         WHERE latest = 1; \
         DROP TABLE {LOG}"
    ))
    .map_err(failed)?;
    Ok(true)
}

/// The staged change set as a refresh source, seen through the map.
fn changes_source(conn: &Connection, raw: &str, map: Option<&ColumnMap>) -> Result<ResolvedSource> {
    let (relation, tolerant, mut columns) = match map {
        Some(map) => mapped::wrap(conn, raw, CHANGES, map)?.into_parts(),
        None => (CHANGES.to_string(), None, schema::match_columns(raw, &describe(conn, raw, CHANGES)?)?),
    };
    columns.deleted = Some(quote::ident("deleted"));
    Ok(ResolvedSource { tolerant, ..ResolvedSource::relation(raw, relation, columns) })
}

/// What a union read found: where it started, where it ended (with the marks of the last
/// records read), the lake part, and what `serving_meta.stream_read` records about it.
pub struct UnionRead {
    pub lake: Option<(i64, String)>,
    pub start: Position,
    pub end: Position,
    pub how: String,
    /// The table's columns read (the key first) and its buckets, for the spot check.
    columns: Vec<String>,
    buckets: i32,
}

/// A lake snapshot found to disagree with what Fluss holds: its id and the order that showed it.
type Distrusted = Option<(i64, String)>;

/// The spot check of a union read just loaded at `place` (`check`): None when it read
/// no lake part or the lake part agrees with Fluss; the lake snapshot and why otherwise.
fn spot_check(
    conn: &Connection,
    site: &Site,
    place: &Place,
    raw: &str,
    map: Option<&ColumnMap>,
    read: &UnionRead,
) -> Result<Distrusted> {
    let Some((snapshot, _)) = &read.lake else { return Ok(None) };
    let checked = check::CheckedRead { site, raw, map, columns: &read.columns, buckets: read.buckets, end: &read.end };
    let why = check::disagreement(conn, place, &checked)?;
    Ok(why.map(|why| (*snapshot, why)))
}

/// `serving_build('fluss://...')` inside `tx` (left open for the caller to commit).
pub fn build(
    conn: &Connection,
    req: &BuildRequest,
    address: &FlussAddress,
    tx: &mut Transaction,
) -> Result<BuildSummary> {
    let BuildRequest { raw, map, lake, access, replace, policy, .. } = *req;
    let started = Instant::now();
    refuse_read_only(conn, "serving_build")?;
    let site = Site::new("serving_build", address.clone(), &access.sandbox)?;
    if !replace {
        layer::refuse_foreign_tables(conn, &current_place(conn)?)?;
    }
    let recorded = address.uri();
    let mut distrusted: Distrusted = None;
    loop {
        let why = distrusted.as_ref().map(|(snapshot, why)| (*snapshot, why.as_str()));
        let (base, changes, read) = union_read(conn, &site, raw, map, lake, access, why)?;
        let summary = tx.run(conn, || {
            let place = current_place(conn)?;
            layer::build_from(conn, &place, &base, &recorded, read.lake.as_ref().map(|l| l.0), map, policy)?;
            if let Some(changes) = &changes {
                refresh::apply_changes(conn, changes, Instant::now())?;
            }
            if let Some(disagreed) = spot_check(conn, &site, &place, raw, map, &read)? {
                return Ok(Err(disagreed));
            }
            record(conn, &place, &read)?;
            layer::summarize(conn, &place, &recorded, read.lake.as_ref().map(|l| l.0), started).map(Ok)
        });
        match summary {
            Ok(Ok(summary)) => return Ok(summary),
            // Read again without the lake part (its second read has none to check).
            Ok(Err(disagreed)) => {
                std::mem::take(tx).rollback(conn);
                distrusted = Some(disagreed);
            }
            Err(e) => {
                if base.any_order {
                    AnyOrder::reset(conn);
                }
                return Err(layer::explain_load_failure(conn, e, policy));
            }
        }
    }
}

/// Reads the lake part and the changelog after it: the lake source (or an empty one), the
/// staged change set (None: the log had nothing after the lake), and the positions.
fn union_read(
    conn: &Connection,
    site: &Site,
    raw: &str,
    map: Option<&ColumnMap>,
    lake: Option<&str>,
    access: &Access,
    distrusted: Option<(i64, &str)>,
) -> Result<(ResolvedSource, Option<ResolvedSource>, UnionRead)> {
    let facts = table::facts(site)?;
    if let Some(map) = map {
        mapped::refuse_unknown_names(conn, map, &facts.columns)?;
    }
    let read = read_columns(raw, &facts, map)?;
    check_table(site, &facts, &read[0])?;
    let (mut start, end, earliest) = table::union_plan(site, &facts)?;
    if let Some((snapshot, why)) = distrusted {
        start = table::log_alone(snapshot, &earliest, why).map_err(|problem| site.err(problem))?;
    }
    let (base, lake_part) = match &start.lake {
        Some(point) => {
            let path = lake_path(site, lake)?;
            let src = lake_source::resolve_at(conn, raw, &path, point.snapshot, &read, map, access)?;
            (Some(src), Some((point.snapshot, path)))
        }
        None => (None, None),
    };
    let mut tail = Tail::read_from(site, &read, facts.buckets, &start.offsets, Some(&earliest))?;
    let batches = tail.read_until(site, &end, LOG_READ_LIMIT)?;
    // Read up to the end offsets; marked with the last record read below them.
    let end = Position { marks: tail.position.marks.clone(), ..end };
    let staged = stage_log(conn, &read, &batches)?;
    let base = match base {
        Some(b) => b,
        None if staged => {
            let mut empty = changes_source(conn, raw, map)?;
            empty.relation = format!("(SELECT * FROM {} WHERE false) AS nothing_tiered", empty.relation);
            empty.tolerant = empty.tolerant.map(|t| format!("(SELECT * FROM {t} WHERE false) AS nothing_tiered"));
            empty.columns.deleted = None;
            empty
        }
        None => ResolvedSource::empty(raw, "empty")?,
    };
    let changes = if staged { Some(changes_source(conn, raw, map)?) } else { None };
    let (columns, buckets) = (read, facts.buckets);
    Ok((base, changes, UnionRead { lake: lake_part, start: start.offsets, end, how: start.how, columns, buckets }))
}

/// Records the Fluss position (and where the lake part came from) in serving_meta.
pub fn record(conn: &Connection, place: &Place, read: &UnionRead) -> Result<()> {
    conn.execute(
        // The changelog applied onto the lake part is part of the build, not a refresh of it.
        &format!(
            "UPDATE {} SET stream_position = ?, stream_lake = ?, stream_read = ?, refreshes = 0, refreshed_at = NULL, \
             refresh_source = NULL",
            place.of(META)
        ),
        duckdb::params![read.end.encode(), read.lake.as_ref().map(|l| l.1.clone()), read.how],
    )
    .map(|_| ())
    .map_err(|e| Error::duckdb("serving: writing serving_meta", &e))
}

/// How long a follower's tick waits for new records.
const TICK_WAIT: Duration = Duration::from_millis(50);

/// What the layer records about its Fluss source.
struct Recorded {
    position: Position,
    map: Option<ColumnMap>,
    lake: Option<String>,
    place: Place,
    policy: OnBadRows,
}

fn recorded(conn: &Connection, function: &'static str) -> Result<Recorded> {
    type Row = (Option<String>, Option<String>, Option<String>, String, String, Option<String>);
    let (position, map, lake, catalog, schema, policy): Row = conn
        .query_row(
            &format!(
                "SELECT stream_position, columns, stream_lake, serving_catalog, serving_schema, on_bad_rows FROM {META}"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
        )
        .map_err(|e| not_built(function, e))?;
    let position = position.as_deref().and_then(Position::decode).ok_or_else(|| Error::Refused {
        function,
        problem: "serving_meta records no Fluss log position; run serving_build('fluss://...') again".into(),
    })?;
    Ok(Recorded {
        position,
        map: map.as_deref().and_then(ColumnMap::decode),
        lake,
        place: Place { catalog, schema },
        policy: OnBadRows::recorded(policy.as_deref()),
    })
}

/// A running follower's view of its Fluss table: the scanner, kept open between ticks.
struct Follow {
    site: Site,
    raw: String,
    access: Access,
    facts: Facts,
    read: Vec<String>,
    tail: Option<Tail>,
    /// The recorded position was just written by this follower's own rebuild: it is opened
    /// without the check of its marks (a bucket the rebuild could not mark would otherwise
    /// rebuild again at once). Cleared by any failed tick.
    fresh: bool,
}

/// Checks that the layer was built from `raw` and returns the follower's tick.
pub fn follower(
    conn: &Connection,
    raw: &str,
    address: &FlussAddress,
    access: &Access,
) -> Result<crate::serving::follow::Apply> {
    let site = Site::new("serving_follow", address.clone(), &access.sandbox)?;
    let built: Option<String> = conn
        .query_row(&format!("SELECT source FROM {META}"), [], |r| r.get(0))
        .map_err(|e| not_built("serving_follow", e))?;
    if built.as_deref().and_then(|b| stream::parse(b).ok()) != Some(address.clone()) {
        return Err(Error::Refused {
            function: "serving_follow",
            problem: format!(
                "the serving layer was built from '{}', not from '{}'; run serving_build('{}') first",
                built.unwrap_or_default(),
                address.uri(),
                address.uri()
            ),
        });
    }
    let rec = recorded(conn, "serving_follow")?;
    let facts = table::facts(&site)?;
    let read = read_columns(raw, &facts, rec.map.as_ref())?;
    let mut state =
        Follow { site, raw: raw.to_string(), access: access.clone(), facts, read, tail: None, fresh: false };
    Ok(Box::new(move |c| {
        let outcome = tick(c, &mut state);
        if outcome.is_err() {
            // Reopened from the recorded position at the next tick, and checked.
            state.tail = None;
            state.fresh = false;
        }
        outcome
    }))
}

/// One tick: the records that arrived, applied as one refresh with the new position. A log
/// that no longer holds the position — cleaned, shorter after a lost write, or holding other
/// records at offsets the layer applied (`Tail::resume` checks the marks) — rebuilds by union
/// read, and so does a position whose offsets cannot be checked (no marks).
fn tick(conn: &Connection, state: &mut Follow) -> Result<Option<i64>> {
    let rec = recorded(conn, "serving_follow")?;
    if state.tail.is_none() {
        let earliest = table::earliest_offsets(&state.site, state.facts.buckets)?;
        let end = table::end_offsets(&state.site, state.facts.buckets)?;
        if let Some(why) = rec.position.lost(&earliest, &end) {
            return rebuild(conn, state, &rec, &why).map(Some);
        }
        if let Some(why) = rec.position.uncheckable(&earliest).filter(|_| !state.fresh) {
            return rebuild(conn, state, &rec, &why).map(Some);
        }
        let check = !state.fresh;
        state.tail = Some(Tail::resume(&state.site, &state.read, state.facts.buckets, &rec.position, check)?);
    }
    let tail = state.tail.as_mut().expect("opened above");
    let batches = match tail.poll(&state.site, TICK_WAIT)? {
        Polled::Batches(batches) => batches,
        Polled::Reused(why) => return rebuild(conn, state, &rec, &why).map(Some),
    };
    if batches.iter().all(|b| b.num_rows() == 0) {
        // Quiet: make sure the log still holds what was applied (Fluss can lose acknowledged
        // writes when a lone tablet server dies; the offsets are then reused).
        let end = table::end_offsets(&state.site, state.facts.buckets)?;
        if let Some(why) = rec.position.lost(&Position::default(), &end) {
            return rebuild(conn, state, &rec, &why).map(Some);
        }
        return Ok(None);
    }
    let position = tail.position.clone();
    stage_log(conn, &state.read, &batches)?;
    let changes = changes_source(conn, &state.raw, rec.map.as_ref())?;
    let mut tx = Transaction::new();
    let done = tx.run(conn, || {
        refresh::apply_changes(conn, &changes, Instant::now())?;
        // The apply above counted the refresh and stamped its time: one tick, one refresh.
        conn.execute(
            &format!("UPDATE {} SET stream_position = ?, refresh_source = source", rec.place.of(META)),
            duckdb::params![position.encode()],
        )
        .map_err(|e| Error::duckdb("serving_follow: recording the Fluss position", &e))?;
        Ok(())
    });
    match done {
        Ok(()) => tx.commit(conn)?,
        Err(e) => {
            tx.rollback(conn);
            return Err(layer::explain_load_failure(conn, e, rec.policy));
        }
    }
    Ok(Some(position.total()))
}

/// Rebuilds the followed layer by a union read, at its place, with its map; records why.
fn rebuild(conn: &Connection, state: &mut Follow, rec: &Recorded, why: &str) -> Result<i64> {
    state.tail = None;
    state.fresh = false;
    let recorded = state.site.address.uri();
    let mut distrusted: Distrusted = None;
    let read = loop {
        let lake = rec.lake.as_deref();
        let distrust = distrusted.as_ref().map(|(snapshot, why)| (*snapshot, why.as_str()));
        let (base, changes, read) =
            union_read(conn, &state.site, &state.raw, rec.map.as_ref(), lake, &state.access, distrust)?;
        let mut tx = Transaction::new();
        let done = tx.run(conn, || {
            let lake_snapshot = read.lake.as_ref().map(|l| l.0);
            layer::build_from(conn, &rec.place, &base, &recorded, lake_snapshot, rec.map.as_ref(), rec.policy)?;
            if let Some(changes) = &changes {
                refresh::apply_changes(conn, changes, Instant::now())?;
            }
            if let Some(disagreed) = spot_check(conn, &state.site, &rec.place, &state.raw, rec.map.as_ref(), &read)? {
                return Ok(Some(disagreed));
            }
            record(conn, &rec.place, &read)?;
            conn.execute(&format!("UPDATE {} SET rebuilt_because = ?", rec.place.of(META)), duckdb::params![why])
                .map(|_| None)
                .map_err(|e| Error::duckdb("serving_follow: recording the rebuild", &e))
        });
        match done {
            Ok(None) => {
                tx.commit(conn)?;
                break read;
            }
            Ok(Some(disagreed)) => {
                tx.rollback(conn);
                distrusted = Some(disagreed);
            }
            Err(e) => {
                tx.rollback(conn);
                return Err(layer::explain_load_failure(conn, e, rec.policy));
            }
        }
    };
    state.fresh = true;
    Ok(read.end.total())
}

/// The Fluss position of a layer built from a Fluss table (recorded locally: known while the
/// cluster is down) and how far the table's log is beyond it (None when the cluster does not
/// answer); None when not a Fluss layer. For serving_status.
pub fn lag(source: &str, recorded_position: Option<&str>, access: &Access) -> Option<(i64, Option<i64>)> {
    stream::parse(source).ok()?;
    let position = Position::decode(recorded_position?)?;
    Some((position.total(), behind(source, &position, access)))
}

fn behind(source: &str, position: &Position, access: &Access) -> Option<i64> {
    let site = Site::new("serving_status", stream::parse(source).ok()?, &access.sandbox).ok()?;
    let buckets = position.offsets.keys().max().map_or(0, |b| b + 1);
    let end = table::end_offsets(&site, buckets).ok()?;
    Some(position.behind(&end))
}
