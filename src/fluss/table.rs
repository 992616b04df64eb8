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

/// The last record read below a bucket's position: its offset and the commit timestamp the
/// bucket's leader gave its batch (epoch ms). An offset alone does not name a record: a cluster
/// that lost acknowledged records (a lone tablet server killed) gives their offsets to new ones,
/// whose commit time is later; the mark tells the two apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub offset: i64,
    pub committed: i64,
}

/// A log position per bucket: the next offset to read (or, for end offsets, one past the last
/// record), and, where a record was read below it, the mark of the last one. Recorded with the
/// layer as `bucket:offset[/mark_offset@committed],...` (positions recorded before marks existed
/// have none, and still read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    pub offsets: BTreeMap<i32, i64>,
    pub marks: BTreeMap<i32, Mark>,
}

impl Position {
    /// Offsets alone (end or earliest offsets, a lake snapshot's).
    pub fn of(offsets: BTreeMap<i32, i64>) -> Position {
        Position { offsets, marks: BTreeMap::new() }
    }

    pub fn encode(&self) -> String {
        let bucket = |(b, o): (&i32, &i64)| match self.marks.get(b) {
            Some(m) => format!("{b}:{o}/{}@{}", m.offset, m.committed),
            None => format!("{b}:{o}"),
        };
        self.offsets.iter().map(bucket).collect::<Vec<_>>().join(",")
    }

    pub fn decode(text: &str) -> Option<Position> {
        let mut position = Position::default();
        if text.is_empty() {
            return Some(position);
        }
        for part in text.split(',') {
            let (bucket, rest) = part.split_once(':')?;
            let bucket: i32 = bucket.parse().ok()?;
            let (offset, mark) = match rest.split_once('/') {
                Some((o, m)) => (o, Some(m)),
                None => (rest, None),
            };
            position.offsets.insert(bucket, offset.parse().ok()?);
            if let Some(mark) = mark {
                let (at, committed) = mark.split_once('@')?;
                position.marks.insert(bucket, Mark { offset: at.parse().ok()?, committed: committed.parse().ok()? });
            }
        }
        Some(position)
    }

    pub fn at(&self, bucket: i32) -> i64 {
        self.offsets.get(&bucket).copied().unwrap_or(0)
    }

    /// Records not yet read up to `end`, over all buckets.
    pub fn behind(&self, end: &Position) -> i64 {
        end.offsets.iter().map(|(b, e)| (e - self.at(*b)).max(0)).sum()
    }

    /// The sum of the offsets: one number that grows as the table's log does.
    pub fn total(&self) -> i64 {
        self.offsets.values().sum()
    }

    /// Why the log no longer holds this position (the layer's): a bucket's log now starts after
    /// it (cleaned by retention) or ends before it (records it applied are gone).
    pub fn lost(&self, earliest: &Position, end: &Position) -> Option<String> {
        for (bucket, at) in &self.offsets {
            if earliest.at(*bucket) > *at {
                return Some(format!(
                    "bucket {bucket}'s log now starts at offset {}, after the position {at} the layer reflects \
                     (retention removed records it had not applied)",
                    earliest.at(*bucket)
                ));
            }
            if let Some(e) = end.offsets.get(bucket).filter(|e| **e < *at) {
                return Some(format!(
                    "bucket {bucket}'s log now ends at offset {e}, before the position {at} the layer reflects (the \
                     cluster lost records the layer had applied)"
                ));
            }
        }
        None
    }

    /// Why whether the cluster has given this position's offsets to other records since cannot
    /// be told: a bucket past offset 0 without a mark (recorded before marks existed, or no
    /// record precedes it in the log), or whose marked record the log no longer keeps.
    pub fn uncheckable(&self, earliest: &Position) -> Option<String> {
        let cannot = "so whether the cluster has given its offsets to other records since cannot be told";
        if let Some((bucket, at)) = self.offsets.iter().find(|(b, o)| **o > 0 && !self.marks.contains_key(b)) {
            return Some(format!(
                "bucket {bucket}'s recorded position {at} names no record to check it by (recorded before \
                 streamhouse kept one, or no record precedes it in the log), {cannot}"
            ));
        }
        self.marks.iter().find(|(b, m)| m.offset < earliest.at(**b)).map(|(bucket, m)| {
            format!(
                "bucket {bucket}'s log now starts at offset {}, after the record at offset {} the layer's position \
                 is checked by, {cannot}",
                earliest.at(*bucket),
                m.offset
            )
        })
    }
}

