//! The decode of one Parquet data file: only the columns asked for, deleted rows skipped by a
//! row selection built from the file's deletion vector, each column handed on in the type the
//! table's schema gives it (what DuckDB was told at bind).
//!
//! A file this decoder cannot read exactly (a column missing, a type it would have to convert
//! with a judgement) is answered by `Unsupported` before any row is read, so the caller can
//! hand that file to paimon-rust instead.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
    RowSelector,
};
use parquet::arrow::ProjectionMask;
use parquet::file::reader::ChunkReader;

/// Why a file was not decoded.
#[derive(Debug)]
pub enum Refusal {
    /// The file needs what this decoder does not do: read it with paimon-rust.
    Unsupported(String),
    /// The file could not be read at all.
    Failed(String),
}

/// A file's batches, laid out as `schema` (the columns asked for, in that order).
pub struct FileBatches {
    inner: ParquetRecordBatchReader,
    /// For each wanted column, its position in the decoded batch and whether it needs a cast.
    layout: Vec<(usize, bool)>,
    schema: SchemaRef,
}

/// Types that decode to another Arrow encoding of the same values (e.g. a string view).
fn same_values(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let text = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    let bytes = |t: &DataType| matches!(t, Binary | LargeBinary | BinaryView);
    (text(from) && text(to)) || (bytes(from) && bytes(to))
}

/// A file's footer, read once and checked against the columns a read asks for: what reading
/// any of its row groups needs.
#[derive(Clone)]
pub struct Footer {
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
    /// For each wanted column, its position in the decoded batch and whether it needs a cast.
    layout: Vec<(usize, bool)>,
    schema: SchemaRef,
}

/// `field` with text as `Utf8View` and bytes as `BinaryView` (what this decoder yields for them).
pub fn as_view(field: Field) -> Field {
    let view = match field.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 => DataType::Utf8View,
        DataType::Binary | DataType::LargeBinary => DataType::BinaryView,
        _ => return field,
    };
    field.with_data_type(view)
}

/// Reads and checks the footer of `reader` for the columns of `schema`.
pub fn footer<T: ChunkReader>(reader: &T, schema: SchemaRef) -> Result<Footer, Refusal> {
    // The table's schema decides the types, not an Arrow schema a writer embedded.
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let failed = |e: parquet::errors::ParquetError| Refusal::Failed(e.to_string());
    let mut meta = ArrowReaderMetadata::load(reader, options.clone()).map_err(failed)?;
    // Text and bytes asked for as views are decoded straight into views: a short value is
    // written once, into its view, where a plain array copies it into a buffer first.
    let wanted = |name: &str| schema.field_with_name(name).ok().map(|f| f.data_type().clone());
    let mut hinted = false;
    let fields: Vec<Field> = meta
        .schema()
        .fields()
        .iter()
        .map(|f| {
            let view = match (f.data_type(), wanted(f.name())) {
                (DataType::Utf8 | DataType::LargeUtf8, Some(DataType::Utf8View)) => Some(DataType::Utf8View),
                (DataType::Binary | DataType::LargeBinary, Some(DataType::BinaryView)) => Some(DataType::BinaryView),
                _ => None,
            };
            hinted |= view.is_some();
            f.as_ref().clone().with_data_type(view.unwrap_or_else(|| f.data_type().clone()))
        })
        .collect();
    if hinted {
        let hint = Arc::new(Schema::new_with_metadata(fields, meta.schema().metadata().clone()));
        meta = ArrowReaderMetadata::try_new(meta.metadata().clone(), options.with_schema(hint)).map_err(failed)?;
    }
    let file_schema = meta.schema().clone();
    let mut roots: Vec<usize> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let Some((i, found)) = file_schema.column_with_name(field.name()) else {
            return Err(Refusal::Unsupported(format!("the file has no column {}", field.name())));
        };
        if found.data_type() != field.data_type() && !same_values(found.data_type(), field.data_type()) {
            return Err(Refusal::Unsupported(format!(
                "column {} is stored as {} where the table reads {}",
                field.name(),
                found.data_type(),
                field.data_type()
            )));
        }
        roots.push(i);
    }
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let layout = roots
        .iter()
        .zip(schema.fields())
        .map(|(i, f)| {
            let at = sorted.binary_search(i).expect("projected");
            (at, file_schema.field(*i).data_type() != f.data_type())
        })
        .collect();
    let mask = ProjectionMask::roots(meta.parquet_schema(), sorted.iter().copied());
    Ok(Footer { meta, mask, layout, schema })
}

