//! `paimon_read_plan(path VARCHAR [, snapshot := BIGINT] [, options := MAP])`: how `paimon_scan`
//! (and a build from the table) reads each split of the snapshot: its bucket directory, files,
//! sorted runs, the reader (`native files`, `native merge`, `paimon-rust`) and, for
//! paimon-rust, why the native path does not take it (for a merge of runs in sequence order,
//! that it reads no sequence column).

use duckdb::core::LogicalTypeId;
use duckdb::vtab::BindInfo;

use super::glue::lake_batches::{self, TableArg};
use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::host::session::Role;
use crate::lake::LakeTable;

pub struct PaimonReadPlan;

impl RowsFunction for PaimonReadPlan {
    const NAME: &'static str = "paimon_read_plan";
    const PARAM: Option<&'static str> = Some("path");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("bucket_path", LogicalTypeId::Varchar),
        ("bucket", LogicalTypeId::Bigint),
        ("files", LogicalTypeId::Bigint),
        ("sorted_runs", LogicalTypeId::Bigint),
        ("reader", LogicalTypeId::Varchar),
        ("reason", LogicalTypeId::Varchar),
    ];
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[("snapshot", LogicalTypeId::Bigint)];
    const ROLE: Role = Role::Reader;
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("path", TableArg::Path)];

    fn bind_more(bind: &BindInfo) -> Result<()> {
        lake_batches::snapshot_param(bind, Self::NAME, "snapshot").map(drop)
    }

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let table = LakeTable::open(Self::NAME, &ctx.call.arg, &ctx.call.access)?;
        let snapshot = ctx.call.named_arg("snapshot").and_then(|s| s.parse::<i64>().ok());
        let scan = table.scan(snapshot, None, None)?;
        Ok(scan
            .routes()?
            .into_iter()
            .map(|r| {
                vec![
                    r.bucket_path.into(),
                    i64::from(r.bucket).into(),
                    (r.files as i64).into(),
                    (r.runs as i64).into(),
                    r.reader.to_string().into(),
                    r.reason.map(Cell::from).unwrap_or(Cell::Null),
                ]
            })
            .collect())
    }
}
