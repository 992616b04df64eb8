//! `paimon_mart_job(fact VARCHAR, mart VARCHAR [, checkpoint VARCHAR]) -> VARCHAR`: the Flink SQL
//! of the streaming job that keeps the mart table equal to the fact's mart (the fact's changes
//! normalized by Flink into before- and after-images, a streaming GROUP BY upserting whole groups
//! into the deduplicate mart, committed every `checkpoint`, '10 s' by default).

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vscalar::{ScalarFunctionSignature, VScalar};
use duckdb::vtab::arrow::WritableVector;

use super::glue::scalar::invoke_rows;
use crate::core::tier;

pub struct PaimonMartJob;

impl VScalar for PaimonMartJob {
    type State = ();

    invoke_rows!(|a| tier::mart_job(&a.text(0), &a.text(1), (a.count() > 2).then(|| a.text(2)).as_deref()));

    fn signatures() -> Vec<ScalarFunctionSignature> {
        let t = |id| LogicalTypeHandle::from(id);
        vec![
            ScalarFunctionSignature::exact(
                vec![t(LogicalTypeId::Varchar), t(LogicalTypeId::Varchar)],
                t(LogicalTypeId::Varchar),
            ),
            ScalarFunctionSignature::exact(
                vec![t(LogicalTypeId::Varchar), t(LogicalTypeId::Varchar), t(LogicalTypeId::Varchar)],
                t(LogicalTypeId::Varchar),
            ),
        ]
    }
}
