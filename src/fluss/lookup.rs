//! Point lookups of a Fluss primary-key table: what the table holds *now* for given keys, read
//! from its key-value store rather than its log or its lake — the independent answer a union
//! read is spot-checked against (`serving::stream_source::check`).

use duckdb::arrow::record_batch::RecordBatch as Batch60;
use fluss::metadata::{DataType, TablePath};
use fluss::row::{Datum, GenericRow};

use super::log::to_arrow60;
use super::Site;
use crate::core::error::Result;

/// The current rows of `keys` (values of the table's one integer key column), projected to
/// `columns`; keys the table does not hold have no row. None when the key is not an integer
/// column (no lookup is made).
pub fn rows(site: &Site, columns: &[String], keys: &[i64]) -> Result<Option<Vec<Batch60>>> {
    let conn = site.connection()?;
    let path = TablePath::new(site.address.database.clone(), site.address.table.clone());
    let table = site.block_on(conn.get_table(&path))?;
    let info = table.get_table_info();
    let fields = info.row_type().fields();
    let Some(key) = info.get_primary_keys().first() else { return Ok(None) };
    let Some(key_field) = fields.iter().find(|f| f.name() == key.as_str()) else { return Ok(None) };
    let datum: fn(i64) -> Option<Datum<'static>> = match key_field.data_type() {
        DataType::TinyInt(_) => |k| i8::try_from(k).ok().map(Datum::Int8),
        DataType::SmallInt(_) => |k| i16::try_from(k).ok().map(Datum::Int16),
        DataType::Int(_) => |k| i32::try_from(k).ok().map(Datum::Int32),
        DataType::BigInt(_) => |k| Some(Datum::Int64(k)),
        _ => return Ok(None),
    };
    let wanted: Vec<usize> =
        columns.iter().filter_map(|c| fields.iter().position(|f| f.name() == c.as_str())).collect();
    let lookups = keys.iter().filter_map(|k| datum(*k)).map(|d| {
        let lookuper = table.new_lookup().and_then(|l| l.create_lookuper());
        async move {
            let mut lookuper = lookuper?;
            let found = lookuper.lookup(&GenericRow { values: vec![d] }).await?;
            found.to_record_batch()
        }
    });
    let found = site.block_on(async { futures::future::try_join_all(lookups).await })?;
    found
        .iter()
        .filter(|b| b.num_rows() > 0)
        .map(|b| {
            let projected = b.project(&wanted).map_err(|e| site.err(e))?;
            to_arrow60(&projected).map_err(|e| site.err(e))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}
