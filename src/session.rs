//! The extension's own connection to one database, and its release when the database closes.
//!
//! Table functions need to run SQL (CREATE TABLE, prepared queries). The C API gives no way
//! to run SQL on the caller's ClientContext, so during LOAD we clone a connection from the
//! entrypoint's one and pass it to every function as extra info (one per database: a global
//! would write into the wrong database when several are open).
//!
//! That connection keeps the DatabaseInstance alive. If nothing released it, closing the
//! user's last connection would leave the file locked, the WAL un-checkpointed and a same-process
//! reopen waiting forever. So a watchdog thread asks DuckDB, a few times per second, how many
//! connections the instance has (`duckdb_connection_count()`); once ours is the only one, no
//! user can reach this instance any more, and the watchdog drops our connection. That destroys
//! the instance: DuckDB checkpoints, releases the lock and frees memory.
//!
//! Limitation (documented in the README): a C API user who disconnects every connection but
//! keeps the `duckdb_database` handle and connects again later gets `Error::Closed`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use duckdb::Connection;

use crate::error::{Error, Result};

/// How often the watchdog looks. Short enough that a same-process reopen barely waits.
const WATCH_INTERVAL: Duration = Duration::from_millis(20);

struct Held(Connection);

// SAFETY: a DuckDB connection may be used from any thread as long as it is not used by two
// threads at once; every access goes through the `Mutex` in `Session`.
unsafe impl Send for Held {}

pub struct Session {
    conn: Mutex<Option<Held>>,
}

/// What each registered function receives as extra info.
pub type SharedSession = Arc<Session>;

impl Session {
    /// Wraps a connection cloned during the entrypoint and starts its watchdog.
    pub fn start(conn: Connection) -> SharedSession {
        let session = Arc::new(Session { conn: Mutex::new(Some(Held(conn))) });
        let weak = Arc::downgrade(&session);
        let spawned = thread::Builder::new().name("streamhouse-watchdog".into()).spawn(move || loop {
            thread::sleep(WATCH_INTERVAL);
            let Some(session) = weak.upgrade() else { return };
            if session.release_if_alone() {
                return;
            }
        });
        if spawned.is_err() {
            // Without a watchdog we cannot release the instance; refuse to hold it at all.
            session.lock().take();
        }
        session
    }

    fn lock(&self) -> MutexGuard<'_, Option<Held>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops our connection when it is the instance's last one. Returns true once released.
    fn release_if_alone(&self) -> bool {
        // A busy connection is serving a query for some user connection: not alone.
        let Ok(mut guard) = self.conn.try_lock() else { return false };
        let Some(held) = guard.as_ref() else { return true };
        let count: std::result::Result<u64, _> =
            held.0.query_row("SELECT count FROM duckdb_connection_count()", [], |r| r.get(0));
        match count {
            Ok(n) if n > 1 => false,
            // n <= 1, or the instance is shutting down: let go either way.
            _ => {
                let held = guard.take();
                drop(guard);
                drop(held);
                true
            }
        }
    }

    /// Runs `f` with exclusive use of the extension's connection.
    pub fn with<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        let guard = self.lock();
        match guard.as_ref() {
            Some(held) => f(&held.0),
            None => Err(Error::Closed),
        }
    }
}
