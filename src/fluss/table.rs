//! What a Fluss table is, as a serving source needs it: its columns and primary key, its buckets
//! and their log offsets, and the lake snapshot Fluss's tiering has committed for it.

use std::collections::BTreeMap;

use fluss::client::FlussAdmin;
use fluss::metadata::TablePath;
use fluss::rpc::message::OffsetSpec;

use super::Site;
use crate::core::error::Result;

/// A Fluss table's shape and lake tiering.
#[derive(Debug, Clone)]
pub struct Facts {
    pub columns: Vec<String>,
    pub primary_keys: Vec<String>,
    pub buckets: i32,
    /// `'table.datalake.enabled' = 'true'`: Fluss tiers it into a Paimon table of the same path.
    pub lake_enabled: bool,
    pub partitioned: bool,
}

/// A log position per bucket: the next offset to read (or, for end offsets, one past the last
/// record). Recorded with the layer as `bucket:offset,...`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position(pub BTreeMap<i32, i64>);

impl Position {
    pub fn encode(&self) -> String {
        self.0.iter().map(|(b, o)| format!("{b}:{o}")).collect::<Vec<_>>().join(",")
    }

    pub fn decode(text: &str) -> Option<Position> {
        if text.is_empty() {
            return Some(Position::default());
        }
        text.split(',')
            .map(|p| p.split_once(':').and_then(|(b, o)| Some((b.parse().ok()?, o.parse().ok()?))))
            .collect::<Option<BTreeMap<i32, i64>>>()
            .map(Position)
    }

    pub fn at(&self, bucket: i32) -> i64 {
        self.0.get(&bucket).copied().unwrap_or(0)
    }

    /// Records not yet read up to `end`, over all buckets.
    pub fn behind(&self, end: &Position) -> i64 {
        end.0.iter().map(|(b, e)| (e - self.at(*b)).max(0)).sum()
    }

    /// The sum of the offsets: one number that grows as the table's log does.
    pub fn total(&self) -> i64 {
        self.0.values().sum()
    }
}

fn path(site: &Site) -> TablePath {
    TablePath::new(site.address.database.clone(), site.address.table.clone())
}

fn admin(site: &Site) -> Result<std::sync::Arc<FlussAdmin>> {
    let conn = site.connection()?;
    site.within(|| conn.get_admin())
}

/// The table's columns, key, buckets and tiering.
pub fn facts(site: &Site) -> Result<Facts> {
    let admin = admin(site)?;
    let info = site.block_on(admin.get_table_info(&path(site)))?;
    Ok(Facts {
        columns: info.row_type().fields().iter().map(|f| f.name().to_string()).collect(),
        primary_keys: info.primary_keys.clone(),
        buckets: info.num_buckets,
        lake_enabled: info.properties.get("table.datalake.enabled").is_some_and(|v| v.eq_ignore_ascii_case("true")),
        partitioned: !info.partition_keys.is_empty(),
    })
}

/// The table's columns as Arrow 60 (DuckDB's), as Fluss's client types them.
pub fn schema(site: &Site) -> Result<duckdb::arrow::datatypes::SchemaRef> {
    let admin = admin(site)?;
    let info = site.block_on(admin.get_table_info(&path(site)))?;
    let schema59 = fluss::record::to_arrow_schema(info.row_type()).map_err(|e| site.err(e))?;
    let ffi = arrow_schema_59::ffi::FFI_ArrowSchema::try_from(schema59.as_ref()).map_err(|e| site.err(e))?;
    // SAFETY: FFI_ArrowSchema is the #[repr(C)] struct of the Arrow C Data Interface in both
    // arrow-rs versions; moving it bitwise hands its ownership (and release callback) over.
    let ffi = unsafe {
        std::mem::transmute::<arrow_schema_59::ffi::FFI_ArrowSchema, duckdb::arrow::ffi::FFI_ArrowSchema>(ffi)
    };
    let schema = duckdb::arrow::datatypes::Schema::try_from(&ffi).map_err(|e| site.err(e))?;
    Ok(std::sync::Arc::new(schema))
}

/// Every bucket's offset of `spec` (earliest retained, or the log end).
fn offsets(site: &Site, buckets: i32, spec: OffsetSpec) -> Result<Position> {
    let admin = admin(site)?;
    let ids: Vec<i32> = (0..buckets).collect();
    let found = site.block_on(admin.list_offsets(&path(site), &ids, spec))?;
    Ok(Position(found.into_iter().collect()))
}

pub fn end_offsets(site: &Site, buckets: i32) -> Result<Position> {
    offsets(site, buckets, OffsetSpec::Latest)
}

pub fn earliest_offsets(site: &Site, buckets: i32) -> Result<Position> {
    offsets(site, buckets, OffsetSpec::Earliest)
}

/// The lake snapshot Fluss's tiering committed for the table and the log offset up to which
/// each bucket is in it. Asked for the *readable* snapshot first (Fluss 1.0; the latest one
/// may lose rows of tables with deletion vectors), then the latest committed one (0.9 servers);
/// None while nothing has been tiered. `how` says which answered.
pub fn lake_point(site: &Site) -> Result<Option<(i64, Position, &'static str)>> {
    let admin = admin(site)?;
    if let Ok(info) = site.block_on(admin.get_lake_snapshot(&path(site), None, Some(true))) {
        let offsets = info
            .bucket_snapshots
            .iter()
            .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
            .collect::<BTreeMap<i32, i64>>();
        return Ok(Some((info.snapshot_id, Position(offsets), "readable")));
    }
    match site.block_on(admin.get_latest_lake_snapshot(&path(site))) {
        Ok(s) => {
            let offsets = s.table_buckets_offset.iter().map(|(b, o)| (b.bucket_id(), *o)).collect();
            Ok(Some((s.snapshot_id, Position(offsets), "latest")))
        }
        Err(e) if e.to_string().to_ascii_lowercase().contains("snapshot") => Ok(None),
        Err(e) => Err(e),
    }
}

/// The Paimon warehouse the cluster tiers into (`datalake.paimon.warehouse` of its
/// configuration), when the cluster tells its configuration.
pub fn lake_warehouse(site: &Site) -> Result<Option<String>> {
    let admin = admin(site)?;
    let Ok(configs) = site.block_on(admin.describe_cluster_configs()) else { return Ok(None) };
    Ok(configs.into_iter().find(|c| c.config_key == "datalake.paimon.warehouse").and_then(|c| c.config_value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_round_trip_and_measure_lag() {
        let p = Position(BTreeMap::from([(0, 10), (1, 7)]));
        assert_eq!(Position::decode(&p.encode()), Some(p.clone()));
        let end = Position(BTreeMap::from([(0, 15), (1, 7), (2, 3)]));
        assert_eq!(p.behind(&end), 8);
        assert_eq!(p.total(), 17);
        assert_eq!(Position::decode("x"), None);
    }
}
