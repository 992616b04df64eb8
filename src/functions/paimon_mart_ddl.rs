//! `paimon_mart_ddl(name VARCHAR) -> VARCHAR`: the Flink/Paimon `CREATE TABLE` of the mart table
//! (`company, order_day, revenue, orders`, key `(company, order_day)`, deduplicate) that
//! `serving_publish`, `streamhouse.ray.build_mart` or a Flink job fill and replicas serve.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vscalar::{ScalarFunctionSignature, VScalar};
use duckdb::vtab::arrow::WritableVector;

use super::glue::scalar::invoke_rows;
use crate::core::tier;

pub struct PaimonMartDdl;

impl VScalar for PaimonMartDdl {
    type State = ();

    invoke_rows!(|a| tier::mart_ddl(&a.text(0)));

    fn signatures() -> Vec<ScalarFunctionSignature> {
        vec![ScalarFunctionSignature::exact(
            vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)],
            LogicalTypeHandle::from(LogicalTypeId::Varchar),
        )]
    }
}
