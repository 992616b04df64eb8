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
//!   has; once ours have been the only ones for `QUIET`, it turns DuckDB's shutdown checkpoint
//!   off and drops our connections, which destroys the instance without a write (whatever the
//!   WAL holds, the next open replays, as after any process exit). If another instance of this
//!   process has the file open by then, the old one is not even destroyed (`Session::retire`):
//!   closing its descriptor would drop the new instance's file lock;
//! - streamhouse's own writes are checkpointed while the user is still connected, once no call
//!   of ours has run for `SETTLE_QUIET` (`Session::settle_when_quiet`): a CHECKPOINT cannot run
//!   inside the caller's statement, and a script closes right after its last statement, so
//!   waiting keeps the checkpoint away from the instant of a close;
//! - at process exit nothing of ours may run DuckDB code (its static state is being torn down;
//!   a checkpoint there crashed the CLI).
//!
//! Limitation (documented in the README): a C API user who disconnects every connection but
//! keeps the `duckdb_database` handle and connects again later gets `Error::Closed`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, TryLockError};
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

/// How long our connections must have been the instance's only ones, with no call of ours
/// since, before the watchdog lets go: a same-process reopen through DuckDB's instance cache
/// (Python's `duckdb.connect`) takes the instance back within that time and keeps it, and one
/// as a new instance is seen first (`retire`).
const QUIET: Duration = Duration::from_millis(20);

/// How long after our last call (and after the last attempt) the watchdog waits before it
/// checkpoints what our writers left in the WAL, while the user is connected. A script closes
/// and reopens within milliseconds of its last statement, even on a loaded machine; a checkpoint
/// running across that instant would write under the new instance. Much longer than any such
/// gap, short enough that an interactive session's file holds the layer soon after a build.
const SETTLE_QUIET: Duration = Duration::from_millis(250);

/// Reader connections: more than the dashboards a 2-core host runs at once, few enough to be
/// negligible (a connection is a small client context).
const READERS: usize = 8;

/// A second writer waits for the running one; past this bound it gives up with a clear error
/// (a nested call, e.g. a source view that itself calls serving_build, would otherwise wait
/// forever for the connection its own caller holds).
pub const WRITER_WAIT: Duration = Duration::from_secs(120);

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
    /// When a function last used a connection.
    last_used: Mutex<Instant>,
    /// When a look found our connections alone, if no look since found them in company.
    alone_since: Mutex<Option<Instant>>,
    /// Set once released: every later call gets `Error::Closed`.
    released: AtomicBool,
    /// A writer call committed and its changes are not checkpointed yet (see `settle`).
    unsettled: AtomicBool,
    /// When the watchdog last tried to settle.
    settle_tried: Mutex<Option<Instant>>,
    /// The writer connection is out of its slot, lent to a statement whose COMMIT is pending
    /// (see `Lease`): its slot is empty but the session is not released.
    leased: AtomicBool,
    /// The follower of this database's Paimon source, if one runs.
    pub follower: Mutex<Option<crate::follow::Follower>>,
    /// The last reconcile's outcome, for when the writer was busy and it could not be stored.
    pub reconciled: Mutex<Option<crate::refresh::Reconciled>>,
    /// The storage options last given for a Paimon source (path, options), kept in memory only
    /// so that refresh, follow and status reach the table a build reached; never persisted.
    lake_options: Mutex<Option<(String, crate::lake::LakeOptions)>>,
    /// This instance's own descriptors on its database files, claimed at LOAD.
    own_fds: Vec<i32>,
}

/// The writer connection lent to one statement, its transaction open until `commit`.
pub struct Lease {
    session: SharedSession,
    held: Option<Held>,
    after_commit: Vec<crate::serving::AfterCommit>,
}

