//! `SELECT * FROM paimon_mart_job(fact VARCHAR, mart VARCHAR [, checkpoint := VARCHAR])`: the
//! same Flink SQL as the scalar, one row per line (`line`, `sql`), for the CLI's default box
//! mode. The checkpoint interval is named here: DuckDB's C API registers one signature per table
//! function name, so there is no optional third positional argument.

use duckdb::core::LogicalTypeId;
use duckdb::vtab::BindInfo;

use super::glue::rows::{text_lines, Cell, Ctx};
#[cfg(duckdb14)]
use super::glue::settings::ValueExt;
use super::glue::table::RowsFunction;
use crate::core::error::{Error, Result};
use crate::core::tier;
use crate::host::session::Role;

pub struct PaimonMartJobLines;

const CHECKPOINT: &str = "checkpoint";

impl RowsFunction for PaimonMartJobLines {
    const NAME: &'static str = "paimon_mart_job";
    const PARAM: Option<&'static str> = Some("fact");
    const MORE_PARAMS: &'static [&'static str] = &["mart"];
    const NAMED: &'static [(&'static str, LogicalTypeId)] = &[(CHECKPOINT, LogicalTypeId::Varchar)];
    const COLUMNS: &'static [(&'static str, LogicalTypeId)] =
        &[("line", LogicalTypeId::Bigint), ("sql", LogicalTypeId::Varchar)];
    const ROLE: Role = Role::Reader;

    /// An explicit NULL interval is refused (it would otherwise mean the default).
    fn bind_more(bind: &BindInfo) -> Result<()> {
        match bind.get_named_parameter(CHECKPOINT) {
            Some(v) if v.is_null() => Err(Error::NullArgument { function: Self::NAME, parameter: CHECKPOINT }),
            _ => Ok(()),
        }
    }

    fn rows(ctx: &Ctx) -> Result<Vec<Vec<Cell>>> {
        let call = ctx.call;
        Ok(text_lines(&tier::mart_job(&call.arg, &call.more[0], call.named_arg(CHECKPOINT))?))
    }
}
