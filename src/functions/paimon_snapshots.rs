//! `paimon_snapshots(path VARCHAR [, options := MAP])`: one row per snapshot of a Paimon table: id, commit time,
//! commit kind and Paimon's record counts (file-level totals, not merged rows).

use duckdb::core::LogicalTypeId;

use super::glue::lake_batches::TableArg;
use super::glue::rows::{Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::host::session::Role;
use crate::lake::LakeTable;

pub struct PaimonSnapshots;

impl RowsFunction for PaimonSnapshots {
    const NAME: &'static str = "paimon_snapshots";
    const PARAM: Option<&'static str> = Some("path");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] = &[
        ("snapshot_id", LogicalTypeId::Bigint),
        ("commit_time", LogicalTypeId::Timestamp),
        ("commit_kind", LogicalTypeId::Varchar),
        ("total_records", LogicalTypeId::Bigint),
        ("delta_records", LogicalTypeId::Bigint),
        ("changelog_records", LogicalTypeId::Bigint),
    ];
    const ROLE: Role = Role::Reader;
    const LAKE_OPTIONS: bool = true;
    const TABLE_ARGS: &'static [(&'static str, TableArg)] = &[("path", TableArg::Path)];

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let table = LakeTable::open(Self::NAME, &ctx.call.arg, &ctx.call.access)?;
        Ok(table
            .snapshots()?
            .into_iter()
            .map(|s| {
                vec![
                    s.id.into(),
                    Cell::Timestamp(s.time_millis * 1000),
                    s.commit_kind.into(),
                    s.total_records.into(),
                    s.delta_records.into(),
                    s.changelog_records.into(),
                ]
            })
            .collect())
    }
}