impl Footer {
    /// Whether the file's column names are distinct ignoring case: DuckDB resolves names
    /// without case, so a reader that selects columns by name could take the wrong one.
    pub fn names_distinct_ignoring_case(&self) -> bool {
        let mut names: Vec<String> = self.meta.schema().fields().iter().map(|f| f.name().to_lowercase()).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        names.len() == all
    }

    pub fn row_groups(&self) -> usize {
        self.meta.metadata().num_row_groups()
    }

    /// Row group `g`'s first row and row count.
    fn rows_of(&self, g: usize) -> (u64, u64) {
        let groups = self.meta.metadata().row_groups();
        let count = |r: &parquet::file::metadata::RowGroupMetaData| r.num_rows().max(0) as u64;
        (groups[..g].iter().map(count).sum(), count(&groups[g]))
    }

    /// Decodes `reader` (the file this footer is of) — one row group, or all of them — skipping
    /// the row positions in `deleted` (ascending, file-wide).
    pub fn read<T: ChunkReader + 'static>(
        &self,
        reader: T,
        row_group: Option<usize>,
        deleted: Option<&[u64]>,
        batch_size: usize,
    ) -> Result<FileBatches, Refusal> {
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, self.meta.clone())
            .with_projection(self.mask.clone())
            .with_batch_size(batch_size);
        let (first, rows) = match row_group {
            Some(g) => {
                builder = builder.with_row_groups(vec![g]);
                self.rows_of(g)
            }
            None => (0, self.meta.metadata().file_metadata().num_rows().max(0) as u64),
        };
        if let Some(deleted) = deleted.filter(|d| !d.is_empty()) {
            builder = builder.with_row_selection(selection(deleted, first, rows));
        }
        let inner = builder.build().map_err(|e| Refusal::Failed(e.to_string()))?;
        Ok(FileBatches { inner, layout: self.layout.clone(), schema: self.schema.clone() })
    }
}

/// Rows `first..first + rows` without the `deleted` positions (ascending, possibly repeated),
/// as runs relative to `first`.
pub fn selection(deleted: &[u64], first: u64, rows: u64) -> RowSelection {
    let mut selectors = Vec::new();
    let mut at = 0u64;
    let from = deleted.partition_point(|&d| d < first);
    for &d in &deleted[from..] {
        let d = d - first;
        if d < at {
            continue;
        }
        if d >= rows {
            break;
        }
        if d > at {
            selectors.push(RowSelector::select((d - at) as usize));
        }
        selectors.push(RowSelector::skip(1));
        at = d + 1;
    }
    if rows > at {
        selectors.push(RowSelector::select((rows - at) as usize));
    }
    selectors.into()
}

impl Iterator for FileBatches {
    type Item = Result<RecordBatch, String>;
    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.inner.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e.to_string())),
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.layout.len());
        for (&(at, cast), field) in self.layout.iter().zip(self.schema.fields()) {
            let column = batch.column(at).clone();
            columns.push(if cast {
                match arrow_cast::cast(&column, field.data_type()) {
                    Ok(c) => c,
                    Err(e) => return Some(Err(format!("converting column {}: {e}", field.name()))),
                }
            } else {
                column
            });
        }
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        Some(RecordBatch::try_new_with_options(self.schema.clone(), columns, &options).map_err(|e| e.to_string()))
    }
}

/// The schema of the columns a read asks a file for: `fields`, then the system columns asked
/// for (sequence number, row kind).
pub fn read_schema(fields: &[Field], sequence: bool, kind: bool) -> SchemaRef {
    let mut all: Vec<Field> = fields.to_vec();
    if sequence {
        all.push(Field::new(SEQUENCE, DataType::Int64, false));
    }
    if kind {
        all.push(Field::new(KIND, DataType::Int8, false));
    }
    Arc::new(Schema::new(all))
}

/// Paimon's deletion-vector formats: v1 (`BitmapDeletionVector`, a 32-bit Roaring bitmap after
/// a big-endian magic) and v2 (`Bitmap64DeletionVector`, a little-endian magic, then a portable
/// 64-bit Roaring map: a bucket count, and per bucket its high 32 bits and a 32-bit bitmap).
/// Both start with the big-endian length of magic + bitmap.
const DV_MAGIC: u32 = 1_581_511_376;
const DV_MAGIC_64: u32 = 1_681_511_377;

