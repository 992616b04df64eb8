//! `paimon_tier_upsert(name VARCHAR, id INTEGER, bal INTEGER) -> VARCHAR`: the INSERT that
//! upserts one (id, bal) into the tier table; applied in order, the latest write per id wins.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vscalar::{ScalarFunctionSignature, VScalar};
use duckdb::vtab::arrow::WritableVector;

use super::glue::scalar::invoke_rows;
use crate::core::tier;

pub struct PaimonTierUpsert;

impl VScalar for PaimonTierUpsert {
    type State = ();

    invoke_rows!(|a| tier::tier_upsert(&a.text(0), a.int(1), a.int(2)));

    fn signatures() -> Vec<ScalarFunctionSignature> {
        let t = |id| LogicalTypeHandle::from(id);
        vec![ScalarFunctionSignature::exact(
            vec![t(LogicalTypeId::Varchar), t(LogicalTypeId::Integer), t(LogicalTypeId::Integer)],
            t(LogicalTypeId::Varchar),
        )]
    }
}
