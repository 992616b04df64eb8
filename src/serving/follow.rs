//! Following a Paimon table: a background thread per database that applies every new snapshot
//! as one atomic lake refresh, and what `serving_status` reports about how far behind it is.
//!
//! The follower holds only a weak reference to its session between applies, so it never keeps
//! a closed database open: once the session is released (or dropped), the next look ends the
//! thread. It takes the writer connection like any build or refresh, so readers never wait for
//! it. Its state lives in memory only: after a reopen nothing follows until
//! `serving_follow` is called again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use duckdb::Connection;

use crate::core::error::{shown, Error, Result};
use crate::core::location::same_table;
use crate::core::schema::META;
use crate::core::source::Origin;
use crate::host::session::Session;
use crate::host::settings;
use crate::host::transaction::Transaction;
use crate::lake::{Access, LakeOptions, LakeTable};
use crate::serving::meta::{self, not_built, now_micros};
use crate::serving::publish::{self, LastPublish};
use crate::serving::served::{self, Mode};
use crate::serving::{history, refresh, replica};

/// The longest pause between retries after failed applies (or `every`, when longer): short, so
/// that a follower that failed through an outage is back within a second or two of its source
/// answering again, and still cheap while the source stays broken (a look every 2 s).
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The shortest interval accepted (anything faster only burns the writer connection).
pub const MIN_EVERY: Duration = Duration::from_millis(10);

/// What the follower has done so far (read by serving_status).
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The lake snapshot of the last successful apply.
    pub last_applied: Option<i64>,
    pub applies: u64,
    pub last_error: Option<String>,
    /// Microseconds since the epoch.
    pub last_error_at: Option<i64>,
    /// Whether the latest apply failed (`last_error` stays as a record after a recovery).
    pub failing: bool,
    /// When the follower last looked at its source (a tick that ran, whatever its outcome), and
    /// when a look last succeeded (microseconds since the epoch).
    pub last_checked_at: Option<i64>,
    pub last_ok_at: Option<i64>,
    /// When the follower started: what a follower that never succeeded has waited since.
    pub started_at: Option<i64>,
}

/// Where a follower publishes the mart after every apply (`publish :=`).
pub struct PublishTo {
    /// The target as the user gave it (`paimon:<dir>`, `s3://...`).
    pub target: String,
    pub options: LakeOptions,
    pub last: LastPublish,
    /// The layer state (`serving_meta.generation`) the call already published, if it did.
    pub published: Option<i64>,
}

/// A running follower of one Paimon table.
pub struct Follower {
    /// The source string as the user gave it (`paimon:<dir>`).
    pub source: String,
    pub every: Duration,
    /// Where it publishes after every apply, if anywhere.
    pub publish: Option<String>,
    stop: Arc<AtomicBool>,
    progress: Arc<Mutex<Progress>>,
    thread: Option<JoinHandle<()>>,
}