/// The lake snapshot Fluss reports for a table: its id, the log offset up to which each bucket
/// is in it, and which call answered ('readable' or 'latest').
#[derive(Debug, Clone)]
pub struct LakePoint {
    pub snapshot: i64,
    pub offsets: Position,
    pub how: &'static str,
}

/// Where a union read starts: the lake snapshot (None: the changelog alone, from offset 0) and
/// the offset each bucket's changelog is read from; `how` is what `serving_meta.stream_read`
/// records about it.
#[derive(Debug, Clone)]
pub struct Start {
    pub lake: Option<LakePoint>,
    pub offsets: Position,
    pub how: String,
}

/// Decides where a union read starts, from the lake snapshot Fluss reports (if tiered) and the
/// log's earliest and end offsets now; `Err` says why no exact read exists.
///
/// A lake snapshot *ahead* of a bucket's log end holds records the log no longer has: the
/// cluster lost acknowledged records after tiering them (a lone tablet server killed). The two
/// copies then disagree, and streamhouse serves what Fluss holds — what its lookups answer and a
/// follower applies — so the lake is left out and the changelog read alone, which needs every
/// bucket's log to still start at offset 0; otherwise it is refused, naming the bucket.
pub fn start_of(
    lake_enabled: bool,
    point: Option<LakePoint>,
    earliest: &Position,
    end: &Position,
) -> std::result::Result<Start, String> {
    let trimmed = earliest.offsets.iter().find(|(_, first)| **first > 0).map(|(b, f)| (*b, *f));
    let log_alone = |how: String| Start { lake: None, offsets: Position::default(), how };
    let Some(point) = point else {
        return match trimmed {
            None => Ok(log_alone("log".into())),
            Some((bucket, first)) if lake_enabled => Err(format!(
                "bucket {bucket}'s log starts at offset {first}, but nothing of it is in a lake snapshot yet: the rows \
                 before it were not retained; wait for the first tiering and build again"
            )),
            Some((bucket, first)) => Err(format!(
                "the table is not tiered into a lake and bucket {bucket}'s log no longer starts at offset 0 (it starts \
                 at {first}), so its full state cannot be read; create it with 'table.datalake.enabled' = 'true'"
            )),
        };
    };
    if let Some((bucket, tiered)) = point.offsets.offsets.iter().find(|(b, o)| **o > end.at(**b)) {
        let ahead = format!(
            "lake snapshot {} holds bucket {bucket} up to offset {tiered}, but its log now ends at offset {}: the \
             cluster lost records after tiering them",
            point.snapshot,
            end.at(*bucket)
        );
        return match trimmed {
            None => Ok(log_alone(format!("log ({ahead}; the changelog alone is read, as Fluss holds it)"))),
            Some((b, first)) => Err(format!(
                "{ahead}, so the lake and the log disagree, and bucket {b}'s log no longer starts at offset 0 (it \
                 starts at {first}) to be read alone as Fluss holds it; serve the lake's copy with \
                 serving_build('paimon:<the tiered table>') instead"
            )),
        };
    }
    if let Some((bucket, first)) = earliest.offsets.iter().find(|(b, first)| **first > point.offsets.at(**b)) {
        return Err(format!(
            "bucket {bucket}'s log starts at offset {first}, after the offset {} the lake snapshot holds: the rows \
             between were not retained; wait for the next tiering and build again",
            point.offsets.at(*bucket)
        ));
    }
    Ok(Start { offsets: point.offsets.clone(), how: point.how.into(), lake: Some(point) })
}