/// The deleted row positions (ascending) of one deletion-vector entry, `bytes` starting at its
/// length prefix (extra bytes after it are ignored).
pub fn deletion_positions(bytes: &[u8]) -> Result<Vec<u64>, String> {
    let bad = |why: &str| Err(format!("malformed deletion vector: {why}"));
    if bytes.len() < 8 {
        return bad("shorter than its header");
    }
    let length = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    let magic = &bytes[4..8];
    let Some(end) = (4usize).checked_add(length).filter(|&e| e >= 8 && e <= bytes.len()) else {
        return bad("its length runs past the entry");
    };
    let mut data = &bytes[8..end];
    let read32 = |data: &mut &[u8]| roaring::RoaringBitmap::deserialize_from(data).map_err(|e| e.to_string());
    if u32::from_be_bytes(magic.try_into().expect("4 bytes")) == DV_MAGIC {
        return Ok(read32(&mut data)?.iter().map(u64::from).collect());
    }
    if u32::from_le_bytes(magic.try_into().expect("4 bytes")) != DV_MAGIC_64 {
        return bad("unknown magic number");
    }
    if data.len() < 8 {
        return bad("no bucket count");
    }
    let buckets = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
    data = &data[8..];
    let mut out = Vec::new();
    let mut last: Option<u32> = None;
    for _ in 0..buckets {
        if data.len() < 4 {
            return bad("a bucket key is missing");
        }
        let high = u32::from_le_bytes(data[0..4].try_into().expect("4 bytes"));
        if last.is_some_and(|l| l >= high) {
            return bad("bucket keys out of order");
        }
        last = Some(high);
        data = &data[4..];
        let low = read32(&mut data)?;
        out.extend(low.iter().map(|v| (u64::from(high) << 32) | u64::from(v)));
    }
    Ok(out)
}

pub const SEQUENCE: &str = "_SEQUENCE_NUMBER";
pub const KIND: &str = "_VALUE_KIND";

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(magic: [u8; 4], bitmap: &[u8]) -> Vec<u8> {
        let mut out = ((bitmap.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&magic);
        out.extend_from_slice(bitmap);
        out.extend_from_slice(&[0, 0, 0, 0]); // CRC, not checked
        out
    }

    #[test]
    fn both_deletion_vector_formats_decode() {
        let bitmap: roaring::RoaringBitmap = [1u32, 5, 70_000].into_iter().collect();
        let mut bytes = Vec::new();
        bitmap.serialize_into(&mut bytes).unwrap();
        let v1 = entry(DV_MAGIC.to_be_bytes(), &bytes);
        assert_eq!(deletion_positions(&v1).unwrap(), vec![1, 5, 70_000]);
        let mut map = 2u64.to_le_bytes().to_vec();
        map.extend_from_slice(&0u32.to_le_bytes());
        map.extend_from_slice(&bytes);
        map.extend_from_slice(&1u32.to_le_bytes());
        map.extend_from_slice(&bytes);
        let v2 = entry(DV_MAGIC_64.to_le_bytes(), &map);
        assert_eq!(
            deletion_positions(&v2).unwrap(),
            vec![1, 5, 70_000, (1 << 32) | 1, (1 << 32) | 5, (1 << 32) | 70_000]
        );
        assert!(deletion_positions(&entry([9, 9, 9, 9], &bytes)).unwrap_err().contains("magic"));
        assert!(deletion_positions(&v1[..10]).unwrap_err().contains("length"));
    }

    #[test]
    fn deletion_positions_become_skips() {
        let sel: Vec<RowSelector> = selection(&[0, 3, 4, 9, 12], 0, 10).into();
        let expect = vec![
            RowSelector::skip(1),
            RowSelector::select(2),
            RowSelector::skip(1),
            RowSelector::skip(1),
            RowSelector::select(4),
            RowSelector::skip(1),
        ];
        let rows = |s: &[RowSelector]| -> Vec<bool> {
            s.iter().flat_map(|x| std::iter::repeat_n(!x.skip, x.row_count)).collect()
        };
        assert_eq!(rows(&sel), rows(&expect));
        assert_eq!(rows(&sel).iter().filter(|k| **k).count(), 6);
        // A row group's share: rows 10..15 of the file, positions file-wide.
        let sel: Vec<RowSelector> = selection(&[3, 10, 12, 14, 15, 20], 10, 5).into();
        assert_eq!(rows(&sel), vec![false, true, false, true, false]);
    }
}
