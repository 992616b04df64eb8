//! `paimon_tier_ddl(name VARCHAR) -> VARCHAR`: the Paimon lake-table DDL for a Fluss tier.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vscalar::{ScalarFunctionSignature, VScalar};
use duckdb::vtab::arrow::WritableVector;

use super::glue::scalar::invoke_rows;
use crate::core::tier;

pub struct PaimonTierDdl;

impl VScalar for PaimonTierDdl {
    type State = ();

    invoke_rows!(|a| tier::tier_ddl(&a.text(0)));

    fn signatures() -> Vec<ScalarFunctionSignature> {
        vec![ScalarFunctionSignature::exact(
            vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)],
            LogicalTypeHandle::from(LogicalTypeId::Varchar),
        )]
    }
}
