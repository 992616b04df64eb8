//! The lake reader: Apache Paimon tables opened and planned with the `paimon` crate (Apache
//! paimon-rust): snapshots, schemas, manifests, splits with their files, levels and deletion
//! vectors. The planned data files are read by our own reader where it applies (`native`: Parquet
//! decode, and the merge of sorted runs for deduplicate, partial-update and first-row), and by
//! paimon-rust's reader elsewhere (aggregation, `sequence.field`, older schemas, other formats,
//! object storage), split by split. Writes (`write`) go through paimon-rust's writer: one commit
//! per call.
//!
//! This folder is the lake boundary: paimon-rust errors become our `Error` here, once, named
//! after the SQL function that opened the table, with credentials scrubbed (`site`).
//!
//! paimon-rust speaks Arrow 58 and async; DuckDB's Rust binding speaks Arrow 60. Batches cross
//! over through the Arrow C Data Interface, in one module for both directions (`arrow_bridge`).
//! Metadata calls drive a small current-thread tokio runtime inside the DuckDB callback. Data is
//! read as [`Units`] — a split, or one file of a split that needs no merge — each taken by one
//! thread and read there batch by batch: `paimon_scan` and a build's load read them on DuckDB's
//! own threads (as many as its `threads`); code that folds the rows in Rust (a replica's mart
//! fold, a publish reading its mart table) on reader threads of ours feeding a bounded channel
//! (`Scan::stream`). Either way memory stays bounded by the units in flight, whatever the
//! table's size.
//!
//! The rooms:
//! - `options` — storage options and their secrets; [`Access`] (the sandbox as bound, the options).
//! - `site` — where an error happened, paimon-rust's errors converted and scrubbed, its futures driven.
//! - `confine` — DuckDB's sandbox over a table's tree and a plan's files.
//! - `table` — [`LakeTable`]: open, checks, schema, snapshots, time travel.
//! - `scan` — a read planned ([`Scan`]), its routes, the plain-Parquet shortcut, a snapshot range's changes.
//! - `units` — a planned read cut into units read on any thread; `stream` — reader threads feeding a channel.
//! - `arrow_bridge` — Arrow 58 ⇄ Arrow 60; `native` — our Parquet decode and merge; `plain` —
//!   DuckDB's own Parquet reader over a plain snapshot; `write` — creating tables and committing rows.

mod arrow_bridge;
mod confine;
pub mod native;
mod options;
mod plain;
mod scan;
mod site;
mod stream;
mod table;
mod units;
mod write;

pub use confine::check_tree;
pub use options::{Access, LakeOptions, S3_KEYS};
pub use scan::{Scan, SplitRoute};
pub use stream::BatchStream;
pub use table::{LakeTable, SnapshotInfo};
pub use units::{UnitBatches, Units};
pub use write::{NewTable, RowKind};
