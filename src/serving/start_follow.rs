//! Starting a follower (`serving_follow`): what the follower of a source applies at each tick —
//! a Fluss table's changelog or a Paimon table's snapshots, once the layer is checked to be built
//! from it — the layer's bad-row policy recorded first, the first publish made before the call
//! returns, then the running follower swapped for the new one. The SQL function only reads its
//! arguments into a [`FollowRequest`].

use std::time::Duration;

use crate::core::error::{Error, Result};
use crate::core::quarantine::OnBadRows;
use crate::core::source::Origin;
use crate::lake::Access;
use crate::serving::meta::generation;
use crate::serving::served::{self, Mode};
use crate::serving::state::Database;
use crate::serving::{follow, publish, quarantine, stream_source};

const FUNCTION: &str = "serving_follow";

/// What `serving_follow` was asked, as one value.
pub struct FollowRequest<'a> {
    /// The source as given (trimmed).
    pub source: String,
    pub every: Duration,
    /// `publish :=`: the Paimon mart table to publish to after every apply.
    pub publish: Option<&'a str>,
    /// `on_bad_rows :=`, when given: recorded as the layer's policy before the follower starts.
    pub policy: Option<OnBadRows>,
    /// The call's sandbox and storage options (serving the source and the publish target).
    pub access: &'a Access,
    pub search_path: &'a str,
    /// How long the first publish waits for a running writer.
    pub wait: Duration,
}

/// What a started follower reports: the source it follows, what it replaced, where it publishes.
pub struct Started {
    pub source: String,
    pub every: Duration,
    pub replaced: Option<String>,
    pub publish: Option<String>,
}

/// What `source` names: a follower follows a Paimon or a Fluss table. The sandbox's refusal and
/// a bad Fluss address stand as they are; anything else is simply not a table to follow.
fn origin(source: &str, access: &Access) -> Result<Origin> {
    match Origin::of(source, &access.sandbox) {
        Ok(origin) => Ok(origin),
        Err(e @ Error::Denied { .. }) => Err(e),
        Err(e) if crate::core::stream::is_fluss(source) => Err(e),
        Err(_) => Err(follow::not_a_lake_table(source)),
    }
}

/// What the follower of `source` applies at each tick, once the layer is checked to be built
/// from it: a Fluss table's changelog, or a Paimon table's snapshots.
fn follow_apply(conn: &duckdb::Connection, source: &str, origin: &Origin, access: &Access) -> Result<follow::Apply> {
    match origin {
        Origin::Stream(address) => stream_source::follower(conn, source, address, access),
        Origin::Lake(path) => {
            let path = follow::check_source(conn, source, path, access)?;
            Ok(follow::lake_apply(source.to_string(), path, access.options.clone()))
        }
        Origin::Relation(_) => Err(follow::not_a_lake_table(source)),
    }
}

/// `on_bad_rows :=`, when given, recorded as the layer's policy before the follower starts (its
/// applies read it from serving_meta, as a follower started after a reopen does). A mart-only
/// replica has no orders to hold out: 'quarantine' is refused there.
fn keep_policy(conn: &duckdb::Connection, db: &Database, req: &FollowRequest) -> Result<()> {
    let Some(policy) = req.policy else { return Ok(()) };
    if served::mode(conn, FUNCTION)? == Mode::Mart {
        return match policy {
            OnBadRows::Quarantine => Err(Error::Refused {
                function: FUNCTION,
                problem: "on_bad_rows := 'quarantine' holds bad orders out of a fact layer; this layer is a mart-only \
                          replica (the layer that publishes its mart table holds them out)"
                    .into(),
            }),
            OnBadRows::Fail => Ok(()),
        };
    }
    db.session
        .write(FUNCTION, req.search_path, crate::core::wait::WRITER_WAIT, |conn, _| {
            quarantine::record(conn, policy, FUNCTION)
        })
        .map(|_| ())
}

/// The first publish, made now in the writer's turn as serving_publish makes it: a target it
/// refuses (not a mart table, the layer's own source, a path that cannot be created) fails the
/// call, and the follower running (if any) is kept.
fn first_publish(db: &Database, req: &FollowRequest, access: &Access, target: &str) -> Result<follow::PublishTo> {
    // A target the sandbox forbids is refused now, not by every apply in the background.
    crate::lake::check_tree(&access.sandbox, FUNCTION, &publish::target_path(FUNCTION, target)?)?;
    let mut to = follow::PublishTo {
        target: target.trim().to_string(),
        options: access.options.clone(),
        last: db.published.clone(),
        published: None,
    };
    let (published, _) = db.session.write(FUNCTION, req.search_path, req.wait, |conn, _| {
        publish::publish(conn, FUNCTION, &to.target, access, &to.last)?;
        generation(conn, FUNCTION)
    })?;
    to.published = published;
    Ok(to)
}

/// Starts the follower `req` asks for on `db` (its checks on `conn`, a reader), replacing the
/// running one.
pub fn start(conn: &duckdb::Connection, db: &Database, req: FollowRequest) -> Result<Started> {
    // The source decided once; everything below takes this value, never the string again.
    let origin = origin(&req.source, req.access)?;
    let access = db.lake_access(req.access, origin.lake());
    let apply = follow_apply(conn, &req.source, &origin, &access)?;
    keep_policy(conn, db, &req)?;
    let publish = req.publish.map(|target| first_publish(db, &req, &access, target)).transpose()?;
    let target = publish.as_ref().map(|p| p.target.clone());
    let next = follow::start(&db.session, req.source.clone(), apply, req.every, req.search_path.to_string(), publish)?;
    // Swapped under the lock, stopped outside it: stopping waits for an apply in progress,
    // and serving_status must not wait for that.
    let old = db.follower().replace(next);
    let replaced = old.map(|old| {
        let name = old.source.clone();
        old.stop();
        name
    });
    Ok(Started { source: req.source, every: req.every, replaced, publish: target })
}
