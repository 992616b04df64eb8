//! Lake writes, through paimon-rust's own writer: creating a table at a path (no catalog) and
//! committing rows to a primary-key table, one Paimon commit per call.
//!
//! Invariants: a path is checked against DuckDB's sandbox before anything is created or
//! written; a table is created only where nothing is (a missing or empty directory, an empty
//! prefix), never over other files; a write that fails before its commit leaves the table's
//! snapshots as they were (at worst, unreferenced data files that Paimon's orphan cleaning
//! removes). Rows arrive as Arrow 60 (DuckDB's) and cross to Arrow 58 (paimon's) through
//! `arrow_bridge`, as reads do the other way.

use std::sync::Arc;

use bytes::Bytes;
use duckdb::arrow::record_batch::RecordBatch as Batch60;
use paimon::io::FileIO;
use paimon::spec::{DataType, Schema, TableSchema};
use paimon::table::SchemaManager;

use super::arrow_bridge::to_arrow58;
use super::confine::check_tree;
use super::options::Access;
use super::site::Site;
use super::table::LakeTable;
use crate::core::error::{Error, Result};
use crate::core::location::{is_remote, local_path, MAX_PATH};

/// The table `open_or_create` makes where none is.
pub struct NewTable<'a> {
    /// Name and Paimon SQL type (`STRING`, `DECIMAL(38, 0)`, ...), in table order.
    pub columns: &'a [(&'a str, &'a str)],
    pub primary_key: &'a [&'a str],
    pub options: &'a [(&'a str, &'a str)],
}

/// What a written row does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// Inserts the row, or replaces the row of the same key.
    Upsert,
    /// Deletes the row of the same key.
    Delete,
}

impl RowKind {
    /// Paimon's row-kind byte (`+I` = 0, `-D` = 3).
    fn byte(self) -> i8 {
        match self {
            RowKind::Upsert => 0,
            RowKind::Delete => 3,
        }
    }
}

/// A Paimon SQL type from its text, as Paimon's own schema files spell it.
fn paimon_type(text: &str) -> Result<DataType> {
    serde_json::from_value(serde_json::Value::String(text.to_string()))
        .map_err(|e| Error::internal("lake", format!("the type '{text}': {e}")))
}

/// What is at a path a table would be created at.
enum Found {
    Table,
    Nothing,
}

impl LakeTable {
    /// Opens the table at `path`, first creating it as `new` says when nothing is there (a
    /// missing or empty directory, or an object-storage prefix without a schema). Returns the
    /// table and whether it was created. A directory holding other files is refused, never
    /// written into.
    pub fn open_or_create(
        function: &'static str,
        path: &str,
        access: &Access,
        new: &NewTable<'_>,
    ) -> Result<(LakeTable, bool)> {
        let place = Site::new(function, path, access);
        if path.contains('\0') {
            return Err(place.err("a path cannot contain a NUL character"));
        }
        if path.len() > MAX_PATH {
            return Err(place.err(format!("the path is longer than {MAX_PATH} bytes")));
        }
        check_tree(&access.sandbox, function, path)?;
        let remote = is_remote(path);
        let location = if remote {
            let scheme = path.split("://").next().unwrap_or("").to_ascii_lowercase();
            if scheme != "s3" && scheme != "s3a" {
                return Err(place.err(format!("the storage scheme '{scheme}://' is not supported (s3:// is)")));
            }
            path.trim_end_matches('/').to_string()
        } else {
            let dir = std::path::absolute(local_path(path)).map_err(|e| place.err(e))?;
            match local_contents(&dir) {
                Ok(Found::Table) => return Ok((LakeTable::open(function, path, access)?, false)),
                Ok(Found::Nothing) => {}
                Err(problem) => return Err(place.err(problem)),
            }
            // paimon-rust's local storage refuses `..`: hand it a path without any.
            let dir = normalize(&dir);
            // Made here so that a place that cannot hold it (read-only, missing parent rights)
            // is reported in the operating system's words, not the storage layer's.
            std::fs::create_dir_all(std::path::Path::new(&dir).join("schema"))
                .map_err(|e| place.err(format!("cannot create the table directory: {e}")))?;
            dir
        };
        let props = access.options.storage_props(path);
        let schema = table_schema(new)?;
        let created = place.block_on(remote, async {
            let file_io = FileIO::from_path(&location)?.with_props(props).build()?;
            let manager = SchemaManager::new(file_io.clone(), location.clone());
            if manager.latest().await?.is_some() {
                return Ok(false);
            }
            let schema_dir = format!("{location}/schema");
            file_io.mkdirs(&schema_dir).await?;
            let json = serde_json::to_string(&schema).map_err(|e| paimon::Error::DataInvalid {
                message: format!("cannot serialize the table schema: {e}"),
                source: None,
            })?;
            file_io.new_output(&format!("{schema_dir}/schema-0"))?.write(Bytes::from(json)).await?;
            Ok(true)
        })?;
        Ok((LakeTable::open(function, path, access)?, created))
    }

