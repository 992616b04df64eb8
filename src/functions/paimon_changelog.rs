//! `paimon_changelog(path VARCHAR [, from_snapshot := BIGINT] [, options := MAP])`: the bounded streaming view of
//! a Paimon table: every change from the first snapshot (or `from_snapshot`) to the latest, in
//! commit order, as `(snapshot_id, row_kind, <table columns>)`. It stops at the latest snapshot.

use std::sync::Arc;

use duckdb::arrow::array::{ArrayRef, Int64Array};
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::glue::lake_batches::{self, Batches};
use super::glue::settings::sandbox;
use crate::core::error::Error;
use crate::lake::{Access, LakeTable};

const NAME: &str = "paimon_changelog";

pub struct PaimonChangelog;

pub struct Bind {
    table: LakeTable,
    from: Option<i64>,
    schema: Arc<Schema>,
}

fn output_schema(table: &Schema) -> Arc<Schema> {
    let mut fields =
        vec![Field::new("snapshot_id", DataType::Int64, false), Field::new("row_kind", DataType::Utf8, false)];
    fields.extend(table.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(fields))
}

impl VTab for PaimonChangelog {
    type BindData = Bind;
    type InitData = Batches;

    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            let path = lake_batches::path_param(bind, NAME)?;
            let access = Access { sandbox: sandbox(bind), options: lake_batches::options_param(bind, NAME, &[&path])? };
            let table = LakeTable::open(NAME, &path, &access)?;
            table.check_readable()?;
            let schema = output_schema(&*table.schema()?);
            lake_batches::declare(bind, NAME, &lake_batches::paimon_table(&path), &schema)?;
            Ok(Bind { table, from: lake_batches::snapshot_param(bind, NAME, "from_snapshot")?, schema })
        })
    }

    fn init(init: &InitInfo) -> Result<Batches, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            // SAFETY: bind stored a boxed `Bind` before init runs; DuckDB frees it after execution.
            let bind = unsafe { &*init.get_bind_data::<Bind>() };
            let snapshots = bind.table.snapshots()?;
            let (Some(first), Some(last)) = (snapshots.first().map(|s| s.id), snapshots.last().map(|s| s.id)) else {
                return Ok(Batches::empty());
            };
            let from = bind.from.unwrap_or(first);
            if from < first || from > last {
                return Err(Box::new(Error::Lake {
                    function: NAME,
                    path: bind.table.path().to_string(),
                    problem: format!("from_snapshot {from} is outside the table's snapshots {first}..{last}"),
                }));
            }
            let schema = bind.schema.clone();
            Ok(Batches::new(bind.table.changes(from, last).map(move |item| {
                let (id, batch) = item?;
                // The audit log is `rowkind` followed by the table's columns.
                let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![id; batch.num_rows()]))];
                columns.extend(batch.columns().iter().cloned());
                RecordBatch::try_new(schema.clone(), columns).map_err(|e| Error::internal(NAME, e.to_string()))
            }))
            .in_statement(init))
        })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        super::glue::guarded(|| func.get_init_data().emit(output))
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![
            ("from_snapshot".into(), LogicalTypeHandle::from(LogicalTypeId::Bigint)),
            (lake_batches::OPTIONS.into(), lake_batches::options_type()),
        ])
    }
}