impl Follower {
    pub fn progress(&self) -> Progress {
        self.progress.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the thread and waits for an apply in progress to finish (never call it from the
    /// follower thread itself).
    pub fn stop(mut self) -> Progress {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.progress()
    }
}

impl Drop for Follower {
    // Dropped with its session (the database closed): signal only; the thread may be the one
    // dropping us, so joining here could wait for itself.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The source of the serving layer, and the snapshot it reflects.
fn built_from(conn: &Connection) -> Result<(Option<String>, Option<i64>)> {
    conn.query_row(&format!("SELECT source, lake_snapshot FROM {META}"), [], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(|e| not_built("serving_follow", e))
}

/// The refusal of a source that names no table to follow.
pub fn not_a_lake_table(source: &str) -> Error {
    Error::Refused {
        function: "serving_follow",
        problem: format!("'{}' is not a Paimon table (use paimon:<table directory>)", shown(source)),
    }
}

/// Checks that the layer was built from the Paimon table at `path` (what `source` names);
/// returns the path.
pub fn check_source(conn: &Connection, source: &str, path: &str, access: &Access) -> Result<String> {
    let refuse = |why: String| Error::Refused { function: "serving_follow", problem: why };
    let path = path.to_string();
    LakeTable::open("serving_follow", &path, access)?;
    let (built, _) = built_from(conn)?;
    let built_path = built.as_deref().and_then(|b| Origin::lake_path(b, &access.sandbox));
    let same = built_path.as_deref().is_some_and(|b| same_table(b, &path));
    if !same {
        return Err(refuse(format!(
            "the serving layer was built from '{}', not from '{}'; run serving_build('{}') first",
            shown(&built.unwrap_or_default()),
            shown(source),
            shown(source)
        )));
    }
    Ok(path)
}

/// Applies whatever the lake has beyond what the layer reflects; the new snapshot if any.
fn apply_once(conn: &Connection, source: &str, path: &str, options: &LakeOptions) -> Result<Option<i64>> {
    let access = Access { sandbox: settings::sandbox(conn)?, options: options.clone() };
    let (applied, millis) = history::held(conn, "serving_follow")?;
    if served::mode(conn, "serving_follow")? == Mode::Mart {
        return replica::apply(conn, source, path, &access, applied, millis);
    }
    let table = LakeTable::open("serving_follow", path, &access)?;
    // A rewritten history is rebuilt by the refresh below even when no newer id exists (a
    // rollback leaves the latest id at or below the one held).
    let rewritten = history::rewritten(&table, applied, millis)?.is_some();
    let latest = table.latest_snapshot()?;
    if !rewritten && (latest.is_none() || latest <= applied) {
        return Ok(None);
    }
    let mut tx = Transaction::new();
    let origin = Origin::Lake(path.to_string());
    let applied = refresh::refresh(conn, source, &origin, (None, None), &access, None, &mut tx);
    match applied {
        Ok(summary) => {
            tx.commit(conn)?;
            Ok(summary.lake_snapshot)
        }
        Err(e) => {
            tx.rollback(conn);
            Err(e)
        }
    }
}

/// Sleeps `pause` in short slices, returning false as soon as the follower should end.
fn wait(pause: Duration, stop: &AtomicBool, session: &Weak<Session>) -> bool {
    let until = Instant::now() + pause;
    loop {
        if stop.load(Ordering::SeqCst) || session.upgrade().is_none_or(|s| s.is_released()) {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        thread::sleep(left.min(Duration::from_millis(20)));
    }
}

/// Publishes the layer's state `now` (its generation) unless it is the one last published:
/// after an apply, after a failed publish (until one succeeds), and at the start when the layer
/// moved since the call's own publish (the follower it replaces applied meanwhile). Returns the
/// state published.
fn publish_once(conn: &Connection, to: &PublishTo, last: Option<i64>) -> Result<Option<i64>> {
    let now = meta::generation(conn, "serving_follow")?;
    if now.is_some() && now == last {
        return Ok(last);
    }
    let access = Access { sandbox: settings::sandbox(conn)?, options: to.options.clone() };
    publish::publish(conn, "serving_follow", &to.target, &access, &to.last).map(|_| now)
}

/// What a follower applies at each tick: a Paimon table's new snapshots, or a Fluss table's new
/// changelog records. Returns what was applied (a snapshot id, a log position), None when nothing.
pub type Apply = Box<dyn FnMut(&Connection) -> Result<Option<i64>> + Send>;

/// The ticks of a follower of the Paimon table at `path`.
pub fn lake_apply(source: String, path: String, options: LakeOptions) -> Apply {
    Box::new(move |c| apply_once(c, &source, &path, &options))
}

/// Starts following `source` (already checked) every `every`, publishing to `publish` after
/// every apply that moved the layer (and at the start, unless the call published this state).
pub fn start(
    session: &Arc<Session>,
    source: String,
    mut apply: Apply,
    every: Duration,
    search_path: String,
    publish: Option<PublishTo>,
) -> Result<Follower> {
    let target = publish.as_ref().map(|p| p.target.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Mutex::new(Progress { started_at: Some(now_micros()), ..Progress::default() }));
    let weak = Arc::downgrade(session);
    let (stop2, progress2) = (stop.clone(), progress.clone());
    let thread = thread::Builder::new()
        .name("streamhouse-follow".into())
        .spawn(move || {
            let mut pause = Duration::ZERO;
            let mut failures = 0u32;
            let mut published = publish.as_ref().and_then(|p| p.published);
            while wait(pause, &stop2, &weak) {
                let Some(session) = weak.upgrade() else { return };
                // Never queued behind a build or refresh: if the writer is busy, look again at
                // the next tick (so unfollow and the database's close never wait on a queue).
                let Some(outcome) = session.try_writer(&search_path, |c| {
                    let applied = apply(c)?;
                    // A failed publish does not undo the apply: both are reported.
                    let done = match &publish {
                        Some(to) => publish_once(c, to, published).map(|now| published = now),
                        None => Ok(()),
                    };
                    Ok((applied, done))
                }) else {
                    pause = every;
                    continue;
                };
                drop(session);
                let mut p = progress2.lock().unwrap_or_else(|p| p.into_inner());
                let failed = match outcome {
                    Ok((applied, done)) => {
                        if applied.is_some() {
                            if let Some(session) = weak.upgrade() {
                                session.wrote_in_background();
                            }
                            p.last_applied = applied;
                            p.applies += 1;
                        }
                        done.err()
                    }
                    Err(Error::Closed) => return,
                    Err(e) => Some(e),
                };
                pause = settle(&mut p, failed, &mut failures, every);
            }
        })
        .map_err(|e| Error::internal("serving_follow", format!("cannot start the follower thread: {e}")))?;
    Ok(Follower { source, every, publish: target, stop, progress, thread: Some(thread) })
}

/// Records how a tick ended in `p` and returns the pause before the next: `every` after a
/// success; after failures an exponential back-off, capped at `MAX_BACKOFF` so that a follower
/// that failed through an outage tries again soon after the source answers again.
fn settle(p: &mut Progress, failed: Option<Error>, failures: &mut u32, every: Duration) -> Duration {
    p.last_checked_at = Some(now_micros());
    match failed {
        None => {
            *failures = 0;
            p.failing = false;
            p.last_ok_at = p.last_checked_at;
            every
        }
        Some(e) => {
            *failures = failures.saturating_add(1);
            p.failing = true;
            // Named by the function that runs it (shared code says "serving:").
            let text = e.to_string();
            p.last_error = Some(match text.strip_prefix("serving: ") {
                Some(rest) => format!("serving_follow: {rest}"),
                None => text,
            });
            p.last_error_at = Some(now_micros());
            (every * 2u32.saturating_pow((*failures).min(16))).min(MAX_BACKOFF.max(every))
        }
    }
}

/// How far the served state is behind its Paimon table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lag {
    pub latest: Option<i64>,
    pub snapshots: Option<i64>,
    /// Age of the oldest commit not yet applied; 0 when caught up.
    pub millis: Option<i64>,
    /// Why the snapshot served is no longer the table's history (`serving::history`): the next
    /// refresh or follower tick rebuilds.
    pub rewritten: Option<String>,
}

/// The lag of a layer built from `source` and reflecting snapshot `applied` (None: not a lake
/// source, or the table cannot be read under the current sandbox).
pub fn lag(source: &str, applied: Option<i64>, millis: Option<i64>, access: &Access) -> Lag {
    let Some(path) = Origin::lake_path(source, &access.sandbox) else { return Lag::default() };
    let Ok(table) = LakeTable::open("serving_status", &path, access) else { return Lag::default() };
    let Ok(latest) = table.latest_snapshot() else { return Lag::default() };
    if let Ok(Some(why)) = history::rewritten(&table, applied, millis) {
        return Lag { latest, snapshots: None, millis: None, rewritten: Some(why) };
    }
    let applied = applied.unwrap_or(0);
    let behind = latest.map_or(0, |l| (l - applied).max(0));
    let millis = if behind == 0 {
        Some(0)
    } else {
        table.snapshot_time_millis(applied + 1).ok().map(|t| (now_micros() / 1000 - t).max(0))
    };
    Lag { latest, snapshots: Some(behind), millis, rewritten: None }
}
