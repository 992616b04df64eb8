//! Arrow batches into DuckDB data chunks, a column at a time, for the types a lake read yields:
//! fixed-width values copied as one block, validity copied 64 rows per word, short strings
//! written inline into DuckDB's string slots (only strings over 12 bytes go through DuckDB's
//! string heap; an inline string view is copied as the 16 bytes it is). duckdb-rs's general conversion costs an FFI call per string and per NULL and
//! validates every decimal; a batch holding any other type still goes through it.
//!
//! Invariant: a column is written here only when its Arrow type and the vector's DuckDB type
//! (as declared at bind) have the same physical layout.

use duckdb::arrow::array::{Array, AsArray};
use duckdb::arrow::datatypes::{DataType, TimeUnit};
use duckdb::arrow::record_batch::RecordBatch;
use duckdb::core::DataChunkHandle;
use duckdb::ffi;
use duckdb::vtab::record_batch_to_duckdb_data_chunk;

/// DuckDB's `string_t`: 16 bytes, a length and 12 inline bytes (or a prefix and a pointer).
const STRING_T: usize = 16;
const INLINE: usize = 12;

/// How a column is laid into its vector.
#[derive(Clone, Copy)]
enum Layout {
    /// Values of this many bytes, copied as they are.
    Fixed(usize),
    /// DECIMAL(width <= 18) stored in a narrower integer than Arrow's i128.
    Narrow(usize),
    Text,
    /// Arrow's string view: a short value's view is DuckDB's inline `string_t` already.
    View,
}

fn layout(arrow: &DataType, vector: ffi::duckdb_vector) -> Option<Layout> {
    // SAFETY: `vector` belongs to the output chunk; the returned type handle is destroyed below.
    let mut ty = unsafe { ffi::duckdb_vector_get_column_type(vector) };
    // SAFETY: `ty` is the live handle just returned.
    let id = unsafe { ffi::duckdb_get_type_id(ty) };
    let width = if id == ffi::DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL {
        // SAFETY: as above; a DECIMAL handle has a width.
        unsafe { ffi::duckdb_decimal_width(ty) as u8 }
    } else {
        0
    };
    // SAFETY: destroys the handle we own exactly once.
    unsafe { ffi::duckdb_destroy_logical_type(&mut ty) };
    use DataType::*;
    let want = |t: ffi::DUCKDB_TYPE| id == t;
    match arrow {
        Int8 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_TINYINT) => Some(Layout::Fixed(1)),
        Int16 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_SMALLINT) => Some(Layout::Fixed(2)),
        Int32 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_INTEGER) => Some(Layout::Fixed(4)),
        Int64 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_BIGINT) => Some(Layout::Fixed(8)),
        Float32 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_FLOAT) => Some(Layout::Fixed(4)),
        Float64 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_DOUBLE) => Some(Layout::Fixed(8)),
        Date32 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_DATE) => Some(Layout::Fixed(4)),
        Timestamp(TimeUnit::Microsecond, None) if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP) => {
            Some(Layout::Fixed(8))
        }
        Timestamp(TimeUnit::Microsecond, Some(_)) if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_TIMESTAMP_TZ) => {
            Some(Layout::Fixed(8))
        }
        Decimal128(w, _) if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_DECIMAL) && *w == width => Some(match w {
            1..=4 => Layout::Narrow(2),
            5..=9 => Layout::Narrow(4),
            10..=18 => Layout::Narrow(8),
            _ => Layout::Fixed(16),
        }),
        Utf8 if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR) => Some(Layout::Text),
        Utf8View if want(ffi::DUCKDB_TYPE_DUCKDB_TYPE_VARCHAR) => Some(Layout::View),
        _ => None,
    }
}

/// Writes `batch` (at most one vector of rows) into `output`.
pub fn write(batch: &RecordBatch, output: &mut DataChunkHandle) -> Result<(), Box<dyn std::error::Error>> {
    let chunk = output.get_ptr();
    let rows = batch.num_rows();
    let vectors: Vec<ffi::duckdb_vector> = (0..batch.num_columns())
        // SAFETY: `chunk` is DuckDB's output chunk with one vector per declared column.
        .map(|i| unsafe { ffi::duckdb_data_chunk_get_vector(chunk, i as u64) })
        .collect();
    let layouts: Option<Vec<Layout>> =
        batch.columns().iter().zip(&vectors).map(|(c, &v)| layout(c.data_type(), v)).collect();
    let (Some(layouts), true) = (layouts, rows <= crate::core::VECTOR_SIZE) else {
        return record_batch_to_duckdb_data_chunk(&without_views(batch)?, output);
    };
    for ((column, &vector), layout) in batch.columns().iter().zip(&vectors).zip(layouts) {
        // SAFETY: the vector holds VECTOR_SIZE >= rows slots of the layout `layout` checked
        // against its DuckDB type; the data pointer is valid for the chunk's lifetime.
        unsafe { write_column(column.as_ref(), vector, layout, rows) };
    }
    output.set_len(rows);
    Ok(())
}

