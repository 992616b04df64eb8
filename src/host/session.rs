//! The extension's own connections to one database, and their release when the database closes.
//!
//! Table functions need to run SQL (CREATE TABLE, prepared queries). The C API gives no way
//! to run SQL on the caller's ClientContext, so during LOAD we clone connections from the
//! entrypoint's one and pass them to every function as extra info (one set per database: a
//! global would write into the wrong database when several are open). Connections can only be
//! cloned during LOAD (the database handle behind the entrypoint's connection is gone after),
//! so the whole pool is made then:
//! - one **writer** connection: builds, refreshes and follow applies take it in turn;
//! - a few **reader** connections: dashboards, OLAP, explain, status and reconcile each take a
//!   free one, so they never queue behind a writer. DuckDB's MVCC gives each statement the last
//!   committed state, so a reader sees the layer before or after a refresh, never half of it.
//!
//! Those connections keep the DatabaseInstance alive after the user closes it. The invariant
//! this module keeps: **once the user's last connection is gone, this instance writes nothing
//! to the database file or its WAL** — a same-process reopen as a new instance (the CLI's
//! `.open`, Node's `DuckDBInstance.create`) may already be reading them. So:
//! - a watchdog thread asks DuckDB every few milliseconds how many connections the instance
//!   has (its decisions: `watchdog`, a pure state machine with its table of transitions); once
//!   ours have been the only ones for `QUIET`, it turns DuckDB's shutdown checkpoint
//!   off and drops our connections, which destroys the instance without a write (whatever the
//!   WAL holds, the next open replays, as after any process exit). If another instance of this
//!   process has the file open by then, the old one is not even destroyed (`Session::retire`):
//!   closing its descriptor would drop the new instance's file lock;
//! - what the WAL holds — streamhouse's writes and the user's own — is checkpointed while the
//!   user is still connected, once no call of ours has run and the WAL has not changed for
//!   `SETTLE_QUIET` (the watchdog's `Settle`; the user's writes show only as the WAL's size): a
//!   CHECKPOINT cannot run inside the caller's statement, and a script closes right after its
//!   last statement, so waiting keeps the checkpoint away from the instant of a close. DuckDB
//!   alone would fold the WAL in at the close; our connections postpone the close past it;
//! - at process exit (`exit`): in DuckDB's CLI, an instance the user has closed is let go of
//!   with DuckDB's shutdown checkpoint (no reopen can follow any more), on a thread of its own
//!   (the exiting thread's thread-locals are gone); then nothing of ours runs DuckDB code (its
//!   static state is being torn down; a checkpoint on the exiting thread crashed the CLI).
//!
//! Limitation (documented in the README): a C API user who disconnects every connection but
//! keeps the `duckdb_database` handle and connects again later gets `Error::Closed`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread;
use std::time::{Duration, Instant};

use duckdb::Connection;

use super::descriptors::{self, claim_own_descriptors, file_databases, opened_by_another_instance};
use super::exit::{exiting, AtExit};
use super::transaction::Transaction;
use super::watchdog::{Action, Seen, Watch};
use crate::core::error::{Error, Result};
use crate::core::quote;

/// Reader connections: more than the dashboards a 2-core host runs at once, few enough to be
/// negligible (a connection is a small client context).
const READERS: usize = 8;

/// How long `try_read` looks for a free reader connection before its caller does without.
const TRY_READ_WAIT: Duration = Duration::from_millis(250);

/// Who a function is: it decides which connection it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reads committed state only; runs beside writers and other readers.
    Reader,
    /// Changes the serving tables; writers run one at a time.
    Writer,
}

struct Held {
    conn: Connection,
    /// The caller's search_path last applied to `conn`, so it is set only when it changes.
    search_path: Option<String>,
}

// SAFETY: a DuckDB connection may be used from any thread as long as it is not used by two
// threads at once; every access goes through the `Mutex` of its slot.
unsafe impl Send for Held {}

type Slot = Mutex<Option<Held>>;

