//! `serving_meta`, the one row a layer keeps about itself, and what every operation asks of it or
//! of the session first: where the layer lives (`current_place` for a build, `served_place` for
//! everything after), whether it is built (`require_built`, and `not_built`, which turns DuckDB's
//! catalog and binder errors about the layer's tables into "run serving_build"), whether the
//! database is writable, the source as the layer records it, a new generation, and the clock.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, Error, Result};
use crate::core::quarantine::QUARANTINE;
use crate::core::schema::{Place, COUNTS, FACT, MART, META};

/// Milliseconds since `started`, to the microsecond (no float noise such as 44.654382999999996).
pub fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_micros() as f64 / 1e3
}

pub fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// A new `serving_meta.generation`: which state of the layer the row describes. Random, never
/// a counter: a mart cached under a generation (`mart_table`) must never match a state someone
/// else wrote (another process, a rebuild, a rolled-back refresh whose number would come again).
pub fn new_generation() -> i64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (h.finish() >> 1) as i64
}

/// Which state of the layer serving_meta describes (`new_generation`; NULL on a layer of an
/// older release).
pub fn generation(conn: &Connection, function: &'static str) -> Result<Option<i64>> {
    conn.query_row(&format!("SELECT generation FROM {META}"), [], |r| r.get(0)).map_err(|e| not_built(function, e))
}

/// The catalog and schema a build writes into: the session's current ones (where an
/// unqualified CREATE TABLE would land).
pub fn current_place(conn: &Connection) -> Result<Place> {
    conn.query_row("SELECT current_database(), current_schema()", [], |r| {
        Ok(Place { catalog: r.get(0)?, schema: r.get(1)? })
    })
    .map_err(|e| Error::duckdb("serving: finding the current schema", &e))
}

/// Where the layer the caller sees lives: the place its `serving_meta` (found on the caller's
/// search path) records. Every reader names the layer's tables there, so a same-named table
/// elsewhere on the search path (a dbt model, `USE other`) never answers for it.
pub fn served_place(conn: &Connection, function: &'static str) -> Result<Place> {
    // Prepared afresh each time: a cached statement keeps the serving_meta it was bound to, and
    // DuckDB 1.5 does not bind it again when the caller's search_path moves to another layer.
    let recorded: (Option<String>, Option<String>) = conn
        .query_row(&format!("SELECT serving_catalog, serving_schema FROM {META}"), [], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(|e| not_built(function, e))?;
    match recorded {
        (Some(catalog), Some(schema)) => Ok(Place { catalog, schema }),
        _ => current_place(conn),
    }
}

/// Where the layer lives, per caller `search_path`, as `served_place` last found it: the
/// dashboard's hot path names the layer's tables without asking `serving_meta` each call. An
/// entry holds while no write of ours has committed since it was found (`Session::commits`: a
/// build is the only thing that moves a layer, and it is ours); a changed search_path is another
/// key. What no write of ours does — a user's own DDL on `serving_meta` — is seen at the next
/// commit of ours; a statement that fails on the cached place drops the entry and asks again.
#[derive(Default)]
pub struct PlaceCache(std::sync::Mutex<Vec<(String, u64, Place)>>);

/// How many search paths' places are kept (the oldest forgotten first).
const CACHED_PLACES: usize = 16;

impl PlaceCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<(String, u64, Place)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The place found for `search_path` while `commits` writes had committed, if still current.
    pub fn get(&self, search_path: &str, commits: u64) -> Option<Place> {
        self.entries().iter().find(|(p, c, _)| p == search_path && *c == commits).map(|(_, _, place)| place.clone())
    }

    /// Remembers `place`, found for `search_path` after reading `commits`.
    pub fn remember(&self, search_path: &str, commits: u64, place: Place) {
        let mut entries = self.entries();
        entries.retain(|(p, _, _)| p != search_path);
        if entries.len() >= CACHED_PLACES {
            entries.remove(0);
        }
        entries.push((search_path.to_string(), commits, place));
    }

    pub fn forget(&self, search_path: &str) {
        self.entries().retain(|(p, _, _)| p != search_path);
    }
}

/// Fails with NotBuilt unless a build has created the serving tables.
pub fn require_built(conn: &Connection, function: &'static str) -> Result<()> {
    let place = served_place(conn, function)?;
    conn.query_row(&format!("SELECT count(*) FROM {} LIMIT 1", place.of(COUNTS)), [], |r| r.get::<_, i64>(0))
        .map(|_| ())
        .map_err(|e| not_built(function, e))
}

/// Whether the current database was opened read-only (an attached one too).
pub fn read_only(conn: &Connection) -> bool {
    conn.query_row("SELECT readonly FROM duckdb_databases() WHERE database_name = current_database()", [], |r| {
        r.get::<_, bool>(0)
    })
    .unwrap_or(false)
}

/// A writer on a read-only database says so before it reads any source.
pub fn refuse_read_only(conn: &Connection, function: &'static str) -> Result<()> {
    if !read_only(conn) {
        return Ok(());
    }
    let name: String = conn.query_row("SELECT current_database()", [], |r| r.get(0)).unwrap_or_default();
    Err(Error::Refused {
        function,
        problem: format!(
            "the database '{name}' is read-only, and {function} writes the serving tables; open it read-write \
             (readers such as serving_dashboard, serving_status and serving_reconcile work read-only)"
        ),
    })
}

/// The source as the layer records it: a local Paimon table (`lake`, the path the source
/// names) as `paimon:<absolute directory>`, so that refresh, follow and status reach the same
/// table after the process changes its working directory; anything else as given.
pub fn recorded_source(raw: &str, lake: Option<&str>) -> String {
    match lake {
        Some(path) if !crate::core::location::is_remote(path) => {
            let local = crate::core::location::local_path(path);
            match std::path::absolute(local) {
                Ok(abs) => format!("paimon:{}", abs.display()),
                Err(_) => raw.to_string(),
            }
        }
        _ => raw.to_string(),
    }
}

/// Bookkeeping columns added after the first release of the serving layout.
const LATER_COLUMNS: [&str; 15] = [
    "serving_catalog",
    "serving_schema",
    "generation",
    "fct_rows",
    "order_days",
    "lake_snapshot_millis",
    "rebuilt_because",
    "columns",
    "stream_position",
    "stream_lake",
    "stream_read",
    "fact_snapshot",
    "fact_commit_millis",
    "on_bad_rows",
    "quarantined",
];

/// DuckDB's error about the layer's tables as what it means: not built yet (a serving table is
/// missing), built by an older release (a bookkeeping column is missing), or anything else.
pub fn not_built(function: &'static str, e: duckdb::Error) -> Error {
    let msg = clean_duckdb_message(&e);
    if msg.contains("Catalog Error") && [MART, FACT, META, COUNTS, QUARANTINE].iter().any(|t| msg.contains(t)) {
        Error::NotBuilt { function }
    } else if msg.contains("Binder Error") && LATER_COLUMNS.iter().any(|c| msg.contains(c)) {
        Error::Refused {
            function,
            problem: format!(
                "the serving tables were built by an older streamhouse (their layout lacks a column this \
                 version keeps); run serving_build(source) again ({msg})"
            ),
        }
    } else {
        Error::DuckDb { context: function.into(), message: msg }
    }
}
