//! `SELECT * FROM paimon_mart_ddl(name VARCHAR)`: the same `CREATE TABLE` as the scalar, one row
//! per line (`line`, `ddl`), so it reads as written in the CLI's default box mode (the table form
//! of `paimon_tier_ddl` is the pattern).

use duckdb::core::LogicalTypeId;

use super::glue::rows::{text_lines, Cell, Ctx};
use super::glue::table::RowsFunction;
use crate::core::error::Result;
use crate::core::tier;
use crate::host::session::Role;

pub struct PaimonMartDdlLines;

impl RowsFunction for PaimonMartDdlLines {
    const NAME: &'static str = "paimon_mart_ddl";
    const PARAM: Option<&'static str> = Some("name");
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] =
        &[("line", LogicalTypeId::Bigint), ("ddl", LogicalTypeId::Varchar)];
    const ROLE: Role = Role::Reader;

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        Ok(text_lines(&tier::mart_ddl(&ctx.call.arg)?))
    }
}