    /// The table's columns: name and Paimon SQL type (`STRING`, `DECIMAL(38, 0)`, ...), with
    /// NOT NULL dropped (Paimon makes key columns NOT NULL on its own).
    pub fn columns(&self) -> Vec<(String, String)> {
        self.table
            .schema()
            .fields()
            .iter()
            .map(|f| {
                let t = f.data_type().to_string();
                (f.name().to_string(), t.trim_end_matches(" NOT NULL").to_string())
            })
            .collect()
    }

    /// Writes `rows` (the table's columns, in its order), each with the kind at its index, as
    /// one Paimon commit by `commit_user` (what the snapshot records as its writer:
    /// `core::fact_mark`). With `replace`, the commit replaces the table's whole content with
    /// `rows` (an OVERWRITE snapshot; its files are the only live ones after it); without, no
    /// rows still make a snapshot (an empty APPEND, as a streaming writer's checkpoint with no
    /// data makes: it moves what the latest snapshot says, nothing else). Every commit is a
    /// batch commit (identifier Long.MAX_VALUE, never filtered against earlier ones). Returns
    /// the table's latest snapshot after the commit.
    pub fn commit(&self, rows: &Batch60, kinds: &[RowKind], replace: bool, commit_user: &str) -> Result<Option<i64>> {
        if rows.num_rows() != kinds.len() {
            return Err(Error::internal(self.place.function, "a row kind for every row"));
        }
        let batch = with_kinds(rows, kinds).map_err(|e| self.place.err(e))?;
        self.place.block_on(self.remote, async {
            let builder = self.table.new_write_builder().with_commit_user(commit_user)?;
            let builder = if replace { builder.with_overwrite() } else { builder };
            let mut write = builder.new_write()?;
            if batch.num_rows() > 0 {
                write.write_arrow_batch(&batch).await?;
            }
            let messages = write.prepare_commit().await?;
            if replace {
                builder.new_commit().overwrite(messages, None).await
            } else {
                builder.new_commit().with_ignore_empty_commit(false).commit(messages).await
            }
        })?;
        self.latest_snapshot()
    }
}

/// A local path with `.` and `..` folded away lexically (the directory may not exist yet).
fn normalize(dir: &std::path::Path) -> String {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for part in dir.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out.to_string_lossy().into_owned()
}

/// Whether a local directory holds a table, nothing (missing or empty), or something else.
fn local_contents(dir: &std::path::Path) -> std::result::Result<Found, String> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Err("there is a file at that path, not a directory".into()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(format!("cannot read the directory: {e}")),
    }
    if dir.join("schema").is_dir() {
        return Ok(Found::Table);
    }
    let mut entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read the directory: {e}"))?;
    if entries.next().is_some() {
        return Err(
            "the directory is not empty and is not a Paimon table (no schema/): refusing to write into it".into()
        );
    }
    Ok(Found::Nothing)
}

fn table_schema(new: &NewTable<'_>) -> Result<TableSchema> {
    let mut builder = Schema::builder();
    for (name, t) in new.columns {
        builder = builder.column(*name, paimon_type(t)?);
    }
    builder = builder.primary_key(new.primary_key.iter().copied());
    for (k, v) in new.options {
        builder = builder.option(*k, *v);
    }
    let schema = builder.build().map_err(|e| Error::internal("lake", e.to_string()))?;
    Ok(TableSchema::new(0, &schema))
}

/// Arrow 60 rows → Arrow 58 with Paimon's `_VALUE_KIND` column appended.
fn with_kinds(rows: &Batch60, kinds: &[RowKind]) -> std::result::Result<arrow_array::RecordBatch, String> {
    let batch = to_arrow58(rows)?;
    let kinds = arrow_array::Int8Array::from(kinds.iter().map(|k| k.byte()).collect::<Vec<_>>());
    let mut fields: Vec<arrow_schema::FieldRef> = batch.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(arrow_schema::Field::new(
        paimon::spec::VALUE_KIND_FIELD_NAME,
        arrow_schema::DataType::Int8,
        false,
    )));
    let mut columns = batch.columns().to_vec();
    columns.push(Arc::new(kinds));
    arrow_array::RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns).map_err(|e| e.to_string())
}
