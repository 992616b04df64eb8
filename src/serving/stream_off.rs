//! `stream_source` in the DuckDB 1.4 artifact, which is built without the Fluss client: the same
//! entry points, each refusing a Fluss source in the same words, so that no other module needs a
//! `cfg` of its own for it (`serving/mod.rs` chooses this file for 1.4).

use duckdb::Connection;

use crate::core::error::{Error, Result};
use crate::core::stream::FlussAddress;
use crate::host::transaction::Transaction;
use crate::lake::Access;
use crate::serving::follow::Apply;
use crate::serving::layer::BuildSummary;
use crate::serving::source::BuildRequest;

/// Why a Fluss source cannot be served by this artifact.
const NO_CLIENT: &str =
    "Fluss sources need the DuckDB 1.5+ artifact (the 1.4 artifact is built without the Fluss client)";

pub fn build(_: &Connection, req: &BuildRequest, _: &FlussAddress, _: &mut Transaction) -> Result<BuildSummary> {
    Err(Error::BadSource { source: req.raw.into(), reason: NO_CLIENT.into() })
}

pub fn follower(_: &Connection, _: &str, _: &FlussAddress, _: &Access) -> Result<Apply> {
    Err(Error::Refused { function: "serving_follow", problem: NO_CLIENT.into() })
}

/// A Fluss layer's position and lag: unknown here (no client to ask).
pub fn lag(_: &str, _: Option<&str>, _: &Access) -> Option<(i64, Option<i64>)> {
    None
}