pub struct Session {
    writer: Slot,
    readers: Vec<Slot>,
    /// Where the next reader looks for a free connection first (spreads the load).
    next_reader: AtomicUsize,
    /// How many connections of the instance are ours (to tell "only ours are left").
    ours: usize,
    /// The watchdog's state (`watchdog::Watch`), under this one lock.
    watch: Mutex<Watch>,
    /// Mirrors `watch.released` for the hot paths that only ask "may I still use DuckDB".
    released: AtomicBool,
    /// The writer connection is out of its slot, lent to a statement whose COMMIT is pending
    /// (see `Lease`): its slot is empty but the session is not released.
    leased: AtomicBool,
    /// Scans of ours under way in users' statements (`Running`).
    running: AtomicUsize,
    /// How many writes of ours have committed (`commits`): what a reader caches about the
    /// serving tables holds only while this has not moved.
    commits: AtomicU64,
    /// This instance's own descriptors on its database files, claimed at LOAD.
    own_fds: Vec<i32>,
    /// The writable file databases' paths (whose WALs a look sizes up), and when they were
    /// last asked of DuckDB (a user may ATTACH or DETACH one).
    files: Mutex<(Option<Instant>, Vec<String>)>,
}

/// How often the list of file databases is asked of DuckDB again.
const FILES_EVERY: Duration = Duration::from_secs(1);

/// The writer connection lent to one statement with its open transaction, until `commit`.
pub struct Lease {
    session: SharedSession,
    held: Option<Held>,
    tx: Option<Transaction>,
}

impl Lease {
    /// Commits the statement's work, runs what waited for the commit, and returns the writer.
    pub fn commit(mut self) -> Result<()> {
        let (Some(held), Some(tx)) = (self.held.take(), self.tx.take()) else { return Err(Error::Closed) };
        if exiting() {
            std::mem::forget(tx);
            self.session.give_back(held);
            return Err(Error::Closed);
        }
        let committed = tx.commit(&held.conn);
        if committed.is_ok() {
            self.session.wrote();
        }
        self.session.give_back(held);
        committed
    }
}

impl Drop for Lease {
    // Never committed: the statement was interrupted or its result never read.
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            if let Some(tx) = self.tx.take() {
                if exiting() {
                    std::mem::forget(tx);
                } else {
                    tx.rollback(&held.conn);
                }
            }
            self.session.give_back(held);
        }
    }
}

/// A scan of ours under way in a user's statement (`paimon_scan`), from its init until DuckDB
/// drops its state. While one runs, a user's statement is executing on this instance, so the
/// watchdog takes its look as busy without asking DuckDB anything: a look is a statement
/// DuckDB plans every time, and at the pace kept after a call it took about a tenth of a core
/// beside a long scan.
pub struct Running(SharedSession);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The host's part of what each registered function receives (see `serving::state::Database`).
pub type SharedSession = Arc<Session>;

fn lock(slot: &Slot) -> MutexGuard<'_, Option<Held>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// Prepared statements each connection keeps: one per dashboard/OLAP parameter shape and the
/// refresh and status statements, so that none is prepared again while a dashboard is served.
const STATEMENT_CACHE: usize = 128;

fn held(conn: Connection) -> Mutex<Option<Held>> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Mutex::new(Some(Held { conn, search_path: None }))
}

/// Checkpoints the file databases our writers may have written, so that the file alone holds
/// the serving layer (a copied `.duckdb` needs no `.wal`). In-memory databases are skipped.
/// Returns whether it succeeded: a CHECKPOINT cannot run while another transaction is active
/// (a user's statement, for one), and is then tried again later.
fn settle(conn: &Connection) -> bool {
    file_databases(conn)
        .iter()
        .filter(|db| !db.readonly)
        .all(|db| conn.execute_batch(&format!("CHECKPOINT {}", quote::ident(&db.name))).is_ok())
}

/// How many connections the instance has, ours included.
fn connection_count(conn: &Connection) -> duckdb::Result<u64> {
    conn.prepare_cached("SELECT count FROM duckdb_connection_count()").and_then(|mut s| s.query_row([], |r| r.get(0)))
}

/// Turns off DuckDB's checkpoint at instance shutdown (an instance-wide setting), so that
/// destroying the instance after the user left writes nothing: no checkpoint, no WAL removal,
/// no header. Returns false if DuckDB refused, and then the instance must not be destroyed.
fn skip_shutdown_checkpoint(conn: &Connection) -> bool {
    conn.execute_batch("PRAGMA disable_checkpoint_on_shutdown").is_ok()
}

