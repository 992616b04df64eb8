//! Output side of the lake table functions: Arrow record batches emitted into DuckDB data
//! chunks, at most one vector (2048 rows) at a time.

use std::sync::Mutex;

use duckdb::arrow::record_batch::RecordBatch;
use duckdb::core::DataChunkHandle;
use duckdb::vtab::{record_batch_to_duckdb_data_chunk, to_duckdb_logical_type, BindInfo};

use crate::error::{Error, Result};

const CHUNK: usize = 2048;

/// Declares one DuckDB column per Arrow field.
pub fn declare(bind: &BindInfo, function: &'static str, schema: &duckdb::arrow::datatypes::Schema) -> Result<()> {
    if schema.fields().is_empty() {
        return Err(Error::DuckDb {
            context: function.into(),
            message: "the Paimon table's schema has no columns".into(),
        });
    }
    for field in schema.fields() {
        let ty = to_duckdb_logical_type(field.data_type()).map_err(|e| Error::DuckDb {
            context: function.into(),
            message: format!("column '{}' has a type DuckDB cannot hold ({}): {e}", field.name(), field.data_type()),
        })?;
        bind.add_result_column(field.name(), ty);
    }
    Ok(())
}

pub struct Batches {
    batches: Vec<RecordBatch>,
    /// (batch index, row offset) of the next row to emit.
    cursor: Mutex<(usize, usize)>,
}

impl Batches {
    pub fn new(batches: Vec<RecordBatch>) -> Self {
        Batches { batches: batches.into_iter().filter(|b| b.num_rows() > 0).collect(), cursor: Mutex::new((0, 0)) }
    }

    pub fn emit(&self, output: &mut DataChunkHandle) -> std::result::Result<(), Box<dyn std::error::Error>> {
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let (index, offset) = *cursor;
        let Some(batch) = self.batches.get(index) else {
            output.set_len(0);
            return Ok(());
        };
        let len = (batch.num_rows() - offset).min(CHUNK);
        record_batch_to_duckdb_data_chunk(&batch.slice(offset, len), output)?;
        *cursor = if offset + len == batch.num_rows() { (index + 1, 0) } else { (index, offset + len) };
        Ok(())
    }
}
