//! A source resolved for a build or a refresh: [`ResolvedSource`], the relation the load reads
//! with its columns matched to the serving contract (and, for a Paimon source, the snapshot read
//! and the parcel parked for the load), plus what resolving one needs of DuckDB: a relation's
//! columns (`describe`), DuckDB's name for a staged Arrow type, and `AnyOrder`, which lets one
//! load insert rows in any order. Which kind of source a string names is decided in
//! `core::source`; each kind is resolved by its own module (`layer`, `lake_source`,
//! `stream_source`, through `mapped` for a column map).

use duckdb::arrow::datatypes::DataType;
use duckdb::Connection;

use crate::core::error::{clean_duckdb_message, Error, Result};
use crate::core::mapping::ColumnMap;
use crate::core::quarantine::OnBadRows;
use crate::core::schema::{self, SourceColumns};
use crate::core::source::{Origin, Source};
use crate::lake::{Access, LakeTable};
use crate::serving::handoff::Parcel;

/// What `serving_build` was asked, as one value: the source as given and as decided once
/// (`Origin`), how it is read (`columns :=`, `lake :=`, the storage options and sandbox), and the
/// build's options. Every build path takes this, never a list of its parts.
#[derive(Clone, Copy)]
pub struct BuildRequest<'a> {
    /// The source as the caller wrote it (messages and the recorded source quote it).
    pub raw: &'a str,
    pub origin: &'a Origin,
    pub map: Option<&'a ColumnMap>,
    /// For a Fluss source: the Paimon warehouse it is tiered into, when the cluster does not say.
    pub lake: Option<&'a str>,
    pub access: &'a Access,
    /// Whether the build may drop tables of the serving names that streamhouse did not create.
    pub replace: bool,
    pub policy: OnBadRows,
}

/// What a build or a refresh of the fact layer reads, as its SQL function decided it once
/// (`core::source::Origin`), a Paimon table opened once for the statement. A Fluss table never
/// comes here: `stream_source` reads it.
#[derive(Clone, Copy)]
pub enum Given<'a> {
    /// A table, view or file DuckDB reads.
    Relation(&'a Source),
    /// A Paimon table.
    Lake(&'a LakeTable),
}

impl Given<'_> {
    /// The Paimon table's path, if this is one.
    pub fn lake_path(&self) -> Option<&str> {
        match self {
            Given::Lake(table) => Some(table.path()),
            Given::Relation(_) => None,
        }
    }
}

/// The source resolved and checked against the contract, ready to SELECT from.
pub struct ResolvedSource {
    pub raw: String,
    pub relation: String,
    /// With a column map: the relation read under `on_bad_rows := 'quarantine'`, each mapped
    /// expression tried (`ColumnMap::tolerant_select_list`); None: `relation` itself.
    pub tolerant: Option<String>,
    pub columns: SourceColumns,
    /// For a Paimon source: the snapshot whose merged state was read, and its commit time.
    pub lake_snapshot: Option<i64>,
    pub lake_snapshot_millis: Option<i64>,
    /// For a lake refresh: why the snapshot the layer holds is no longer the table's history
    /// (`serving::history`), so this source is the latest state read whole, to rebuild from.
    pub rebuild: Option<String>,
    /// For a Paimon source read where it is loaded: the parcel `relation` scans (withdrawn
    /// when dropped).
    pub read: Option<Parcel>,
    /// Whether the load may insert in any order (`AnyOrder`): a lake read, and the session may
    /// change that setting (`lock_configuration` forbids it).
    pub any_order: bool,
}

impl ResolvedSource {
    /// A relation DuckDB reads as it is: no lake snapshot, nothing parked, its order kept.
    pub fn relation(raw: &str, relation: String, columns: SourceColumns) -> ResolvedSource {
        ResolvedSource {
            raw: raw.into(),
            relation,
            tolerant: None,
            columns,
            lake_snapshot: None,
            lake_snapshot_millis: None,
            rebuild: None,
            read: None,
            any_order: false,
        }
    }