impl Session {
    /// Clones the pool from the entrypoint's connection (only possible during LOAD) and starts
    /// the watchdog.
    pub fn start(con: &Connection) -> duckdb::Result<SharedSession> {
        let writer = held(con.try_clone()?);
        let readers = (0..READERS).map(|_| con.try_clone().map(held)).collect::<duckdb::Result<Vec<_>>>()?;
        let own_fds = claim_own_descriptors(con);
        let session = Arc::new(Session {
            own_fds,
            writer,
            ours: readers.len() + 1,
            readers,
            next_reader: AtomicUsize::new(0),
            watch: Mutex::new(Watch::new(Instant::now())),
            released: AtomicBool::new(false),
            leased: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            commits: AtomicU64::new(0),
            files: Mutex::new((None, Vec::new())),
        });
        let at_exit: std::sync::Weak<dyn AtExit> = Arc::downgrade(&session) as _;
        super::exit::register(at_exit);
        let weak = Arc::downgrade(&session);
        let spawned = thread::Builder::new().name("streamhouse-watchdog".into()).spawn(move || {
            let mut interval = super::watchdog::WATCH_BUSY;
            loop {
                thread::sleep(interval);
                let Some(session) = weak.upgrade() else { return };
                if session.look() == Action::Stop {
                    return;
                }
                interval = session.watch().interval(Instant::now());
            }
        });
        if spawned.is_err() {
            // Without a watchdog we could never release the instance; refuse to hold it at all.
            session.watch().released = true;
            session.release_all(Vec::new());
        }
        Ok(session)
    }

    fn watch(&self) -> MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        std::iter::once(&self.writer).chain(&self.readers)
    }

    /// Drops every connection; `guards` are slots already locked by the caller.
    fn release_all(&self, guards: Vec<MutexGuard<'_, Option<Held>>>) {
        self.released.store(true, Ordering::SeqCst);
        descriptors::release(&self.own_fds);
        for mut g in guards {
            drop(g.take());
        }
        for slot in self.slots() {
            drop(lock(slot).take());
        }
    }

    /// Lets go of the instance without destroying it: another instance has its file open (whose
    /// lock destroying this one would drop), or it could not be made to shut down without
    /// writing. It stays in memory, never used again, until the process exits: the price of a
    /// reopen that raced the release.
    fn retire(&self, guards: Vec<MutexGuard<'_, Option<Held>>>) {
        self.released.store(true, Ordering::SeqCst);
        descriptors::retire(&self.own_fds);
        for mut g in guards {
            if let Some(held) = g.take() {
                std::mem::forget(held);
            }
        }
    }

    /// One look of the watchdog: what it sees goes through `Watch::step`, and the action is
    /// carried out here. Holding every slot keeps any call from starting while it decides.
    fn look(&self) -> Action {
        let exiting = exiting();
        // At exit (or once let go) not even a look may run DuckDB code: DuckDB's static state is
        // being torn down.
        if exiting || self.released.load(Ordering::SeqCst) {
            return Action::Stop;
        }
        let mut guards = Vec::with_capacity(self.ours);
        let mut busy = self.leased.load(Ordering::SeqCst) || self.running.load(Ordering::SeqCst) > 0;
        if !busy {
            for slot in self.slots() {
                match slot.try_lock() {
                    Ok(g) => guards.push(g),
                    Err(TryLockError::Poisoned(p)) => guards.push(p.into_inner()),
                    Err(TryLockError::WouldBlock) => {
                        busy = true;
                        break;
                    }
                }
            }
        }
        let conn = guards.iter().find_map(|g| g.as_ref()).map(|h| &h.conn);
        let seen = match conn {
            _ if busy => Seen::Busy,
            // Every slot empty and not leased: released already.
            None => return Action::Stop,
            Some(c) => connection_count(c).map_or(Seen::CountFailed, Seen::Connections),
        };
        if let Some(c) = conn.filter(|_| !busy) {
            let bytes = descriptors::wal_bytes(&self.file_paths(c));
            self.watch().wal_seen(Instant::now(), bytes);
        }
        let another = || conn.is_some_and(opened_by_another_instance);
        let action = self.watch().step(Instant::now(), seen, self.ours as u64, exiting, another);
        match action {
            Action::Wait | Action::Stop => {}
            Action::Settle => {
                let ok = conn.is_some_and(settle);
                self.watch().settled(ok);
            }
            // Dropped under the slot locks, so a concurrent call sees either a live connection
            // or `Error::Closed`.
            Action::Release if conn.is_some_and(skip_shutdown_checkpoint) => self.release_all(guards),
            Action::Release | Action::Retire => self.retire(guards),
        }
        action
    }

    /// The writable file databases' paths, asked of DuckDB at most every `FILES_EVERY`.
    fn file_paths(&self, conn: &Connection) -> Vec<String> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if files.0.is_none_or(|t| t.elapsed() >= FILES_EVERY) {
            let paths = file_databases(conn).into_iter().filter(|db| !db.readonly).map(|db| db.path).collect();
            *files = (Some(Instant::now()), paths);
        }
        files.1.clone()
    }
}

