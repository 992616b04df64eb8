//! The process's exit, as the extension meets it: our `atexit` handler (`note_exit`).
//!
//! Our connections keep the instance alive after the user closes it, so DuckDB's own close —
//! which folds the WAL into the database file — does not happen when the user closes: the
//! watchdog lets go later, writing nothing (a new instance may already be reading the file).
//! The CLI closes its database and exits within a millisecond. At exit no new instance can
//! open the file any more, so there the handler lets go of each instance whose user has closed
//! every connection *with* DuckDB's shutdown checkpoint (`AtExit::release_at_exit`), as
//! DuckDB's own close would have; then it sets `EXITING`: from then on nothing of ours runs
//! DuckDB code (DuckDB's static state is being torn down), the watchdog and the follower stop,
//! and an instance the user still holds stays as it is (its WAL is replayed by the next open).
//! The handler is registered at the first LOAD, after DuckDB's static state was built, so it
//! runs before that state's destructors.
//!
//! Only in DuckDB's own CLI (the executable named `duckdb`), whose instance holds nothing of a
//! host runtime: in Python or Node the interpreter is finalized before `exit`, and an instance
//! may own its objects (a UDF's function, a registered file system) whose destructors would then
//! run without it; elsewhere the handler only sets `EXITING`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::Duration;

static ATEXIT: Once = Once::new();

/// Set at process exit: DuckDB's own static state is being torn down, no DuckDB code may run.
static EXITING: AtomicBool = AtomicBool::new(false);

/// What the exit release asks of a session (`Session` implements it; this module does not
/// depend on `session`, which depends on it).
pub trait AtExit: Send + Sync {
    /// Lets go of the instance with DuckDB's shutdown checkpoint if the user has left, waiting
    /// up to `wait` for a call of ours still running.
    fn release_at_exit(&self, wait: Duration);
}

/// Every session started in this process (weakly: a released one goes away).
static SESSIONS: Mutex<Vec<Weak<dyn AtExit>>> = Mutex::new(Vec::new());

/// How long the exit release waits for a call of ours still running (a follower's apply).
const EXIT_WAIT: Duration = Duration::from_secs(1);

extern "C" fn note_exit() {
    if in_duckdb_cli() {
        let sessions: Vec<Arc<dyn AtExit>> = lock().iter().filter_map(Weak::upgrade).collect();
        // On a thread of its own: the exiting thread's thread-locals, DuckDB's cached settings
        // among them, were destroyed before any `atexit` handler ran (a checkpoint on it read
        // them and crashed).
        let releasing = std::thread::Builder::new().name("streamhouse-exit".into()).spawn(move || {
            for session in sessions {
                session.release_at_exit(EXIT_WAIT);
            }
        });
        if let Ok(thread) = releasing {
            let _ = thread.join();
        }
    }
    EXITING.store(true, Ordering::SeqCst);
}

/// Whether the process is exiting (our `atexit` handler ran).
pub fn exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Whether the process is DuckDB's own CLI (its executable is named `duckdb`).
fn in_duckdb_cli() -> bool {
    std::env::current_exe().is_ok_and(|exe| exe.file_name().is_some_and(|name| name == "duckdb"))
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Weak<dyn AtExit>>> {
    SESSIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// At LOAD: the session joins the exit release; the `atexit` handler is registered once.
pub fn register(session: Weak<dyn AtExit>) {
    let mut sessions = lock();
    sessions.retain(|s| s.strong_count() > 0);
    sessions.push(session);
    drop(sessions);
    ATEXIT.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn()` with the C runtime.
        unsafe { libc::atexit(note_exit) };
    });
}