    /// No rows, in the serving shape (a warm-up, a Fluss table with nothing tiered and an empty
    /// log); `alias` names the empty relation.
    pub fn empty(raw: &str, alias: &str) -> Result<ResolvedSource> {
        let typed = |n: &str, t: &str| (n.to_string(), t.to_string());
        let described = [
            typed("order_id", "BIGINT"),
            typed("company", "VARCHAR"),
            typed("order_day", "DATE"),
            typed("revenue", "BIGINT"),
        ];
        let relation = format!(
            "(SELECT NULL::BIGINT AS order_id, NULL::VARCHAR AS company, NULL::DATE AS order_day, \
             NULL::BIGINT AS revenue LIMIT 0) AS {alias}"
        );
        Ok(ResolvedSource::relation(raw, relation, schema::match_columns(raw, &described)?))
    }
}

/// Lets DuckDB insert rows in any order on our connection (`preserve_insertion_order`, this
/// session only) until dropped: rows from a table function without batch indexes are
/// otherwise inserted by one thread. Scoped to one load: the statements after it (the mart's
/// CTAS from an ordered aggregate) must keep their order. DuckDB refuses the RESET inside an
/// aborted transaction, so after a failed load the caller resets once the transaction ended.
pub struct AnyOrder<'a>(&'a Connection);

impl<'a> AnyOrder<'a> {
    pub fn set(conn: &'a Connection) -> AnyOrder<'a> {
        // Only slower if refused: the load is the same either way.
        let _ = conn.execute_batch("SET SESSION preserve_insertion_order = false");
        AnyOrder(conn)
    }

    /// Whether DuckDB lets this session change the setting. Asked outside any transaction: a
    /// refused SET inside one aborts it (DuckDB 1.4 under `lock_configuration`).
    pub fn allowed(conn: &Connection) -> bool {
        let allowed = conn.execute_batch("SET SESSION preserve_insertion_order = false").is_ok();
        AnyOrder::reset(conn);
        allowed
    }

    pub fn reset(conn: &Connection) {
        let _ = conn.execute_batch("RESET SESSION preserve_insertion_order");
    }
}

impl Drop for AnyOrder<'_> {
    fn drop(&mut self) {
        AnyOrder::reset(self.0);
    }
}

/// `(name, type)` of every column of a relation, or SourceNotFound.
pub fn describe(conn: &Connection, raw: &str, relation: &str) -> Result<Vec<(String, String)>> {
    let not_found = |e: duckdb::Error| Error::SourceNotFound { source: raw.into(), detail: clean_duckdb_message(&e) };
    let mut stmt = conn.prepare_cached(&format!("DESCRIBE SELECT * FROM {relation}")).map_err(not_found)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(not_found)?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(not_found)
}

/// `CREATE OR REPLACE TEMP TABLE name (...)` with the columns of an Arrow schema, in DuckDB's
/// types: where Rust-made batches (a changelog, a lake delta) are appended.
pub fn temp_table_for(name: &str, schema: &duckdb::arrow::datatypes::Schema) -> String {
    let cols = schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", crate::core::quote::ident(f.name()), duckdb_type_name(f.data_type())))
        .collect::<Vec<_>>()
        .join(", ");
    format!("CREATE OR REPLACE TEMP TABLE {name} ({cols})")
}
/// DuckDB's name for an Arrow type, for the columns we stage (others are reported as Arrow names).
pub fn duckdb_type_name(dt: &DataType) -> String {
    match dt {
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "UTINYINT".into(),
        DataType::UInt16 => "USMALLINT".into(),
        DataType::UInt32 => "UINTEGER".into(),
        DataType::UInt64 => "UBIGINT".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p},{s})"),
        DataType::Timestamp(unit, tz) => {
            use duckdb::arrow::datatypes::TimeUnit;
            match (unit, tz) {
                (_, Some(_)) => "TIMESTAMP WITH TIME ZONE".into(),
                (TimeUnit::Second, None) => "TIMESTAMP_S".into(),
                (TimeUnit::Millisecond, None) => "TIMESTAMP_MS".into(),
                (TimeUnit::Microsecond, None) => "TIMESTAMP".into(),
                (TimeUnit::Nanosecond, None) => "TIMESTAMP_NS".into(),
            }
        }
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => "BLOB".into(),
        other => other.to_string(),
    }
}
