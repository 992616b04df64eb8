//! The writer's transaction as a value. A writer's work runs inside `Transaction::run`, which
//! leaves the transaction open on success; its owner decides, in the open, when it commits: a
//! SQL function hands it to its `Lease`, committed when DuckDB first pulls the result (so an
//! interrupted statement rolls back instead of committing behind the caller), and the follower
//! commits at once. Work that must wait for the commit (caching what was written, stopping a
//! follower) is queued on the transaction with `after_commit`.

use duckdb::Connection;

use crate::core::error::{Error, Result};

/// Work to do once a transaction has committed.
pub type AfterCommit = Box<dyn FnOnce(&Connection) + Send>;

/// A writer's transaction: not begun, or open with what waits for its commit.
#[derive(Default)]
#[must_use = "an open transaction must be committed or rolled back"]
pub struct Transaction {
    open: bool,
    after_commit: Vec<AfterCommit>,
}

impl Transaction {
    pub fn new() -> Transaction {
        Transaction::default()
    }

    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Runs `f` inside BEGIN: an error rolls everything back; success leaves the transaction
    /// open for the owner to commit (one transaction per writer call).
    pub fn run<R>(&mut self, conn: &Connection, f: impl FnOnce() -> Result<R>) -> Result<R> {
        conn.execute_batch("BEGIN TRANSACTION").map_err(|e| Error::duckdb("streamhouse: BEGIN", &e))?;
        match f() {
            Ok(v) => {
                self.open = true;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Runs `action` once the transaction commits, or now if none is open.
    pub fn after_commit(&mut self, conn: &Connection, action: impl FnOnce(&Connection) + Send + 'static) {
        if self.open {
            self.after_commit.push(Box::new(action));
        } else {
            action(conn);
        }
    }

    /// Commits (a failed COMMIT rolls back and changes nothing), then runs what waited for it.
    pub fn commit(self, conn: &Connection) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        conn.execute_batch("COMMIT").map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            Error::duckdb("streamhouse: COMMIT failed, nothing was changed", &e)
        })?;
        for action in self.after_commit {
            action(conn);
        }
        Ok(())
    }

    /// Undoes everything; what waited for the commit never runs.
    pub fn rollback(self, conn: &Connection) {
        if self.open {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
}

/// Runs `f` in a transaction committed at once: one consistent snapshot for a multi-statement
/// read, or a write nobody defers.
pub fn in_transaction<R>(conn: &Connection, f: impl FnOnce() -> Result<R>) -> Result<R> {
    let mut tx = Transaction::new();
    let v = tx.run(conn, f)?;
    tx.commit(conn)?;
    Ok(v)
}
