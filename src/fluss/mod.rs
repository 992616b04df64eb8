//! The Fluss boundary: Apache Fluss's own Rust client (`fluss-rs`), its errors converted once
//! here, its Arrow 59 batches handed over as Arrow 60 (DuckDB's).
//!
//! Invariants:
//! - One long-lived Tokio runtime for every Fluss call of the process (the client's background
//!   tasks need one), and one connection per bootstrap address, made on first use and dropped
//!   after a failed call so the next one reconnects.
//! - Every call is bounded (`CALL_TIMEOUT`): an unreachable cluster is a clear error naming the
//!   address within seconds, never a hang of the caller's statement.
//! - Fluss is network access: refused when DuckDB's `enable_external_access` is off.
//!
//! `table` answers what a table is (its columns, key, buckets, lake tiering); `log` reads a
//! bounded or tailing range of its changelog; `lookup` asks its key-value store for given keys.

pub mod log;
pub mod lookup;
pub mod table;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use fluss::client::FlussConnection;
use fluss::config::Config;

use crate::core::error::{Error, Result};
use crate::core::stream::FlussAddress;
use crate::host::sandbox::Sandbox;

/// How long one call to the cluster may take before it is reported as unanswered.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("streamhouse-fluss")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::internal("fluss", format!("cannot start the Fluss client's runtime: {e}")))
}

fn connections() -> std::sync::MutexGuard<'static, HashMap<String, Arc<FlussConnection>>> {
    static CONNECTIONS: OnceLock<Mutex<HashMap<String, Arc<FlussConnection>>>> = OnceLock::new();
    CONNECTIONS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a Fluss call happens: the function and table it serves, for its errors.
#[derive(Clone)]
pub struct Site {
    pub function: &'static str,
    pub address: FlussAddress,
}

impl Site {
    /// The site of `function` reading `address`, refused when the sandbox forbids network access.
    pub fn new(function: &'static str, address: FlussAddress, sandbox: &Sandbox) -> Result<Site> {
        if !sandbox.external_access {
            return Err(Error::Refused {
                function,
                problem: format!(
                    "reading the Fluss table '{}' is network access, and enable_external_access is false",
                    address.uri()
                ),
            });
        }
        Ok(Site { function, address })
    }

    pub fn err(&self, problem: impl std::fmt::Display) -> Error {
        Error::Fluss { function: self.function, table: self.address.uri(), problem: problem.to_string() }
    }

    /// fluss-rs's error in words a SQL user can act on.
    fn fluss_err(&self, e: fluss::error::Error) -> Error {
        let text = e.to_string();
        let lower = text.to_ascii_lowercase();
        if lower.contains("table") && (lower.contains("not exist") || lower.contains("notexist")) {
            return self.err(format!(
                "no such table '{}' in the cluster at {} ({text})",
                self.address.path(),
                self.address.bootstrap
            ));
        }
        if lower.contains("connect") || lower.contains("refused") || lower.contains("broken pipe") {
            return self.err(format!("cannot reach the Fluss cluster at {} ({text})", self.address.bootstrap));
        }
        self.err(text)
    }

    /// Runs one call on the Fluss runtime, within `CALL_TIMEOUT`.
    pub fn block_on<T>(&self, fut: impl Future<Output = fluss::error::Result<T>>) -> Result<T> {
        self.block_on_within(CALL_TIMEOUT, fut)
    }

    pub fn block_on_within<T>(&self, limit: Duration, fut: impl Future<Output = fluss::error::Result<T>>) -> Result<T> {
        let outcome = runtime()?.block_on(async { tokio::time::timeout(limit, fut).await });
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.forget_connection();
                Err(self.fluss_err(e))
            }
            Err(_) => {
                self.forget_connection();
                Err(self.err(format!(
                    "the Fluss cluster at {} did not answer within {} s",
                    self.address.bootstrap,
                    limit.as_secs()
                )))
            }
        }
    }

    /// Runs `f` inside the Fluss runtime's context: the client's synchronous calls that spawn
    /// background tasks (a log scanner's) need one.
    pub fn within<T>(&self, f: impl FnOnce() -> fluss::error::Result<T>) -> Result<T> {
        let _entered = runtime()?.enter();
        f().map_err(|e| self.fluss_err(e))
    }

    /// The connection to this site's cluster (made on first use).
    pub fn connection(&self) -> Result<Arc<FlussConnection>> {
        if let Some(c) = connections().get(&self.address.bootstrap) {
            return Ok(c.clone());
        }
        let config = Config {
            bootstrap_servers: self.address.bootstrap.clone(),
            connect_timeout_ms: 5_000,
            // A fetch that finds nothing new waits this long on the server before it answers, even
            // when records arrive meanwhile: Fluss's 500 ms default was most of a follower's lag.
            scanner_log_fetch_wait_max_time_ms: 50,
            // A follower's tick applies one poll: let a burst be one refresh, not many.
            scanner_log_max_poll_records: 10_000,
            ..Config::default()
        };
        let conn = Arc::new(self.block_on(FlussConnection::new(config))?);
        connections().insert(self.address.bootstrap.clone(), conn.clone());
        Ok(conn)
    }

    fn forget_connection(&self) {
        connections().remove(&self.address.bootstrap);
    }
}
