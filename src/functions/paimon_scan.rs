//! `paimon_scan(path VARCHAR [, snapshot := BIGINT])`: the merged (batch) state of the Paimon
//! table at `path`, latest snapshot or the one asked for, merge engine applied by Paimon.

use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::lake_batches::{self, Batches};
use super::rows::sandbox;
use crate::error::Error;
use crate::lake::LakeTable;
use crate::sandbox::Sandbox;

const NAME: &str = "paimon_scan";

pub struct PaimonScan;

pub struct Bind {
    path: String,
    sandbox: Sandbox,
    snapshot: Option<i64>,
}

pub fn path_param(bind: &BindInfo, function: &'static str) -> Result<String, Error> {
    let v = bind.get_parameter(0);
    if v.is_null() {
        return Err(Error::NullArgument { function, parameter: "path" });
    }
    super::rows::text_arg(&v, function, "path")
}

pub fn snapshot_param(bind: &BindInfo, name: &str) -> Option<i64> {
    bind.get_named_parameter(name).filter(|v| !v.is_null()).map(|v| v.to_int64())
}

impl VTab for PaimonScan {
    type BindData = Bind;
    type InitData = Batches;

    // Bind reads only the table's schema file (no side effects), to tell DuckDB the columns.
    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        let path = path_param(bind, NAME)?;
        let sandbox = sandbox(bind);
        let table = LakeTable::open(NAME, &path, &sandbox)?;
        lake_batches::declare(bind, NAME, &*table.schema(NAME)?)?;
        Ok(Bind { path, sandbox, snapshot: snapshot_param(bind, "snapshot") })
    }

    fn init(init: &InitInfo) -> Result<Batches, Box<dyn std::error::Error>> {
        // SAFETY: bind stored a boxed `Bind` before init runs; DuckDB frees it after execution.
        let bind = unsafe { &*init.get_bind_data::<Bind>() };
        let (_, batches) = LakeTable::open(NAME, &bind.path, &bind.sandbox)?.read(NAME, bind.snapshot)?;
        Ok(Batches::new(batches))
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        func.get_init_data().emit(output)
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![("snapshot".into(), LogicalTypeHandle::from(LogicalTypeId::Bigint))])
    }
}