impl AtExit for Session {
    /// At process exit (`exit`): if the user has closed every connection, lets go of the
    /// instance *with* DuckDB's shutdown checkpoint, as DuckDB's own close would have: the WAL is
    /// folded into the database file. Nothing can open the file as a new instance any more, and
    /// no static state of DuckDB is torn down yet. Skipped (the WAL stays, replayed by the next
    /// open) when a call of ours is still running after `wait`, the user is still connected, or
    /// another instance of this process has the file.
    fn release_at_exit(&self, wait: Duration) {
        if self.released.load(Ordering::SeqCst) {
            return;
        }
        let deadline = Instant::now() + wait;
        let mut guards = Vec::with_capacity(self.ours);
        for slot in self.slots() {
            loop {
                match slot.try_lock() {
                    Ok(g) => break guards.push(g),
                    Err(TryLockError::Poisoned(p)) => break guards.push(p.into_inner()),
                    Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                        thread::sleep(Duration::from_millis(1))
                    }
                    Err(TryLockError::WouldBlock) => return,
                }
            }
        }
        if self.leased.load(Ordering::SeqCst) || self.running.load(Ordering::SeqCst) > 0 {
            return;
        }
        let Some(conn) = guards.iter().find_map(|g| g.as_ref()).map(|h| &h.conn) else { return };
        let alone = connection_count(conn).is_ok_and(|n| n <= self.ours as u64);
        if !alone || opened_by_another_instance(conn) {
            return;
        }
        self.watch().released = true;
        // Dropping our connections destroys the instance here, its shutdown checkpoint included.
        self.release_all(guards);
    }
}

impl Session {
    /// A free reader connection, or (all busy) the next one in turn once it frees up.
    fn reader(&self) -> MutexGuard<'_, Option<Held>> {
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        let n = self.readers.len();
        for i in 0..n {
            match self.readers[(start + i) % n].try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        lock(&self.readers[start % n])
    }

    /// The writer connection, waiting up to `wait` for a running writer to finish (a second
    /// writer waits for the running one; past its bound it gives up with a clear error: a nested
    /// call, e.g. a source view that itself calls serving_build, would otherwise wait forever for
    /// the connection its own caller holds; see `core::wait`).
    fn writer(&self, what: &str, wait: Duration) -> Result<MutexGuard<'_, Option<Held>>> {
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_micros(200);
        loop {
            let taken = match self.writer.try_lock() {
                Ok(g) => Some(g),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            match taken {
                Some(g) if g.is_some() || !self.leased.load(Ordering::SeqCst) => return Ok(g),
                _ if Instant::now() >= deadline => {
                    return Err(Error::Busy { function: what.to_string(), waited: wait })
                }
                _ => {
                    thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }

    /// Runs `f` on a reader connection, resolving names through the caller's `search_path`
    /// (so `USE other` or `SET search_path` mean the same to us). `what` names the function.
    pub fn read<R>(&self, search_path: &str, f: impl FnOnce(&Connection) -> Result<R>) -> Result<R> {
        // A user's call: the quiet periods of the watchdog count from its end.
        self.touch();
        let mut guard = self.reader();
        let out = self.prepare(&mut guard, search_path).and_then(f);
        drop(guard);
        self.touch();
        out
    }

    /// `read` on the first reader connection found free within `TRY_READ_WAIT` (the
    /// watchdog's look holds every slot for a moment): None when none was. For callbacks DuckDB
    /// makes inside a statement that may be running on one of our own connections (a
    /// replacement scan), where waiting for a given one could wait for ourselves.
    pub fn try_read<R>(&self, f: impl FnOnce(&Connection) -> Result<R>) -> Option<Result<R>> {
        let deadline = Instant::now() + TRY_READ_WAIT;
        let mut guard = loop {
            if let Some(g) = self.readers.iter().find_map(|slot| slot.try_lock().ok()) {
                break g;
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_micros(200));
        };
        self.touch();
        let out = self.prepare(&mut guard, "").and_then(f);
        drop(guard);
        self.touch();
        Some(out)
    }

    /// Marks a scan of ours as under way until the returned guard is dropped (see `Running`).
    pub fn running(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::SeqCst);
        Running(self.clone())
    }

    /// Notes that a call of ours ran until now (the quiet periods count from its end).
    fn touch(&self) {
        self.watch().touch(Instant::now());
    }

    /// A writer call ended: its changes are in the WAL until the watchdog settles them, while
    /// the user is connected and once they have been quiet. A CHECKPOINT right here would fail:
    /// the caller's statement is a transaction still running.
    fn wrote(&self) {
        self.commits.fetch_add(1, Ordering::SeqCst);
        let mut watch = self.watch();
        watch.unsettled = true;
        watch.touch(Instant::now());
    }

    /// The connection in `slot`, ready for a call resolving names through `search_path`.
    fn prepare<'a>(&self, slot: &'a mut Option<Held>, search_path: &str) -> Result<&'a Connection> {
        // At process exit DuckDB's static state is going away: no DuckDB call may start (a
        // follower thread could otherwise begin an apply then).
        if exiting() {
            return Err(Error::Closed);
        }
        let held = slot.as_mut().ok_or(Error::Closed)?;
        if held.search_path.as_deref() != Some(search_path) {
            let sql = if search_path.is_empty() {
                "RESET search_path".to_string()
            } else {
                format!("SET search_path = {}", quote::literal(search_path))
            };
            held.conn.execute_batch(&sql).map_err(|e| Error::duckdb("streamhouse: applying search_path", &e))?;
            held.search_path = Some(search_path.to_string());
        }
        Ok(&held.conn)
    }

