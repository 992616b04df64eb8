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
use crate::core::quarantine::OnBadRows;
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::serving::meta::generation;
use crate::serving::served::{self, Mode};
use crate::serving::{follow, publish, quarantine};

pub struct ServingFollow;

/// Without `every`: how often the lake is looked at.
const DEFAULT_EVERY: Duration = Duration::from_secs(1);

/// `every` in milliseconds, converted by DuckDB from the INTERVAL's text form.
fn every(ctx: &Ctx) -> Result<Duration> {
    let Some(text) = ctx.call.named.first().cloned().flatten() else { return Ok(DEFAULT_EVERY) };
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

/// What the follower of `source` applies at each tick, once the layer is checked to be built
/// from it: a Fluss table's changelog, or a Paimon table's snapshots.
fn follow_apply(ctx: &Ctx, source: &str, origin: &Origin, access: &crate::lake::Access) -> Result<follow::Apply> {
    match origin {
        #[cfg(not(duckdb14))]
        Origin::Stream(address) => crate::serving::stream_source::follower(ctx.conn, source, address, access),
        #[cfg(duckdb14)]
        Origin::Stream(_) => Err(Error::Refused {
            function: "serving_follow",
            problem: "Fluss sources need the DuckDB 1.5+ artifact (the 1.4 artifact is built without the Fluss client)"
                .into(),
        }),
        Origin::Lake(path) => {
            let path = follow::check_source(ctx.conn, source, path, access)?;
            Ok(follow::lake_apply(source.to_string(), path, access.options.clone()))
        }
        Origin::Relation(_) => Err(follow::not_a_lake_table(source)),
    }
}

/// What `source` names: a follower follows a Paimon or a Fluss table. The sandbox's refusal and
/// a bad Fluss address stand as they are; anything else is simply not a table to follow.
fn origin(source: &str, access: &crate::lake::Access) -> Result<Origin> {
    match Origin::of(source, &access.sandbox) {
        Ok(origin) => Ok(origin),
        Err(e @ Error::Denied { .. }) => Err(e),
        Err(e) if crate::core::stream::is_fluss(source) => Err(e),
        Err(_) => Err(follow::not_a_lake_table(source)),
    }
}

/// `on_bad_rows :=`, when given, recorded as the layer's policy before the follower starts (its
/// applies read it from serving_meta, as a follower started after a reopen does). A mart-only
/// replica has no orders to hold out: 'quarantine' is refused there.
fn keep_policy(ctx: &Ctx, policy: Option<OnBadRows>) -> Result<()> {
    let Some(policy) = policy else { return Ok(()) };
    if served::mode(ctx.conn, ServingFollow::NAME)? == Mode::Mart {
        return match policy {
            OnBadRows::Quarantine => Err(Error::Refused {
                function: ServingFollow::NAME,
                problem: "on_bad_rows := 'quarantine' holds bad orders out of a fact layer; this layer is a mart-only \
                          replica (the layer that publishes its mart table holds them out)"
                    .into(),
            }),
            OnBadRows::Fail => Ok(()),
        };
    }
    ctx.db
        .session
        .write(ServingFollow::NAME, &ctx.call.search_path, crate::core::wait::WRITER_WAIT, |conn, _| {
            quarantine::record(conn, policy, ServingFollow::NAME)
        })
        .map(|_| ())
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
        let every = every(ctx)?;
        let source = ctx.call.arg.trim().to_string();
        let policy = on_bad_rows(ctx, 2, Self::NAME)?;
        // The source decided once; everything below takes this value, never the string again.
        let origin = origin(&source, &ctx.call.access)?;
        let access = ctx.db.lake_access(&ctx.call.access, origin.lake());
        let apply = follow_apply(ctx, &source, &origin, &access)?;
        keep_policy(ctx, policy)?;
        let publish = match ctx.call.named.get(1).cloned().flatten() {
            Some(target) => {
                // A target the sandbox forbids is refused now, not by every apply in the background.
                crate::lake::check_tree(&access.sandbox, Self::NAME, &publish::target_path(Self::NAME, &target)?)?;
                let mut to = follow::PublishTo {
                    target: target.trim().to_string(),
                    options: access.options.clone(),
                    last: ctx.db.published.clone(),
                    published: None,
                };
                // The first publish is made now, in the writer's turn as serving_publish makes
                // it: a target it refuses (not a mart table, the layer's own source, a path that
                // cannot be created) fails this call, and the follower running (if any) is kept.
                let (published, _) =
                    ctx.db.session.write(Self::NAME, &ctx.call.search_path, ctx.call.wait, |conn, _| {
                        publish::publish(conn, Self::NAME, &to.target, &access, &to.last)?;
                        generation(conn, Self::NAME)
                    })?;
                to.published = published;
                Some(to)
            }
            None => None,
        };
        let target = publish.as_ref().map(|p| p.target.clone());
        let next = follow::start(&ctx.db.session, source.clone(), apply, every, ctx.call.search_path.clone(), publish)?;
        // Swapped under the lock, stopped outside it: stopping waits for an apply in progress,
        // and serving_status must not wait for that.
        let old = ctx.db.follower().replace(next);
        let replaced = old.map(|old| {
            let name = old.source.clone();
            old.stop();
            name
        });
        Ok(vec![vec![source.into(), (every.as_millis() as i64).into(), replaced.into(), target.into()]])
    }
}
