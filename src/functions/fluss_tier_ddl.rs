//! `fluss_tier_ddl(name VARCHAR [, freshness VARCHAR]) -> VARCHAR`: the Fluss SQL `CREATE TABLE`
//! of the orders fact as a Fluss primary-key table tiered into Paimon (`core::tier`).

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vscalar::{ScalarFunctionSignature, VScalar};
use duckdb::vtab::arrow::WritableVector;

use super::glue::scalar::invoke_rows;
use crate::core::tier;

pub struct FlussTierDdl;

impl VScalar for FlussTierDdl {
    type State = ();

    invoke_rows!(|a| tier::fluss_tier_ddl(&a.text(0), (a.count() > 1).then(|| a.text(1)).as_deref()));

    fn signatures() -> Vec<ScalarFunctionSignature> {
        let t = |id| LogicalTypeHandle::from(id);
        vec![
            ScalarFunctionSignature::exact(vec![t(LogicalTypeId::Varchar)], t(LogicalTypeId::Varchar)),
            ScalarFunctionSignature::exact(
                vec![t(LogicalTypeId::Varchar), t(LogicalTypeId::Varchar)],
                t(LogicalTypeId::Varchar),
            ),
        ]
    }
}