    /// Runs a writer's work `f` on the writer connection, in a `Transaction` it may leave open:
    /// then the connection is lent out with it as a `Lease`, which commits when the caller's
    /// statement pulls the result (`Lease::commit`) and rolls back if it never does (an
    /// interrupted statement drops it unread). A running writer is waited for up to `wait`.
    pub fn write<R>(
        self: &Arc<Self>,
        what: &str,
        search_path: &str,
        wait: Duration,
        f: impl FnOnce(&Connection, &mut Transaction) -> Result<R>,
    ) -> Result<(R, Option<Lease>)> {
        self.touch();
        let mut guard = self.writer(what, wait)?;
        let conn = self.prepare(&mut guard, search_path)?;
        let mut tx = Transaction::new();
        let value = match f(conn, &mut tx) {
            Ok(v) => v,
            Err(e) => {
                tx.rollback(conn);
                return Err(e);
            }
        };
        if !tx.is_open() {
            tx.commit(conn)?;
            self.wrote();
            return Ok((value, None));
        }
        // Marked before the slot is unlocked, so nobody takes the empty slot for "released".
        self.leased.store(true, Ordering::SeqCst);
        let held = guard.take();
        drop(guard);
        Ok((value, Some(Lease { session: self.clone(), held, tx: Some(tx) })))
    }

    /// Puts a lent writer connection back (or drops it, if the session was released meanwhile).
    fn give_back(&self, held: Held) {
        let mut slot = lock(&self.writer);
        if self.released.load(Ordering::SeqCst) || exiting() {
            // At exit no DuckDB code may run, not even a connection's destructor.
            std::mem::forget(held);
        } else {
            *slot = Some(held);
        }
        self.leased.store(false, Ordering::SeqCst);
    }

    /// Runs `f` on the writer connection only if no writer is running now (None otherwise).
    pub fn try_writer<R>(&self, search_path: &str, f: impl FnOnce(&Connection) -> Result<R>) -> Option<Result<R>> {
        let mut guard = match self.writer.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        if guard.is_none() && self.leased.load(Ordering::SeqCst) {
            return None;
        }
        // A background writer (the follower) writes only while the user is connected: after
        // the last user connection closed, this instance writes nothing (see the module doc).
        if guard.as_ref().is_some_and(|held| !self.user_connected(&held.conn)) {
            return None;
        }
        Some(self.prepare(&mut guard, search_path).and_then(f))
    }

    /// A background writer (the follower) committed something: settle it while the user is
    /// connected. It does not count as a call of the user's (`last_used` stays), so a follower
    /// ticking faster than `SETTLE_QUIET` never keeps the settle away.
    pub fn wrote_in_background(&self) {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.watch().unsettled = true;
    }

    /// How many writes of ours have committed so far: read it before looking something up, and
    /// what was looked up holds while it has not moved (every build, refresh and apply is ours).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::SeqCst)
    }

    /// Whether a connection other than ours is open on the instance (an error counts as no).
    fn user_connected(&self, conn: &Connection) -> bool {
        connection_count(conn).is_ok_and(|n| n > self.ours as u64)
    }

    /// Released, or the process is exiting: either way nothing may use DuckDB through us.
    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst) || exiting()
    }
}