/// Where a union read starts once its lake snapshot was found to disagree with what Fluss holds
/// (`why`, from the spot check): the changelog alone, which needs every bucket's log to still
/// start at offset 0; otherwise refused, saying both.
pub fn log_alone(snapshot: i64, earliest: &Position, why: &str) -> std::result::Result<Start, String> {
    let disagrees = format!("lake snapshot {snapshot} disagrees with what Fluss holds ({why}): the cluster lost records after tiering them and its tiering went on from the lake's offsets");
    match earliest.offsets.iter().find(|(_, first)| **first > 0) {
        None => Ok(Start {
            lake: None,
            offsets: Position::default(),
            how: format!("log ({disagrees}; the changelog alone is read, as Fluss holds it)"),
        }),
        Some((bucket, first)) => Err(format!(
            "{disagrees}, and bucket {bucket}'s log no longer starts at offset 0 (it starts at {first}) to be read \
             alone as Fluss holds it; serve the lake's copy with serving_build('paimon:<the tiered table>') instead, \
             knowing it keeps records Fluss lost"
        )),
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
    Ok(Position::of(found.into_iter().collect()))
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
/// None while nothing has been tiered.
pub fn lake_point(site: &Site) -> Result<Option<LakePoint>> {
    let admin = admin(site)?;
    if let Ok(info) = site.block_on(admin.get_lake_snapshot(&path(site), None, Some(true))) {
        let offsets = info
            .bucket_snapshots
            .iter()
            .filter_map(|b| b.log_offset.map(|o| (b.bucket_id, o)))
            .collect::<BTreeMap<i32, i64>>();
        return Ok(Some(LakePoint { snapshot: info.snapshot_id, offsets: Position::of(offsets), how: "readable" }));
    }
    match site.block_on(admin.get_latest_lake_snapshot(&path(site))) {
        Ok(s) => {
            let offsets = s.table_buckets_offset.iter().map(|(b, o)| (b.bucket_id(), *o)).collect();
            Ok(Some(LakePoint { snapshot: s.snapshot_id, offsets: Position::of(offsets), how: "latest" }))
        }
        Err(e) if e.to_string().to_ascii_lowercase().contains("snapshot") => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where a union read of the table starts (`start_of` over what the cluster reports now), with
/// the end offsets it reads up to and the log's earliest offsets. The lake snapshot is asked
/// for first: a snapshot tiered after the end offsets were taken could otherwise look ahead of
/// the log.
pub fn union_plan(site: &Site, facts: &Facts) -> Result<(Start, Position, Position)> {
    let point = if facts.lake_enabled { lake_point(site)? } else { None };
    let end = end_offsets(site, facts.buckets)?;
    let earliest = earliest_offsets(site, facts.buckets)?;
    let start = start_of(facts.lake_enabled, point, &earliest, &end).map_err(|problem| site.err(problem))?;
    Ok((start, end, earliest))
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

    fn at(pairs: &[(i32, i64)]) -> Position {
        Position::of(pairs.iter().copied().collect())
    }

    #[test]
    fn positions_round_trip_and_measure_lag() {
        let p = at(&[(0, 10), (1, 7)]);
        assert_eq!(Position::decode(&p.encode()), Some(p.clone()));
        let end = at(&[(0, 15), (1, 7), (2, 3)]);
        assert_eq!(p.behind(&end), 8);
        assert_eq!(p.total(), 17);
        assert_eq!(Position::decode("x"), None);
    }

    #[test]
    fn marks_round_trip_and_older_positions_still_read() {
        let mut p = at(&[(0, 10), (1, 7), (2, 0)]);
        p.marks.insert(0, Mark { offset: 9, committed: 1_764_912_345_678 });
        p.marks.insert(1, Mark { offset: 5, committed: 1_764_912_345_001 });
        assert_eq!(p.encode(), "0:10/9@1764912345678,1:7/5@1764912345001,2:0");
        assert_eq!(Position::decode(&p.encode()), Some(p.clone()));
        let earliest = at(&[(0, 0), (1, 0), (2, 0)]);
        assert_eq!(p.uncheckable(&earliest), None, "offset 0 needs no mark");
        // As recorded before marks existed: read, and said to be uncheckable.
        let old = Position::decode("0:10,1:7").expect("an older position");
        assert_eq!(old, at(&[(0, 10), (1, 7)]));
        let why = old.uncheckable(&earliest).expect("uncheckable");
        assert!(why.starts_with("bucket 0's recorded position 10 names no record to check it by"), "{why}");
        // A mark the log no longer keeps (retention) cannot be read back either.
        let why = p.uncheckable(&at(&[(0, 3), (1, 6)])).expect("uncheckable");
        assert!(why.contains("bucket 1's log now starts at offset 6, after the record at offset 5"), "{why}");
        for bad in ["0:10/9", "0:10/x@1", "0:10/9@", ":1", "0:"] {
            assert_eq!(Position::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_position_is_lost_when_the_log_starts_after_it_or_ends_before_it() {
        let p = at(&[(0, 10), (1, 7)]);
        assert_eq!(p.lost(&at(&[(0, 10), (1, 0)]), &at(&[(0, 10), (1, 9)])), None);
        let why = p.lost(&at(&[(0, 11)]), &at(&[(0, 12), (1, 9)])).expect("cleaned");
        assert!(why.contains("bucket 0's log now starts at offset 11, after the position 10"), "{why}");
        let why = p.lost(&Position::default(), &at(&[(0, 12), (1, 5)])).expect("shorter");
        assert!(why.contains("bucket 1's log now ends at offset 5, before the position 7"), "{why}");
    }

    fn lake(offsets: &[(i32, i64)]) -> Option<LakePoint> {
        Some(LakePoint { snapshot: 4, offsets: at(offsets), how: "latest" })
    }

    #[test]
    fn a_union_read_starts_at_the_lake_snapshot_when_the_log_holds_what_follows_it() {
        let s = start_of(true, lake(&[(0, 5), (1, 0)]), &at(&[(0, 3), (1, 0)]), &at(&[(0, 9), (1, 2)])).unwrap();
        assert_eq!((s.lake.map(|l| l.snapshot), s.offsets, s.how.as_str()), (Some(4), at(&[(0, 5), (1, 0)]), "latest"));
        // The log cleaned past the lake's offset: refused, naming the bucket.
        let e = start_of(true, lake(&[(0, 5)]), &at(&[(0, 6)]), &at(&[(0, 9)])).unwrap_err();
        assert!(e.contains("bucket 0's log starts at offset 6, after the offset 5"), "{e}");
    }

    #[test]
    fn without_a_lake_snapshot_the_log_is_read_alone_only_from_offset_0() {
        let s = start_of(false, None, &at(&[(0, 0), (1, 0)]), &at(&[(0, 9), (1, 2)])).unwrap();
        assert_eq!((s.lake.is_none(), s.offsets, s.how.as_str()), (true, Position::default(), "log"));
        let e = start_of(false, None, &at(&[(0, 0), (1, 3)]), &at(&[(0, 9), (1, 4)])).unwrap_err();
        assert!(e.contains("not tiered") && e.contains("bucket 1") && e.contains("table.datalake.enabled"), "{e}");
        let e = start_of(true, None, &at(&[(0, 2)]), &at(&[(0, 9)])).unwrap_err();
        assert!(e.contains("nothing of it is in a lake snapshot yet"), "{e}");
    }

    #[test]
    fn a_lake_snapshot_ahead_of_the_log_is_left_out_or_refused() {
        // Bucket 1 tiered to 500, its log ending at 284 after a lossy crash: the log alone, as Fluss holds it.
        let s = start_of(true, lake(&[(0, 40), (1, 500)]), &at(&[(0, 0), (1, 0)]), &at(&[(0, 40), (1, 284)])).unwrap();
        assert!(s.lake.is_none() && s.offsets == Position::default(), "{s:?}");
        assert!(
            s.how.starts_with("log (lake snapshot 4 holds bucket 1 up to offset 500") && s.how.contains("284"),
            "{}",
            s.how
        );
        // ... unless the log no longer starts at 0: refused, naming both.
        let e =
            start_of(true, lake(&[(0, 40), (1, 500)]), &at(&[(0, 7), (1, 0)]), &at(&[(0, 40), (1, 284)])).unwrap_err();
        assert!(
            e.contains("bucket 1 up to offset 500") && e.contains("bucket 0's log no longer starts at offset 0"),
            "{e}"
        );
        assert!(e.contains("serving_build('paimon:"), "{e}");
    }

    #[test]
    fn a_lake_snapshot_that_disagrees_with_fluss_is_left_out_or_refused() {
        let why = "order_id 7: Fluss holds no such order";
        let s = log_alone(4, &at(&[(0, 0), (1, 0)]), why).unwrap();
        assert!(s.lake.is_none() && s.offsets == Position::default(), "{s:?}");
        assert!(s.how.starts_with("log (lake snapshot 4 disagrees with what Fluss holds (order_id 7:"), "{}", s.how);
        let e = log_alone(4, &at(&[(0, 0), (1, 12)]), why).unwrap_err();
        assert!(
            e.contains("order_id 7") && e.contains("bucket 1's log no longer starts at offset 0 (it starts at 12)"),
            "{e}"
        );
        assert!(e.contains("serving_build('paimon:"), "{e}");
    }
}
