//! Living inside DuckDB's process: the extension's connections to one database (`session`),
//! the writer's explicit transaction and its lease (`transaction`), the watchdog's state
//! machine (`watchdog`), which file descriptors belong to which instance (`descriptors`), the
//! process's exit (`exit`), DuckDB's global settings as our connection reads them (`settings`:
//! the sandbox, `threads`), and the sandbox's decision on one path (`sandbox`, which resolves
//! links on the disk). The lifecycle story is told once, in `session`'s module doc. Uses only
//! `core`.

pub mod descriptors;
pub mod exit;
pub mod sandbox;
pub mod session;
pub mod settings;
pub mod transaction;
pub mod watchdog;
