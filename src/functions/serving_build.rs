//! `serving_build(source VARCHAR [, replace := BOOLEAN] [, on_bad_rows := VARCHAR])`: (re)creates
//! fct_orders + mart_daily in one transaction and returns one summary row; a bad order fails the
//! build, or, under `on_bad_rows := 'quarantine'`, is held out (`core::quarantine`). It never
//! replaces a table it did not create unless `replace := true`, and a build from another source
//! stops the follower (the layer no longer reflects what it follows): the result's
//! `stopped_following` names it.

use duckdb::core::LogicalTypeId;

use super::glue::lake_batches::TableArg;
use super::glue::rows::{on_bad_rows, Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::host::transaction::Transaction;
use crate::serving::refresh;
use crate::serving::source::BuildRequest;

pub struct ServingBuild;

impl RowsFunction for ServingBuild {
    const NAME: &'static str = "serving_build";
    const PARAM: Option<&'static str> = Some("source");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("fct_rows", LogicalTypeId::Bigint),
        ("mart_rows", LogicalTypeId::Bigint),
        ("companies", LogicalTypeId::Bigint),
        ("days", LogicalTypeId::Bigint),
        ("total_revenue", LogicalTypeId::Hugeint),
        ("source", LogicalTypeId::Varchar),
        ("lake_snapshot", LogicalTypeId::Bigint),
        ("elapsed_ms", LogicalTypeId::Double),
        ("stopped_following", LogicalTypeId::Varchar),
        ("quarantined", LogicalTypeId::Bigint),
    ];
    const ROLE: Role = Role::Writer;
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[
        ("replace", LogicalTypeId::Boolean),
        ("lake", LogicalTypeId::Varchar),
        ("on_bad_rows", LogicalTypeId::Varchar),
    ];
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("source", TableArg::Source)];
    const LAKE_NAMED: &'static [&'static str] = &["lake"];
    const COLUMN_MAP: bool = true;

    fn write(ctx: &Ctx, tx: &mut Transaction) -> Result<Vec<Vec<Cell>>> {
        // A build starts the layer's policy afresh: 'fail' unless given.
        let policy = on_bad_rows(ctx, Self::NAME)?.unwrap_or_default();
        // replace := true lets a build drop tables of the serving names that it did not create.
        let replace = ctx.call.named_arg("replace").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        // lake := the Paimon warehouse a Fluss table is tiered into (when the cluster does not say).
        let lake = ctx.call.named_arg("lake");
        // The source decided once; everything below takes this value, never the string again.
        let origin = Origin::of(&ctx.call.arg, &ctx.call.access.sandbox)?;
        let access = ctx.db.lake_access(&ctx.call.access, origin.lake());
        let request = BuildRequest {
            raw: &ctx.call.arg,
            origin: &origin,
            map: ctx.call.columns.as_ref(),
            lake,
            access: &access,
            replace,
            policy,
        };
        let s = crate::serving::build(ctx.conn, &request, tx)?;
        tx.after_commit(ctx.conn, refresh::warm);
        // Stopped once the build commits (an interrupted build changes nothing, follower included).
        let stopped = ctx.db.followed_elsewhere(&s.source, &access.sandbox);
        if let Some(source) = stopped.clone() {
            let db = ctx.db.clone();
            tx.after_commit(ctx.conn, move |_| db.stop_following(&source));
        }
        Ok(vec![vec![
            s.fct_rows.into(),
            s.mart_rows.into(),
            s.companies.into(),
            s.days.into(),
            s.total_revenue.into(),
            s.source.into(),
            s.lake_snapshot.into(),
            s.elapsed_ms.into(),
            stopped.into(),
            s.quarantined.into(),
        ]])
    }
}
