//! The extension's own connection to one database, and its release when the database closes.
//!
//! Table functions need to run SQL (CREATE TABLE, prepared queries). The C API gives no way
//! to run SQL on the caller's ClientContext, so during LOAD we clone a connection from the
//! entrypoint's one and pass it to every function as extra info (one per database: a global
//! would write into the wrong database when several are open).
//!
//! That connection keeps the DatabaseInstance alive (and, since the instance owns our function
//! entries which own the session, nothing would ever break the cycle). Left alone, closing the
//! user's last connection would keep the file locked, the WAL un-checkpointed, and a
//! same-process reopen waiting forever. So:
//! - a watchdog thread asks DuckDB every few milliseconds how many connections the instance
//!   has (`duckdb_connection_count()`); once ours is the only one on two looks in a row, no
//!   user can reach this instance any more and the watchdog drops our connection, which
//!   destroys the instance: DuckDB checkpoints, releases the lock and frees memory;
//! - at process exit nothing of ours may run DuckDB code (its static state is being torn down;
//!   a checkpoint there crashed the CLI), so a process that exits without closing leaves its
//!   last changes in the WAL, which DuckDB replays on the next open: nothing is lost.
//!
//! Limitation (documented in the README): a C API user who disconnects every connection but
//! keeps the `duckdb_database` handle and connects again later gets `Error::Closed`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread;
use std::time::{Duration, Instant};

use duckdb::Connection;

use crate::error::{Error, Result};
use crate::quote;

/// How often the watchdog looks; it bounds how long a closed database stays open. Soon after
/// the extension was used (when a close is likely to follow) it looks often; idle, rarely.
const WATCH_BUSY: Duration = Duration::from_millis(2);
const WATCH_IDLE: Duration = Duration::from_millis(25);
const BUSY_FOR: Duration = Duration::from_secs(2);

struct Held {
    conn: Connection,
    /// The caller's search_path last applied to `conn`, so it is set only when it changes.
    search_path: Option<String>,
}

// SAFETY: a DuckDB connection may be used from any thread as long as it is not used by two
// threads at once; every access goes through the `Mutex` in `Session`.
unsafe impl Send for Held {}

pub struct Session {
    conn: Mutex<Option<Held>>,
    /// When a function last used the connection.
    last_used: Mutex<Instant>,
    /// When a look found our connection alone, if no look since found it in company.
    alone_since: Mutex<Option<Instant>>,
}

/// What each registered function receives as extra info.
pub type SharedSession = Arc<Session>;

static EXIT_HOOK: Once = Once::new();

/// Set at process exit. DuckDB's own static state is being torn down then, so the watchdog
/// must not start destroying an instance (running DuckDB code) any more.
static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_exit() {
    EXITING.store(true, Ordering::SeqCst);
}

impl Session {
    /// Wraps a connection cloned during the entrypoint and starts its watchdog.
    pub fn start(conn: Connection) -> SharedSession {
        let session = Arc::new(Session {
            conn: Mutex::new(Some(Held { conn, search_path: None })),
            last_used: Mutex::new(Instant::now()),
            alone_since: Mutex::new(None),
        });
        EXIT_HOOK.call_once(|| {
            // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
            unsafe { libc::atexit(note_exit) };
        });
        let weak = Arc::downgrade(&session);
        let spawned = thread::Builder::new().name("streamhouse-watchdog".into()).spawn(move || {
            let mut interval = WATCH_BUSY;
            loop {
                thread::sleep(interval);
                let Some(session) = weak.upgrade() else { return };
                if session.release_if_alone() {
                    return;
                }
                let idle = session.last_used.lock().map(|t| t.elapsed() > BUSY_FOR).unwrap_or(true);
                let confirming = session.alone_since.lock().map(|a| a.is_some()).unwrap_or(false);
                interval = if idle && !confirming { WATCH_IDLE } else { WATCH_BUSY };
            }
        });
        if spawned.is_err() {
            // Without a watchdog we could never release the instance; refuse to hold it at all.
            session.lock().take();
        }
        session
    }

    fn lock(&self) -> MutexGuard<'_, Option<Held>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops our connection when it is the instance's last one. Returns true once released.
    fn release_if_alone(&self) -> bool {
        if EXITING.load(Ordering::SeqCst) {
            return true;
        }
        // A busy connection is serving a query for some user connection: not alone.
        let Ok(mut guard) = self.conn.try_lock() else { return false };
        let Some(held) = guard.as_ref() else { return true };
        let count: std::result::Result<u64, _> = held
            .conn
            .prepare_cached("SELECT count FROM duckdb_connection_count()")
            .and_then(|mut s| s.query_row([], |r| r.get(0)));
        let mut alone_since = self.alone_since.lock().unwrap_or_else(|p| p.into_inner());
        match count {
            Ok(n) if n > 1 => {
                *alone_since = None;
                false
            }
            // Alone on one look is not enough: a same-process reopen may be between taking this
            // instance from DuckDB's instance cache and creating its connection, and would find
            // our extension released. Let go only if the previous look also found us alone and
            // no function ran since (a close/reopen/close between two looks runs one).
            Ok(_) if !alone_since.is_some_and(|t| self.last_used_before(t)) => {
                *alone_since = Some(Instant::now());
                false
            }
            // Alone twice, or the instance is shutting down: let go. Dropped under the lock, so
            // a concurrent call sees either a live connection or `Error::Closed`.
            _ => {
                drop(guard.take());
                true
            }
        }
    }

    fn last_used_before(&self, t: Instant) -> bool {
        self.last_used.lock().map(|u| *u < t).unwrap_or(true)
    }

    /// Runs `f` with exclusive use of the extension's connection, resolving names through the
    /// caller's `search_path` (so `USE other` or `SET search_path` mean the same to us).
    pub fn with<R>(&self, search_path: &str, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let mut guard = self.lock();
        let held = guard.as_mut().ok_or(Error::Closed)?;
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
        if held.search_path.as_deref() != Some(search_path) {
            let sql = if search_path.is_empty() {
                "RESET search_path".to_string()
            } else {
                format!("SET search_path = {}", quote::literal(search_path))
            };
            held.conn.execute_batch(&sql).map_err(|e| Error::duckdb("streamhouse: applying search_path", &e))?;
            held.search_path = Some(search_path.to_string());
        }
        f(&held.conn)
    }
}
