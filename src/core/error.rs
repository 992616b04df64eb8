//! One error type for the whole extension, by kind: a refusal of a value or of the database's
//! state (most variants), a sandbox denial (`Denied`), an internal invariant (`Internal`),
//! DuckDB's own error (`DuckDb`), a lake error (`Lake`), a Fluss error (`Fluss`). Depends on nothing else in the crate.
//!
//! Every message starts with the SQL function that failed and names the offending value, so
//! a user reading it in the CLI knows what to fix without reading our code.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A parameter that must be a constant non-NULL value was NULL.
    NullArgument { function: &'static str, parameter: &'static str },
    /// An argument streamhouse cannot take as given.
    BadArgument { function: &'static str, parameter: &'static str, value: String, problem: String },
    /// The source string is neither a table/view name nor a file path we can read.
    BadSource { source: String, reason: String },
    /// The named table/view/file does not exist (or is not visible to our connection).
    SourceNotFound { source: String, detail: String },
    /// A required column is absent from the source.
    MissingColumn { source: String, column: &'static str, found: Vec<String> },
    /// A column has a type we refuse to convert silently.
    WrongType { source: String, column: &'static str, found: String, expected: &'static str },
    /// A row violates the serving contract (NULL key, bad date, duplicate order, ...).
    BadRow { source: String, problem: String },
    /// The serving tables have not been built in this database yet.
    NotBuilt { function: &'static str },
    /// An identifier (e.g. a Paimon table name) is malformed.
    BadIdentifier { function: &'static str, name: String, reason: String },
    /// A Paimon table could not be opened or read.
    Lake { function: &'static str, path: String, problem: String },
    /// A Fluss table could not be reached or read; `table` is its `fluss://` address.
    Fluss { function: &'static str, table: String, problem: String },
    /// DuckDB's file sandbox (`enable_external_access`, `allowed_directories`, `allowed_paths`)
    /// forbids the path; `problem` names the settings.
    Denied { function: &'static str, path: String, problem: String },
    /// Something streamhouse relies on did not hold (an unexpected Arrow type, a thread that
    /// could not start); `problem` says what.
    Internal { function: String, problem: String },
    /// An error of the shared source and lake code, reported by the SQL function that ran it
    /// (its message's "serving" replaced by the function's name); the cause is `inner`.
    InFunction { function: String, inner: Box<Error> },
    /// The extension's own connection is gone (the database is being closed).
    Closed,
    /// Another build/refresh/follow apply held the writer connection for longer than we wait.
    Busy { function: String, waited: std::time::Duration },
    /// Loading the source failed inside the build transaction. `probes` are queries that find
    /// the offending row; they can only run after the rollback (the transaction is aborted).
    LoadFailed { source: String, message: String, probes: Vec<(String, Probe)> },
    /// DuckDB reported an error while running our SQL; `context` says what we were doing.
    DuckDb { context: String, message: String },
    /// The call is refused as it stands (the database's state, not a value, is the problem);
    /// `problem` says what is wrong and how to proceed.
    Refused { function: &'static str, problem: String },
}

pub type Result<T> = std::result::Result<T, Error>;

/// How a value the user gave appears in a message: whole up to 200 characters, else its start
/// and its length.
pub fn shown(value: &str) -> String {
    shown_up_to(value, 200)
}

/// A message from DuckDB may quote a user's value in turn: kept whole up to 1000 characters.
fn shown_long(value: &str) -> String {
    shown_up_to(value, 1000)
}

/// What `Error::Busy` says: a writer gave up waiting for the running one. A load that failed
/// with it read a source that itself calls a writer (`Error::is_busy_message`).
const BUSY: &str = "another build/refresh is running on this database";

/// Whether DuckDB's message of a failed statement is a writer of ours giving up waiting
/// (`Error::Busy`): reading the same source again would wait as long again.
pub fn is_busy_message(message: &str) -> bool {
    message.contains(BUSY)
}

/// A wait as a message says it: whole seconds as "120 s", less as "0.25 s", an hour as "1 hour".
pub fn shown_wait(wait: std::time::Duration) -> String {
    if wait == std::time::Duration::from_secs(3600) {
        return "1 hour".into();
    }
    let text = format!("{:.3}", wait.as_secs_f64());
    format!("{} s", text.trim_end_matches('0').trim_end_matches('.'))
}

fn shown_up_to(value: &str, keep: usize) -> String {
    match value.char_indices().nth(keep) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes in all)", &value[..cut], value.len()),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A user's value is shown, but never a megabyte of it.
        match self {
            Error::NullArgument { function, parameter } => {
                write!(f, "{function}: parameter '{parameter}' must not be NULL")
            }
            Error::BadArgument { function, parameter, value, problem } => {
                write!(f, "{function}: parameter '{parameter}' = '{}': {problem}", shown(value))
            }
            Error::BadSource { source, reason } => {
                let source_ = shown(source);
                write!(f, "serving: source '{source_}' is not usable: {reason}")
            }
            Error::SourceNotFound { source, detail } => {
                let source_ = shown(source);
                write!(f, "serving: source '{source_}' does not exist or cannot be read ({})", shown_long(detail))?;
                // Only a name can be a TEMP table or one of the session's uncommitted tables.
                if !names_a_file(source) {
                    write!(
                        f,
                        ". Note: streamhouse reads through its own connection, so TEMP tables and uncommitted \
                         rows of your session are not visible to it"
                    )?;
                }
                Ok(())
            }
            Error::MissingColumn { source, column, found } => {
                let source_ = shown(source);
                write!(f, "serving: source '{source_}' has no column '{column}' (found: {})", found.join(", "))
            }
            Error::WrongType { source, column, found, expected } => {
                let source_ = shown(source);
                write!(f, "serving: column '{column}' of source '{source_}' has type {found}, expected {expected}")
            }
            Error::BadRow { source, problem } => {
                let source_ = shown(source);
                write!(f, "serving: source '{source_}': {problem}")
            }
            Error::NotBuilt { function } => {
                write!(f, "{function}: the serving tables do not exist yet; run serving_build(source) first")
            }
            Error::BadIdentifier { function, name, reason } => {
                let name_ = shown(name);
                write!(f, "{function}: invalid table name '{name_}': {reason}")
            }
            Error::Lake { function, path, problem } | Error::Denied { function, path, problem } => {
                let path_ = shown(path);
                write!(f, "{function}: Paimon table '{path_}': {problem}")
            }
            Error::Fluss { function, table, problem } => {
                write!(f, "{function}: Fluss table '{}': {}", shown(table), shown_long(problem))
            }
            Error::Internal { function, problem } => write!(f, "{}: {}", shown_long(function), shown_long(problem)),
            Error::InFunction { function, inner } => {
                let message = inner.to_string();
                write!(f, "{function}: {}", message.strip_prefix("serving: ").unwrap_or(&message))
            }
            Error::Closed => write!(
                f,
                "streamhouse: the extension's connection to this database was released because every \
                 other connection closed; reopen the database and LOAD streamhouse again"
            ),
            Error::Busy { function, waited } => {
                write!(f, "{function}: {BUSY} (waited {} for it); try again when it has finished", shown_wait(*waited))
            }
            Error::LoadFailed { source, message, .. } => {
                let source_ = shown(source);
                write!(f, "serving: loading source '{source_}' failed: {}", shown_long(message))
            }
            Error::DuckDb { context, message } => write!(f, "{}: {}", shown_long(context), shown_long(message)),
            Error::Refused { function, problem } => write!(f, "{function}: {problem}"),
        }
    }
}

// No `source()`: an `InFunction`'s message already holds its inner error's (renamed), and
// duckdb-rs reports an error followed by each of its sources, which printed it twice.
impl std::error::Error for Error {}

/// A query that finds the row a failed load choked on; it can run only after the rollback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// NULL in this serving column; the query returns (smallest order_id, count).
    Null(&'static str),
    /// A value that does not convert; the query returns (order_id, value).
    BadValue(&'static str),
}

impl Probe {
    pub fn message(self, first: &str, second: &str) -> String {
        match self {
            Probe::Null("order_id") => format!("order_id is NULL in {second} row(s); every order needs its key"),
            Probe::Null(col) => format!("{col} is NULL in {second} row(s), e.g. order_id {first}"),
            Probe::BadValue(problem) => format!("value '{second}' (order_id {first}): {problem}"),
        }
    }
}

/// Whether a source string is a path or URL rather than a table name.
fn names_a_file(source: &str) -> bool {
    let lower = source.trim().to_ascii_lowercase();
    lower.contains(['/', '\\', '*'])
        || [".parquet", ".parq", ".csv", ".tsv", ".json", ".jsonl", ".ndjson", ".gz", ".zst"]
            .iter()
            .any(|e| lower.ends_with(e))
}

/// DuckDB's Rust binding appends "Error code 1: Unknown error code"-style noise; keep only the message.
pub fn clean_duckdb_message(e: &duckdb::Error) -> String {
    match e {
        // Only the first line: DuckDB appends "LINE 1: <our generated SQL>" caret context.
        duckdb::Error::DuckDBFailure(_, Some(msg)) => msg.lines().next().unwrap_or_default().to_string(),
        other => {
            let s = other.to_string();
            match s.find("Error code ") {
                Some(i) if i > 0 => s[..i].trim_end_matches([':', ' ']).to_string(),
                _ => s,
            }
        }
    }
}

impl Error {
    /// The error as the SQL function `function` reports it: a message of the shared source and
    /// lake code (which does not know which function runs it) starts with that function's name
    /// instead of "serving".
    pub fn in_function(self, function: &str) -> Error {
        if function != "serving" && self.to_string().starts_with("serving: ") {
            Error::InFunction { function: function.to_string(), inner: Box::new(self) }
        } else {
            self
        }
    }

    /// An internal invariant that did not hold, in `function`.
    pub fn internal(function: impl Into<String>, problem: impl Into<String>) -> Self {
        Error::Internal { function: function.into(), problem: problem.into() }
    }

    pub fn duckdb(context: impl Into<String>, e: &duckdb::Error) -> Self {
        Error::DuckDb { context: context.into(), message: clean_duckdb_message(e) }
    }
}