/// `batch` with string and binary views as plain arrays, for duckdb-rs's conversion.
fn without_views(batch: &RecordBatch) -> Result<RecordBatch, Box<dyn std::error::Error>> {
    use duckdb::arrow::datatypes::{Field, Schema};
    let plain = |t: &DataType| match t {
        DataType::Utf8View => Some(DataType::Utf8),
        DataType::BinaryView => Some(DataType::Binary),
        _ => None,
    };
    if !batch.schema().fields().iter().any(|f| plain(f.data_type()).is_some()) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        match plain(field.data_type()) {
            Some(t) => {
                columns.push(duckdb::arrow::compute::cast(column, &t)?);
                fields.push(Field::new(field.name(), t, field.is_nullable()));
            }
            None => {
                columns.push(column.clone());
                fields.push(field.as_ref().clone());
            }
        }
    }
    let options = duckdb::arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(RecordBatch::try_new_with_options(std::sync::Arc::new(Schema::new(fields)), columns, &options)?)
}

/// Writes a string longer than DuckDB inlines: DuckDB copies `s` into the vector's string heap.
///
/// # Safety
/// `vector` must be a writable VARCHAR vector with a slot `i`.
unsafe fn to_heap(vector: ffi::duckdb_vector, i: usize, s: &[u8]) {
    // SAFETY: per the function's contract; `s` is valid for its length during the call.
    unsafe { ffi::duckdb_vector_assign_string_element_len(vector, i as u64, s.as_ptr().cast(), s.len() as u64) };
}

/// # Safety
/// `out` must have room for `values.len()` values of `T`.
unsafe fn narrow<T>(values: &[i128], out: *mut T, cast: impl Fn(i128) -> T) {
    for (i, &v) in values.iter().enumerate() {
        // SAFETY: `i < values.len()` (contract).
        unsafe { out.add(i).write_unaligned(cast(v)) };
    }
}

/// # Safety
/// `vector` must be a writable flat vector of at least `rows` slots whose physical type is what
/// `layout` says for `column`'s Arrow type.
unsafe fn write_column(column: &dyn Array, vector: ffi::duckdb_vector, layout: Layout, rows: usize) {
    // SAFETY: per the function's contract.
    let data = unsafe { ffi::duckdb_vector_get_data(vector) } as *mut u8;
    let values = column.to_data();
    match layout {
        Layout::Fixed(size) => {
            let buffer = &values.buffers()[0];
            let from = &buffer.as_slice()[values.offset() * size..(values.offset() + rows) * size];
            // SAFETY: `data` has room for `rows` values of `size` bytes (contract); the source
            // slice holds exactly that many bytes and does not overlap DuckDB's vector.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), data, from.len()) };
        }
        Layout::Narrow(size) => {
            let decimals = column.as_primitive::<duckdb::arrow::datatypes::Decimal128Type>().values();
            // A value of DECIMAL(width) fits the narrower integer, so truncating keeps it; each
            // width is its own loop so the compiler turns it into plain stores.
            let out = data;
            match size {
                // SAFETY: the vector holds `rows` slots of 2 bytes (contract); `decimals` holds `rows` values.
                2 => unsafe { narrow(decimals, out as *mut i16, |v| v as i16) },
                // SAFETY: as above, slots of 4 bytes.
                4 => unsafe { narrow(decimals, out as *mut i32, |v| v as i32) },
                // SAFETY: as above, slots of 8 bytes.
                _ => unsafe { narrow(decimals, out as *mut i64, |v| v as i64) },
            }
        }
        Layout::Text => {
            let strings = column.as_string::<i32>();
            for i in 0..rows {
                if strings.is_null(i) {
                    continue;
                }
                let s = strings.value(i).as_bytes();
                if s.len() <= INLINE {
                    // SAFETY: slot `i` is a 16-byte string_t (contract): length, then the bytes
                    // inline, zero padded as DuckDB compares inline strings.
                    unsafe {
                        let slot = data.add(i * STRING_T);
                        std::ptr::write_bytes(slot, 0, STRING_T);
                        (slot as *mut u32).write_unaligned(s.len() as u32);
                        std::ptr::copy_nonoverlapping(s.as_ptr(), slot.add(4), s.len());
                    }
                } else {
                    // SAFETY: slot `i` of a VARCHAR vector (contract).
                    unsafe { to_heap(vector, i, s) };
                }
            }
        }
        Layout::View => {
            let strings = column.as_string_view();
            for (i, &view) in strings.views().iter().enumerate() {
                let len = view as u32 as usize;
                if strings.is_null(i) {
                    continue;
                }
                if len <= INLINE {
                    // The bytes past the value are zero in DuckDB's inline strings (it compares
                    // them); Arrow's writers zero them too, but that is not promised.
                    let kept = view & (u128::MAX >> (8 * (INLINE - len)));
                    // SAFETY: slot `i` is a 16-byte string_t (contract): length, then the bytes
                    // inline — the layout of an inline view, both little-endian.
                    unsafe { (data.add(i * STRING_T) as *mut u128).write_unaligned(kept) };
                } else {
                    // SAFETY: slot `i` of a VARCHAR vector (contract).
                    unsafe { to_heap(vector, i, strings.value(i).as_bytes()) };
                }
            }
        }
    }
    if let Some(nulls) = column.nulls().filter(|n| n.null_count() > 0) {
        // SAFETY: the vector is writable (contract); its validity mask holds ceil(rows / 64)
        // words, LSB first, 1 = valid: the layout of Arrow's bitmap read 64 bits at a time.
        unsafe {
            ffi::duckdb_vector_ensure_validity_writable(vector);
            let mask = ffi::duckdb_vector_get_validity(vector);
            let chunks = nulls.inner().bit_chunks();
            let mut w = 0;
            for word in chunks.iter() {
                *mask.add(w) = word;
                w += 1;
            }
            if chunks.remainder_len() > 0 {
                *mask.add(w) = chunks.remainder_bits();
            }
        }
    }
}
