//! DuckDB's own Parquet reader over a plain snapshot (every split readable as it is stored: see
//! [`super::native::plain_files`]): the SQL that reads it with exactly the columns and types a
//! read of the table gives. `FROM 'paimon:<dir>'` and a build's load use it.

use arrow_schema::{DataType, Field, TimeUnit};

use crate::core::quote;

/// The DuckDB type `paimon_scan` declares for `t`, for the types whose Parquet form DuckDB's
/// reader turns into that same type (a time zone, a unit other than microseconds, nested types:
/// None, left to `paimon_scan`).
fn sql_type(t: &DataType) -> Option<String> {
    use DataType::*;
    Some(
        match t {
            Boolean => "BOOLEAN",
            Int8 => "TINYINT",
            Int16 => "SMALLINT",
            Int32 => "INTEGER",
            Int64 => "BIGINT",
            Float32 => "FLOAT",
            Float64 => "DOUBLE",
            Date32 => "DATE",
            Timestamp(TimeUnit::Microsecond, None) => "TIMESTAMP",
            Utf8 | LargeUtf8 | Utf8View => "VARCHAR",
            Binary | LargeBinary | BinaryView => "BLOB",
            Decimal128(width, scale) if (1..=38).contains(width) && *scale >= 0 => {
                return Some(format!("DECIMAL({width}, {scale})"))
            }
            _ => return None,
        }
        .to_string(),
    )
}

/// `SELECT` of `fields`, each cast to its declared type (a no-op DuckDB drops when the file's
/// type is that type already), from `read_parquet` over `files` — with every option that could
/// change a value pinned, whatever the session's defaults, and named by its schema
/// (`system.main`) so that a macro of the user's called `read_parquet` cannot stand in for it.
/// None when a column's type is not one `sql_type` knows, or a path holds a character
/// `read_parquet` would expand as a glob.
pub fn read_parquet_sql(fields: &[Field], files: &[String]) -> Option<String> {
    if files.is_empty() || files.iter().any(|f| f.contains(['*', '?', '[', '{'])) {
        return None;
    }
    let columns: Vec<String> = fields
        .iter()
        .map(|f| {
            let name = quote::ident(f.name());
            sql_type(f.data_type()).map(|t| format!("CAST({name} AS {t}) AS {name}"))
        })
        .collect::<Option<_>>()?;
    let list: Vec<String> = files.iter().map(|f| quote::literal(f)).collect();
    Some(format!(
        "SELECT {} FROM system.main.read_parquet([{}], binary_as_string := false, hive_partitioning := false, \
         union_by_name := false)",
        columns.join(", "),
        list.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_cast_to_its_declared_type_and_every_name_quoted() {
        let fields = vec![
            Field::new("order_id", DataType::Int64, false),
            Field::new("a \"b\"", DataType::Utf8View, true),
            Field::new("tax", DataType::Decimal128(18, 2), true),
            Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        ];
        let sql = read_parquet_sql(&fields, &["/w/it's/f.parquet".to_string(), "/w/g.parquet".to_string()]).unwrap();
        assert_eq!(
            sql,
            "SELECT CAST(\"order_id\" AS BIGINT) AS \"order_id\", CAST(\"a \"\"b\"\"\" AS VARCHAR) AS \"a \"\"b\"\"\", \
             CAST(\"tax\" AS DECIMAL(18, 2)) AS \"tax\", CAST(\"at\" AS TIMESTAMP) AS \"at\" \
             FROM system.main.read_parquet(['/w/it''s/f.parquet', '/w/g.parquet'], binary_as_string := false, \
             hive_partitioning := false, union_by_name := false)"
        );
    }

    #[test]
    fn types_and_paths_the_parquet_reader_could_read_otherwise_are_left_to_paimon_scan() {
        let one = |t: DataType| vec![Field::new("c", t, true)];
        let files = ["/w/f.parquet".to_string()];
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        assert!(read_parquet_sql(&one(zoned), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Timestamp(TimeUnit::Millisecond, None)), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Decimal128(40, 2)), &files).is_none());
        assert!(read_parquet_sql(&one(DataType::Int64), &[]).is_none());
        for glob in ["/w/*.parquet", "/w/f?.parquet", "/w/[ab].parquet", "/w/{a}.parquet"] {
            assert!(read_parquet_sql(&one(DataType::Int64), &[glob.to_string()]).is_none(), "{glob}");
        }
        assert!(read_parquet_sql(&one(DataType::Int64), &files).is_some());
    }
}
