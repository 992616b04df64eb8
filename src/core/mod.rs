//! Pure logic: what a source string names, the contract a source must meet and the SQL of the
//! serving tables, the mart arithmetic of a refresh, what a bad row gets (`quarantine`), when a lake refresh may merge a delta itself, the duplicate check, the dashboard's
//! question and its SQL, the Fluss tier DDL, which fact state a published mart commit carries, how long a writer waits
//! for another, quoting and
//! locations, and the one error type. Nothing here holds a DuckDB connection, calls paimon or
//! looks at the file system (what a source string names asks a `source::Look` for that); everything is
//! unit-tested in place. Modules here use only each other (and `error` uses none of them).

pub mod dashboard;
pub mod delta;
pub mod dupcheck;
pub mod error;
pub mod fact_mark;
pub mod lineage;
pub mod location;
pub mod mapping;
pub mod mart;
pub mod quarantine;
pub mod quote;
pub mod schema;
pub mod source;
pub mod stream;
pub mod tier;
pub mod wait;

/// DuckDB's standard vector size: a data chunk never holds more rows, so batches handed to
/// DuckDB are cut to it.
pub const VECTOR_SIZE: usize = 2048;
