//! `serving_unfollow()`: stops the follower (after an apply in progress) and returns what it
//! followed and the lake snapshot the serving layer reflects now.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::host::session::Role;
use crate::serving::status;

pub struct ServingUnfollow;

impl RowsFunction for ServingUnfollow {
    const NAME: &'static str = "serving_unfollow";
    const PARAM: Option<&'static str> = None;
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("followed", LogicalTypeId::Varchar),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("applies", LogicalTypeId::Bigint),
        ("last_error", LogicalTypeId::Varchar),
    ];
    const ROLE: Role = Role::Reader;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let stopped = ctx.db.follower().take();
        // Nothing followed: no row (a row of NULLs would read as a follower of nothing).
        let Some(f) = stopped else { return Ok(Vec::new()) };
        let (source, progress) = (Some(f.source.clone()), f.stop());
        // Read after the stop: includes an apply that was running when we were called.
        let snapshot = status::status(ctx.conn).ok().and_then(|s| s.lake_snapshot);
        Ok(vec![vec![source.into(), snapshot.into(), (progress.applies as i64).into(), progress.last_error.into()]])
    }
}
