//! `serving_publish(target VARCHAR [, options := MAP])`: writes the layer's mart to the Paimon
//! mart table at `target` (`paimon:<dir>` or `s3://...`), created on the first publish, as one
//! commit of the groups changed since the table's current state. Returns one row. Nothing
//! local changes; it takes the writer's turn so that it never interleaves with a follower's
//! publish.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::source::Origin;
use crate::host::session::Role;
use crate::host::transaction::Transaction;
use crate::serving::publish;

pub struct ServingPublish;

impl RowsFunction for ServingPublish {
    const NAME: &'static str = "serving_publish";
    const PARAM: Option<&'static str> = Some("target");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("target", LogicalTypeId::Varchar),
        ("snapshot", LogicalTypeId::Bigint),
        ("upserted", LogicalTypeId::Bigint),
        ("deleted", LogicalTypeId::Bigint),
        ("elapsed_ms", LogicalTypeId::Double),
    ];
    const ROLE: Role = Role::Writer;
    const LAKE_OPTIONS: bool = true;

    fn write(ctx: &Ctx, _tx: &mut Transaction) -> Result<Vec<Vec<Cell>>> {
        let access =
            ctx.db.lake_access(&ctx.call.access, Origin::lake_path(&ctx.call.arg, &ctx.call.access.sandbox).as_deref());
        let s = publish::publish(ctx.conn, Self::NAME, &ctx.call.arg, &access, &ctx.db.published)?;
        Ok(vec![vec![s.target.into(), s.snapshot.into(), s.upserted.into(), s.deleted.into(), s.elapsed_ms.into()]])
    }
}