impl Lease {
    /// Commits the statement's work, runs what waited for the commit, and returns the writer.
    pub fn commit(mut self) -> Result<()> {
        let Some(held) = self.held.take() else { return Err(Error::Closed) };
        if EXITING.load(Ordering::SeqCst) {
            self.session.give_back(held);
            return Err(Error::Closed);
        }
        let committed = held.conn.execute_batch("COMMIT").map_err(|e| {
            let _ = held.conn.execute_batch("ROLLBACK");
            Error::duckdb("streamhouse: COMMIT failed, nothing was changed", &e)
        });
        if committed.is_ok() {
            for action in std::mem::take(&mut self.after_commit) {
                action(&held.conn);
            }
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
            if !EXITING.load(Ordering::SeqCst) {
                let _ = held.conn.execute_batch("ROLLBACK");
            }
            self.session.give_back(held);
        }
    }
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

/// A database file attached to the instance.
struct FileDatabase {
    name: String,
    path: String,
    readonly: bool,
}

fn file_databases(conn: &Connection) -> Vec<FileDatabase> {
    conn.prepare_cached(
        "SELECT database_name, path, readonly FROM duckdb_databases() WHERE type = 'duckdb' AND NOT internal \
         AND coalesce(path, '') <> ''",
    )
    .and_then(|mut s| {
        s.query_map([], |r| Ok(FileDatabase { name: r.get(0)?, path: r.get(1)?, readonly: r.get(2)? }))?.collect()
    })
    .unwrap_or_default()
}

/// Whether a database file of this instance is open in another DuckDB instance of this process:
/// one opened on the same file after the user closed this one but before the watchdog let go of
/// it (the CLI's `.open`, Node's `DuckDBInstance.create`). A checkpoint of this instance would
/// then write the file under the new one, and destroying it (even writing nothing) would close
/// its descriptor, which drops the process's POSIX lock on the file, the new instance's too. A
/// DuckDB instance opens its database file exactly once, and DuckDB refuses to attach one file
/// twice, so two descriptors of one file mean two instances. Checked only before a checkpoint or
/// a release.
fn opened_by_another_instance(conn: &Connection) -> bool {
    descriptors(conn).iter().any(|fds| fds.len() > 1)
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

/// Which descriptors on database files belong to which of this process's instances with
/// streamhouse loaded, so that a new instance can tell its own descriptor from an older one's.
struct Descriptors {
    /// Each live session's own descriptors (claimed at LOAD, given up at release).
    claimed: Vec<i32>,
    /// Retired instances' descriptors (`Session::retire`): open until the process exits, never
    /// written through again, so they are no other instance to protect.
    retired: Vec<i32>,
}

static FDS: Mutex<Descriptors> = Mutex::new(Descriptors { claimed: Vec::new(), retired: Vec::new() });

fn fds() -> MutexGuard<'static, Descriptors> {
    FDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// At LOAD: this instance's own descriptor on each of its database files, the one no other
/// session has claimed (none for a file where that is ambiguous), claimed for it.
fn claim_own_descriptors(conn: &Connection) -> Vec<i32> {
    let found = descriptors(conn);
    let mut registry = fds();
    let own: Vec<i32> = found
        .into_iter()
        .filter_map(|fds| {
            let unclaimed: Vec<i32> = fds.into_iter().filter(|fd| !registry.claimed.contains(fd)).collect();
            (unclaimed.len() == 1).then(|| unclaimed[0])
        })
        .collect();
    registry.claimed.extend(&own);
    own
}

/// This process's descriptors on each database file of the instance, retired ones left out.
fn descriptors(conn: &Connection) -> Vec<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let files: Vec<(u64, u64)> = file_databases(conn)
        .iter()
        .filter_map(|db| std::fs::metadata(&db.path).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    let mut found = vec![Vec::new(); files.len()];
    if files.is_empty() {
        return found;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return found };
    let retired = fds().retired.clone();
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if retired.contains(&fd) {
            continue;
        }
        // metadata() follows the descriptor's link to what it has open (stat only: never opens it).
        let Ok(m) = std::fs::metadata(entry.path()) else { continue };
        if let Some(i) = files.iter().position(|&f| f == (m.dev(), m.ino())) {
            found[i].push(fd);
        }
    }
    found
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
            last_used: Mutex::new(Instant::now()),
            alone_since: Mutex::new(None),
            released: AtomicBool::new(false),
            unsettled: AtomicBool::new(false),
            settle_tried: Mutex::new(None),
            leased: AtomicBool::new(false),
            follower: Mutex::new(None),
            reconciled: Mutex::new(None),
            lake_options: Mutex::new(None),
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
                let unsettled = session.unsettled.load(Ordering::SeqCst);
                interval = if idle && !confirming && !unsettled { WATCH_IDLE } else { WATCH_BUSY };
            }
        });
        if spawned.is_err() {
            // Without a watchdog we could never release the instance; refuse to hold it at all.
            session.release_all(Vec::new());
        }
        Ok(session)
    }

    fn slots(&self) -> impl Iterator<Item = &Slot> {
        std::iter::once(&self.writer).chain(&self.readers)
    }

    /// Drops every connection; `guards` are slots already locked by the caller.
    fn release_all(&self, guards: Vec<MutexGuard<'_, Option<Held>>>) {
        self.released.store(true, Ordering::SeqCst);
        fds().claimed.retain(|fd| !self.own_fds.contains(fd));
        for mut g in guards {
            drop(g.take());
        }
        for slot in self.slots() {
            drop(lock(slot).take());
        }
    }

    /// Lets go of the instance without destroying it: another instance has its file open (whose
    /// lock destroying this one would drop, see `opened_by_another_instance`), or it could not be
    /// made to shut down without writing. It stays in memory, never used again, until the process
    /// exits: the price of a reopen that raced the release.
    fn retire(&self, guards: Vec<MutexGuard<'_, Option<Held>>>) {
        self.released.store(true, Ordering::SeqCst);
        let mut registry = fds();
        registry.claimed.retain(|fd| !self.own_fds.contains(fd));
        registry.retired.extend(&self.own_fds);
        drop(registry);
        for mut g in guards {
            if let Some(held) = g.take() {
                std::mem::forget(held);
            }
        }
    }

    /// Drops our connections when they are the instance's last ones. Returns true once released.
    fn release_if_alone(&self) -> bool {
        if EXITING.load(Ordering::SeqCst) || self.released.load(Ordering::SeqCst) {
            return true;
        }
        // A busy connection is serving a query for some user connection: not alone. Holding
        // every slot also keeps any call from starting while we decide.
        if self.leased.load(Ordering::SeqCst) {
            return false;
        }
        let mut guards = Vec::with_capacity(self.ours);
        for slot in self.slots() {
            match slot.try_lock() {
                Ok(g) => guards.push(g),
                Err(TryLockError::Poisoned(p)) => guards.push(p.into_inner()),
                Err(TryLockError::WouldBlock) => return false,
            }
        }
        let Some(held) = guards.iter().find_map(|g| g.as_ref()) else { return true };
        let count = connection_count(&held.conn);
        let mut alone_since = self.alone_since.lock().unwrap_or_else(|p| p.into_inner());
        match count {
            // Cannot tell who is connected: never destroy it (no shutdown setting touched), and
            // write nothing through it again.
            Err(_) => {
                drop(alone_since);
                self.retire(guards);
                true
            }
            Ok(n) if n > self.ours as u64 => {
                *alone_since = None;
                drop(alone_since);
                self.settle_when_quiet(&held.conn);
                false
            }
            // Alone is not enough: a same-process reopen may be between taking this instance
            // from DuckDB's instance cache and creating its connection, and would find our
            // extension released; and one as a new instance must be seen before we destroy this
            // one (see `QUIET`). Let go only after being alone for `QUIET` with no function run
            // since (a close/reopen/close in between runs one).
            Ok(_) if !alone_since.is_some_and(|t| t.elapsed() >= QUIET && self.last_used_before(t)) => {
                if !alone_since.is_some_and(|t| self.last_used_before(t)) {
                    *alone_since = Some(Instant::now());
                }
                false
            }
            // Alone long enough: let go, writing nothing. Dropped under the locks, so a
            // concurrent call sees either a live connection or `Error::Closed`.
            Ok(_) => {
                drop(alone_since);
                if opened_by_another_instance(&held.conn) || !skip_shutdown_checkpoint(&held.conn) {
                    self.retire(guards);
                } else {
                    self.release_all(guards);
                }
                true
            }
        }
    }

    /// While the user is connected: checkpoints what our last writer call left in the WAL, once
    /// `SETTLE_QUIET` has passed since that call and since the last attempt (an attempt fails
    /// while the caller's statement still runs, and the instant it ends is when a close comes).
    /// Never into a file another instance has opened since: it would rewrite the file under it.
    fn settle_when_quiet(&self, conn: &Connection) {
        let quiet = self.last_used.lock().map(|u| u.elapsed() >= SETTLE_QUIET).unwrap_or(true);
        if !self.unsettled.load(Ordering::SeqCst) || !quiet {
            return;
        }
        let mut tried = self.settle_tried.lock().unwrap_or_else(|p| p.into_inner());
        if tried.is_some_and(|t| t.elapsed() < SETTLE_QUIET) {
            return;
        }
        *tried = Some(Instant::now());
        if !opened_by_another_instance(conn) && settle(conn) {
            self.unsettled.store(false, Ordering::SeqCst);
        }
    }

    fn last_used_before(&self, t: Instant) -> bool {
        self.last_used.lock().map(|u| *u < t).unwrap_or(true)
    }

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

    /// The writer connection, waiting up to `WRITER_WAIT` for a running writer to finish.
    fn writer(&self, what: &str) -> Result<MutexGuard<'_, Option<Held>>> {
        let deadline = Instant::now() + WRITER_WAIT;
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
                    return Err(Error::Busy { function: what.to_string(), waited: WRITER_WAIT })
                }
                _ => {
                    thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
            }
        }
    }

    /// Runs `f` on a connection for `role`, resolving names through the caller's `search_path`
    /// (so `USE other` or `SET search_path` mean the same to us). `what` names the function.
    pub fn with<R>(
        &self,
        role: Role,
        what: &str,
        search_path: &str,
        f: impl FnOnce(&Connection) -> Result<R>,
    ) -> Result<R> {
        // A user's call: the quiet periods of the watchdog count from its end.
        self.touch();
        let out = match role {
            Role::Reader => self.run(self.reader(), search_path, f),
            Role::Writer => {
                let out = self.run(self.writer(what)?, search_path, f);
                self.wrote();
                out
            }
        };
        self.touch();
        out
    }

    fn run<R>(
        &self,
        mut guard: MutexGuard<'_, Option<Held>>,
        search_path: &str,
        f: impl FnOnce(&Connection) -> Result<R>,
    ) -> Result<R> {
        f(self.prepare(&mut guard, search_path)?)
    }

    /// Notes that a call of ours ran until now (the quiet periods count from its end).
    fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    /// A writer call ended: its changes are in the WAL until the watchdog settles them, while
    /// the user is connected and once they have been quiet (`settle_when_quiet`). A CHECKPOINT
    /// right here would fail: the caller's statement is a transaction still running.
    fn wrote(&self) {
        self.unsettled.store(true, Ordering::SeqCst);
        self.touch();
    }

    /// The connection in `slot`, ready for a call resolving names through `search_path`.
    fn prepare<'a>(&self, slot: &'a mut Option<Held>, search_path: &str) -> Result<&'a Connection> {
        // At process exit DuckDB's static state is going away: no DuckDB call may start (a
        // follower thread could otherwise begin an apply then).
        if EXITING.load(Ordering::SeqCst) {
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

    /// Runs `f` on the writer with the COMMIT of its transaction deferred: when `f` leaves one
    /// open, the writer connection is lent out with it as a `Lease`, which commits when the
    /// caller's statement pulls the result (`Lease::commit`) and rolls back if it never does
    /// (an interrupted statement drops it unread).
    pub fn write_deferred<R>(
        self: &Arc<Self>,
        what: &str,
        search_path: &str,
        f: impl FnOnce(&Connection) -> Result<R>,
    ) -> Result<(R, Option<Lease>)> {
        self.touch();
        let mut guard = self.writer(what)?;
        let conn = self.prepare(&mut guard, search_path)?;
        let (out, deferred) = crate::serving::deferring_commit(|| f(conn));
        let value = match out {
            Ok(v) => v,
            Err(e) => {
                if deferred.open {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                return Err(e);
            }
        };
        if !deferred.open {
            self.wrote();
            return Ok((value, None));
        }
        // Marked before the slot is unlocked, so nobody takes the empty slot for "released".
        self.leased.store(true, Ordering::SeqCst);
        let held = guard.take();
        drop(guard);
        Ok((value, Some(Lease { session: self.clone(), held, after_commit: deferred.after_commit })))
    }

    /// Puts a lent writer connection back (or drops it, if the session was released meanwhile).
    fn give_back(&self, held: Held) {
        let mut slot = lock(&self.writer);
        if self.released.load(Ordering::SeqCst) || EXITING.load(Ordering::SeqCst) {
            // At exit no DuckDB code may run, not even a connection's destructor.
            std::mem::forget(held);
        } else {
            *slot = Some(held);
        }
        self.leased.store(false, Ordering::SeqCst);
    }

    /// Runs `f` on the writer connection only if no writer is running now (None otherwise).
    pub fn try_writer<R>(&self, search_path: &str, f: impl FnOnce(&Connection) -> Result<R>) -> Option<Result<R>> {
        let guard = match self.writer.try_lock() {
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
        Some(self.run(guard, search_path, f))
    }

    /// A background writer (the follower) committed something: settle it while the user is
    /// connected. It does not count as a call of the user's (`last_used` stays), so a follower
    /// ticking faster than `SETTLE_QUIET` never keeps the settle away.
    pub fn wrote_in_background(&self) {
        self.unsettled.store(true, Ordering::SeqCst);
    }

    /// Whether a connection other than ours is open on the instance (an error counts as no).
    fn user_connected(&self, conn: &Connection) -> bool {
        connection_count(conn).is_ok_and(|n| n > self.ours as u64)
    }

    /// Released, or the process is exiting: either way nothing may use DuckDB through us.
    /// How a call reaches the Paimon table `source` names: with the options it gives (then
    /// remembered for that table), or else with those last given for the same table.
    pub fn lake_access(&self, access: &crate::lake::Access, source: &str) -> crate::lake::Access {
        let Some(path) = crate::source::Origin::lake_path(source, &access.sandbox) else { return access.clone() };
        let mut memo = self.lake_options.lock().unwrap_or_else(|p| p.into_inner());
        if !access.options.is_empty() {
            *memo = Some((path, access.options.clone()));
            return access.clone();
        }
        match &*memo {
            Some((p, options)) if *p == path => {
                crate::lake::Access { sandbox: access.sandbox.clone(), options: options.clone() }
            }
            _ => access.clone(),
        }
    }

    pub fn is_released(&self) -> bool {
        self.released.load(Ordering::SeqCst) || EXITING.load(Ordering::SeqCst)
    }
}
