//! `paimon_scan(path VARCHAR [, snapshot := BIGINT] [, options := MAP])`: the merged (batch)
//! state of the Paimon table at `path` (a directory or `s3://...`), latest snapshot or the one
//! asked for, merge engine applied by Paimon. The table is opened once, at bind; init plans
//! the splits of the snapshot and reads them in parallel, only the columns the query uses.

use std::sync::Arc;

use duckdb::arrow::array::{ArrayRef, Int64Array};
use duckdb::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use duckdb::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use duckdb::core::{DataChunkHandle, LogicalTypeHandle, LogicalTypeId};
use duckdb::vtab::{BindInfo, InitInfo, TableFunctionInfo, VTab};

use super::glue::lake_batches::{self, BatchSource, Batches};
use super::glue::settings::sandbox;
use crate::core::error::Error;
use crate::lake::{Access, LakeTable};

const NAME: &str = "paimon_scan";

pub struct PaimonScan;

pub struct Bind {
    table: LakeTable,
    schema: SchemaRef,
    threads: usize,
    /// `reader := 'paimon-rust'`: every split read by paimon-rust (the reference reader).
    paimon_only: bool,
}

/// `batch`'s columns at `positions` (None: a row-id column DuckDB only counts).
fn lay_out(batch: &RecordBatch, positions: &[Option<usize>]) -> Result<RecordBatch, Error> {
    let mut fields = Vec::with_capacity(positions.len());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(positions.len());
    for p in positions {
        match p {
            Some(p) => {
                fields.push(batch.schema().field(*p).clone());
                columns.push(batch.column(*p).clone());
            }
            None => {
                fields.push(Field::new("rowid", DataType::Int64, false));
                columns.push(Arc::new(Int64Array::from(vec![0i64; batch.num_rows()])));
            }
        }
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| Error::internal(NAME, format!("laying out the projected columns: {e}")))
}

/// What DuckDB asks for, column by column: a table column, or a row id it only counts.
fn projection(indices: &[u64], columns: usize) -> Vec<Option<usize>> {
    indices.iter().map(|&i| usize::try_from(i).ok().filter(|&i| i < columns)).collect()
}

impl VTab for PaimonScan {
    type BindData = Bind;
    type InitData = Batches;

    // Bind reads only the table's schema (no side effects), to tell DuckDB the columns.
    fn bind(bind: &BindInfo) -> Result<Bind, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            let path = lake_batches::path_param(bind, NAME)?;
            let access = Access { sandbox: sandbox(bind), options: lake_batches::options_param(bind, NAME, &[&path])? };
            let mut table = LakeTable::open(NAME, &path, &access)?;
            table.check_readable()?;
            if let Some(id) = lake_batches::snapshot_param(bind, NAME, "snapshot")? {
                table = table.at(id)?;
            }
            let schema = table.schema()?;
            lake_batches::declare(bind, NAME, &lake_batches::paimon_table(&path), &schema)?;
            let paimon_only = lake_batches::reader_param(bind, NAME)?;
            Ok(Bind { table, schema, threads: super::glue::settings::threads(bind), paimon_only })
        })
    }

    fn init(init: &InitInfo) -> Result<Batches, Box<dyn std::error::Error>> {
        super::glue::guarded(|| {
            // SAFETY: bind stored a boxed `Bind` before init runs; DuckDB frees it after execution.
            let bind = unsafe { &*init.get_bind_data::<Bind>() };
            let wanted = projection(&init.get_column_indices(), bind.schema.fields().len());
            let mut names: Vec<String> = Vec::new();
            for &i in wanted.iter().flatten() {
                let name = bind.schema.field(i).name();
                if !names.contains(name) {
                    names.push(name.clone());
                }
            }
            if names.is_empty() {
                // Only rows are counted: read the narrowest thing that still yields every row.
                names.push(bind.table.first_key_column().unwrap_or_else(|| bind.schema.field(0).name().clone()));
            }
            let mut scan = bind.table.scan(None, None, Some(names.clone()))?;
            if bind.paimon_only {
                scan = scan.paimon_only();
            }
            let units = Arc::new(scan.into_units()?);
            // Not capped by the planned units: a file of several row groups becomes more units.
            init.set_max_threads(bind.threads.max(1) as u64);
            let positions: Vec<Option<usize>> = wanted
                .iter()
                .map(|w| w.map(|i| names.iter().position(|n| n == bind.schema.field(i).name()).unwrap_or(0)))
                .collect();
            if positions.iter().enumerate().all(|(k, p)| *p == Some(k)) && positions.len() == names.len() {
                return Ok(Batches::pulled(move || units.next()).in_statement(init));
            }
            // A row-id column (count(*)) or a column asked twice: lay each batch out as DuckDB asked.
            let positions = Arc::new(positions);
            Ok(Batches::pulled(move || {
                let positions = positions.clone();
                units.next().map(|unit| {
                    unit.map(|batches| -> BatchSource {
                        Box::new(batches.map(move |batch| batch.and_then(|b| lay_out(&b, &positions))))
                    })
                })
            })
            .in_statement(init))
        })
    }

    fn func(func: &TableFunctionInfo<Self>, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
        super::glue::guarded(|| func.get_init_data().emit(output))
    }

    fn supports_pushdown() -> bool {
        true
    }

    fn parameters() -> Option<Vec<LogicalTypeHandle>> {
        Some(vec![LogicalTypeHandle::from(LogicalTypeId::Varchar)])
    }

    fn named_parameters() -> Option<Vec<(String, LogicalTypeHandle)>> {
        Some(vec![
            ("snapshot".into(), LogicalTypeHandle::from(LogicalTypeId::Bigint)),
            (lake_batches::OPTIONS.into(), lake_batches::options_type()),
            ("reader".into(), LogicalTypeHandle::from(LogicalTypeId::Varchar)),
        ])
    }
}
