//! `serving_follow(source VARCHAR, every := INTERVAL, publish := VARCHAR, on_bad_rows := VARCHAR)`:
//! applies every new snapshot of the Paimon table the layer was built from, in the background, one
//! atomic refresh per apply (a bad order stops it, or, with `on_bad_rows := 'quarantine'`, recorded
//! as the layer's policy, is held out), and with `publish` writes the mart to that Paimon mart
//! table after every apply (as `serving_publish` does; the call's `options` serve both tables) —
//! the first time before the call returns, so a target serving_publish would refuse is refused
//! here, the running follower kept. Calling it again replaces the follower. Returns what is
//! followed and where it publishes.

use std::time::Duration;

use duckdb::core::LogicalTypeId;

use super::glue::lake_batches::TableArg;
use super::glue::rows::{on_bad_rows, Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::{Error, Result};
use crate::host::session::Role;
use crate::serving::follow;
use crate::serving::start_follow::{self, FollowRequest};

pub struct ServingFollow;

/// Without `every`: how often the lake is looked at.
const DEFAULT_EVERY: Duration = Duration::from_secs(1);

/// `every` in milliseconds, converted by DuckDB from the INTERVAL's text form.
fn every(ctx: &Ctx) -> Result<Duration> {
    let Some(text) = ctx.call.named_arg("every") else { return Ok(DEFAULT_EVERY) };
    let micros: i64 = ctx
        .conn
        .query_row("SELECT epoch_us(TIMESTAMP '1970-01-01' + CAST(? AS INTERVAL))", [&text], |r| r.get(0))
        .map_err(|e| Error::duckdb("serving_follow: reading 'every'", &e))?;
    let every = Duration::from_micros(u64::try_from(micros).unwrap_or(0));
    if every < follow::MIN_EVERY {
        return Err(Error::Refused {
            function: "serving_follow",
            problem: format!(
                "every := INTERVAL '{text}' is too short: the minimum is {} ms",
                follow::MIN_EVERY.as_millis()
            ),
        });
    }
    Ok(every)
}

impl RowsFunction for ServingFollow {
    const NAME: &'static str = "serving_follow";
    const PARAM: Option<&'static str> = Some("source");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("following", LogicalTypeId::Varchar),
        ("follow_every_ms", LogicalTypeId::Bigint),
        ("replaced", LogicalTypeId::Varchar),
        ("publish", LogicalTypeId::Varchar),
    ];
    // The follower itself takes the writer; starting it only reads serving_meta.
    const ROLE: Role = Role::Reader;
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[
        ("every", LogicalTypeId::Interval),
        ("publish", LogicalTypeId::Varchar),
        ("on_bad_rows", LogicalTypeId::Varchar),
    ];
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("source", TableArg::Source)];
    const LAKE_NAMED: &'static [&'static str] = &["publish"];

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let request = FollowRequest {
            source: ctx.call.arg.trim().to_string(),
            every: every(ctx)?,
            publish: ctx.call.named_arg("publish"),
            policy: on_bad_rows(ctx, Self::NAME)?,
            access: &ctx.call.access,
            search_path: &ctx.call.search_path,
            wait: ctx.call.wait,
        };
        let s = start_follow::start(ctx.conn, ctx.db, request)?;
        Ok(vec![vec![s.source.into(), (s.every.as_millis() as i64).into(), s.replaced.into(), s.publish.into()]])
    }
}
