//! `SELECT * FROM paimon_tier_ddl(name VARCHAR)`: the same DDL as the scalar, one row per line
//! (`line`, `ddl`), so it reads as written in the CLI's default box mode. DuckDB keeps table and
//! scalar functions in separate catalog entries, so both forms share the name.

use duckdb::core::LogicalTypeId;

use super::glue::rows::{text_lines, Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::tier;
use crate::host::session::Role;

pub struct PaimonTierDdlLines;

impl RowsFunction for PaimonTierDdlLines {
    const NAME: &'static str = "paimon_tier_ddl";
    const PARAM: Option<&'static str> = Some("name");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] =
        &[("line", LogicalTypeId::Bigint), ("ddl", LogicalTypeId::Varchar)];
    const ROLE: Role = Role::Reader;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        Ok(text_lines(&tier::tier_ddl(&ctx.call.arg)?))
    }
}
