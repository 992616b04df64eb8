//! Opening a Paimon table at a path (no catalog) and what the table says about itself: its
//! schema, keys and options, its snapshots, a snapshot's commit time and kind, and the table as
//! of one snapshot. Opening checks, before paimon-rust reads anything, that DuckDB's sandbox
//! permits the table's tree (`confine`) and that nothing in a local tree can hang or exhaust the
//! reader (a FIFO, a device, a symlink loop, a runaway metadata file); a feature this reader
//! would not honour is refused by name when the rows are read, never silently.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use duckdb::arrow::datatypes::SchemaRef as Schema60;
use paimon::catalog::Identifier;
use paimon::io::FileIO;
use paimon::table::SchemaManager;
use paimon::Table;

use super::arrow_bridge::to_arrow60;
use super::confine::check_tree;
use super::options::Access;
use super::site::Site;
use crate::core::error::Result;
use crate::core::location::{is_remote, local_path, MAX_PATH};
use crate::host::sandbox::Sandbox;

/// Paimon's JSON metadata (schemas, snapshots, hints) is small; paimon-rust reads such a file
/// whole, so a runaway one (a device, a huge file) is refused before it can exhaust memory.
const MAX_METADATA_BYTES: u64 = 64 << 20;

/// An opened Paimon table.
pub struct LakeTable {
    pub(super) table: Table,
    pub(super) place: Site,
    pub(super) remote: bool,
    /// Set when the table was opened as of one snapshot (with that snapshot's schema).
    pinned: Option<i64>,
    /// Why the table's rows cannot be read (a feature refused by name); its snapshots can be.
    unreadable: Option<String>,
    /// DuckDB's sandbox as the statement was bound: every file a read plans must pass it too.
    pub(super) sandbox: Sandbox,
}

/// One row of `paimon_snapshots`.
#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    pub id: i64,
    pub time_millis: i64,
    pub commit_kind: String,
    pub total_records: Option<i64>,
    pub delta_records: Option<i64>,
    pub changelog_records: Option<i64>,
}

/// Refuses a table whose tree holds anything paimon-rust must not open: a FIFO (its open blocks
/// forever), a socket or device (`/dev/zero` never ends), a symlink loop, or an oversized
/// metadata file. Looks at file types and sizes only, and at the first bytes of manifests:
/// returns why the table's data cannot be read (ORC manifests), if so — its snapshots can.
fn check_files(dir: &Path) -> std::result::Result<Option<String>, String> {
    let mut unreadable = None;
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let p = entry.path();
            let shown = p.strip_prefix(dir).unwrap_or(&p).display().to_string();
            let metadata_file = ["schema", "snapshot"].iter().any(|m| p.parent().is_some_and(|d| d.ends_with(m)));
            // The listing's own file type needs no syscall; a symlink is followed (stat), and
            // so is a metadata file, whose size is checked.
            let (is_dir, is_file, len) = match entry.file_type() {
                Ok(t) if t.is_dir() => (true, false, 0),
                Ok(t) if t.is_file() && !metadata_file => (false, true, 0),
                _ => match std::fs::metadata(&p) {
                    Ok(meta) => (meta.is_dir(), meta.is_file(), meta.len()),
                    // A writer's temporary file renamed away since the listing: not part of the table.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(format!("cannot read '{shown}': {e}")),
                },
            };
            if is_dir {
                // Paimon tables are shallow (partitions, buckets); a deep tree is a loop or junk.
                if depth < 16 {
                    pending.push((p, depth + 1));
                }
            } else if !is_file {
                return Err(format!(
                    "'{shown}' is not a regular file (a FIFO, socket or device cannot be part of a table)"
                ));
            } else if metadata_file && len > MAX_METADATA_BYTES {
                return Err(format!("metadata file '{shown}' is {len} bytes, more than Paimon ever writes"));
            } else if unreadable.is_none()
                && p.parent().is_some_and(|parent| parent.ends_with("manifest"))
                && is_orc(&p)
            {
                unreadable = Some(format!(
                    "ORC manifests are not supported: '{shown}' is an ORC file (paimon-cpp writes ORC manifests by \
                     default; paimon-rust reads Avro manifests only)"
                ));
            }
        }
    }
    Ok(unreadable)
}

/// Whether a manifest file is ORC. Manifests are immutable (a new one gets a new name), so a
/// file found not to be ORC is remembered: a follower opens its table every tick, and reading
/// the head of every manifest each time made an open grow with the table's history.
fn is_orc(file: &Path) -> bool {
    use std::io::Read;
    static NOT_ORC: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let mut known = NOT_ORC.lock().unwrap_or_else(|p| p.into_inner());
    let known = known.get_or_insert_with(HashSet::new);
    if known.contains(file) {
        return false;
    }
    let mut magic = [0u8; 3];
    let read = std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut magic)).is_ok();
    let orc = read && &magic == b"ORC";
    // Only a head actually read is remembered (a file being written may be short yet).
    if read && !orc {
        if known.len() >= MAX_KNOWN_MANIFESTS {
            known.clear();
        }
        known.insert(file.to_path_buf());
    }
    orc
}

/// How many manifest paths `is_orc` remembers (then it starts over).
const MAX_KNOWN_MANIFESTS: usize = 100_000;

/// Table options naming features paimon-rust would silently not honour: refused by name.
fn refuse_unsupported(options: &HashMap<String, String>) -> std::result::Result<(), String> {
    if let Some(branch) = options.get("scan.fallback-branch") {
        return Err(format!(
            "scan.fallback-branch is not supported (the table falls back to branch '{branch}' for partitions \
             the main branch lacks; this reader would return the main branch's rows only)"
        ));
    }
    if options.get("manifest.format").is_some_and(|f| f.eq_ignore_ascii_case("orc")) {
        return Err("ORC manifests are not supported (manifest.format = orc)".into());
    }
    Ok(())
}

impl LakeTable {
    /// Opens the table at `path`: a local directory (absolute, or relative to the working
    /// directory) or an object-storage URL (`s3://bucket/...`); no catalog. Refused, before
    /// anything is read, where DuckDB's sandbox settings forbid the path.
    pub fn open(function: &'static str, path: &str, access: &Access) -> Result<LakeTable> {
        let Access { sandbox, options } = access;
        let remote = is_remote(path);
        let place = Site::new(function, path, access);
        if path.contains('\0') {
            return Err(place.err("a path cannot contain a NUL character"));
        }
        if path.len() > MAX_PATH {
            return Err(place.err(format!("the path is longer than {MAX_PATH} bytes")));
        }
        check_tree(sandbox, function, path)?;
        let (location, orc) = if remote {
            let scheme = path.split("://").next().unwrap_or("").to_ascii_lowercase();
            if scheme != "s3" && scheme != "s3a" {
                return Err(place.err(format!("the storage scheme '{scheme}://' is not supported (s3:// is)")));
            }
            (path.trim_end_matches('/').to_string(), None)
        } else {
            Self::check_local(&place, local_path(path))?
        };
        let props = options.storage_props(path);
        let table = place
            .block_on(remote, async {
                let file_io = FileIO::from_path(&location)?.with_props(props).build()?;
                let schema = SchemaManager::new(file_io.clone(), location.clone()).latest().await?;
                Ok(schema
                    .map(|s| Table::new(file_io, Identifier::new("lake", "t"), location.clone(), (*s).clone(), None)))
            })?
            .ok_or_else(|| {
                place.err(if remote {
                    "no Paimon table there (no schema/schema-N file under the path: a missing table or bucket)"
                } else {
                    "not a Paimon table (no schema-N file under schema/)"
                })
            })?;
        let unreadable = orc.or_else(|| refuse_unsupported(table.schema().options()).err());
        Ok(LakeTable { table, place, remote, pinned: None, unreadable, sandbox: sandbox.clone() })
    }

    /// The local directory checks: it exists, is readable, holds a Paimon table, and nothing
    /// in its tree can hang or exhaust the reader.
    fn check_local(place: &Site, path: &str) -> Result<(String, Option<String>)> {
        let dir: PathBuf = std::path::absolute(path).map_err(|e| place.err(e))?;
        match std::fs::metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(place.err("not a directory")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(place.err("no such directory")),
            Err(e) => return Err(place.err(format!("cannot read the directory: {e}"))),
        }
        if let Err(e) = std::fs::read_dir(&dir) {
            return Err(place.err(format!("cannot read the directory: {e}")));
        }
        if !dir.join("schema").is_dir() {
            return Err(place.err("not a Paimon table (it has no schema/ directory)"));
        }
        let unreadable = check_files(&dir).map_err(|problem| place.err(problem))?;
        // paimon-rust's local storage refuses `..` in a path: hand it the resolved directory.
        let real = std::fs::canonicalize(&dir).map_err(|e| place.err(format!("cannot resolve the directory: {e}")))?;
        Ok((real.to_string_lossy().into_owned(), unreadable))
    }

    /// Refuses, naming the feature, a table whose rows this reader cannot read exactly.
    pub fn check_readable(&self) -> Result<()> {
        match &self.unreadable {
            Some(why) => Err(self.place.err(why)),
            None => Ok(()),
        }
    }

    pub fn path(&self) -> &str {
        &self.place.path
    }

    /// The table's primary-key columns (empty for an append table).
    pub fn primary_keys(&self) -> Vec<String> {
        self.table.schema().primary_keys().to_vec()
    }

    /// The first primary-key column, if the table has a primary key.
    pub fn first_key_column(&self) -> Option<String> {
        self.table.schema().primary_keys().first().cloned()
    }

    pub fn options(&self) -> HashMap<String, String> {
        self.table.schema().options().clone()
    }

    /// The table's columns as an Arrow 60 schema (what DuckDB will be told at bind).
    pub fn schema(&self) -> Result<Schema60> {
        let fields = self.table.schema().fields();
        let schema58 = paimon::arrow::build_target_arrow_schema(fields).map_err(|e| self.place.paimon_err(e))?;
        let empty = arrow_array::RecordBatch::new_empty(schema58);
        Ok(to_arrow60(&empty).map_err(|e| self.place.err(e))?.schema())
    }

    /// The newest committed snapshot. paimon-rust trusts the LATEST hint whenever the snapshot
    /// after it is missing, without checking the hinted one exists; a writer that overwrites the
    /// hint in place (pypaimon on a local file system) can leave a torn or stale number there.
    /// A hint whose snapshot file is absent is ignored and the snapshot directory listed.
    pub fn latest_snapshot(&self) -> Result<Option<i64>> {
        let manager = self.table.snapshot_manager();
        self.place.block_on(self.remote, async {
            let Some(hinted) = manager.get_latest_snapshot_id().await? else { return Ok(None) };
            if manager.file_io().new_input(&manager.snapshot_path(hinted))?.exists().await? {
                return Ok(Some(hinted));
            }
            Ok(manager.list_all_ids().await?.into_iter().max())
        })
    }

    /// What the table says now about the snapshot `held` a layer reflects (`core::lineage`):
    /// its newest snapshot, the commit time of the snapshot with the held id if it still exists,
    /// and, only when the held one is gone (the message names the range), the oldest.
    pub fn observe(&self, held: i64) -> Result<crate::core::lineage::Observed> {
        let latest = self.latest_snapshot()?;
        let manager = self.table.snapshot_manager();
        let held_commit_millis = if held > 0 && latest.is_some() {
            self.place.block_on(self.remote, async {
                if !manager.file_io().new_input(&manager.snapshot_path(held))?.exists().await? {
                    return Ok(None);
                }
                Ok(Some(manager.get_snapshot(held).await?.time_millis() as i64))
            })?
        } else {
            None
        };
        let earliest = if held_commit_millis.is_none() && latest.is_some() {
            self.place.block_on(self.remote, manager.list_all_ids())?.into_iter().min()
        } else {
            latest
        };
        Ok(crate::core::lineage::Observed { latest, held_commit_millis, earliest })
    }

    /// When snapshot `id` was committed (milliseconds since the epoch).
    pub fn snapshot_time_millis(&self, id: i64) -> Result<i64> {
        let snapshot = self.place.block_on(self.remote, self.table.snapshot_manager().get_snapshot(id))?;
        Ok(snapshot.time_millis() as i64)
    }

    /// Who committed snapshot `id` (its `commitUser`: what a publisher says of the fact it
    /// reflects, `core::fact_mark`).
    pub fn commit_user(&self, id: i64) -> Result<String> {
        let snapshot = self.place.block_on(self.remote, self.table.snapshot_manager().get_snapshot(id))?;
        Ok(snapshot.commit_user().to_string())
    }

    /// The commit kind of snapshot `id` (`APPEND`, `COMPACT`, `OVERWRITE`, ...).
    pub fn commit_kind(&self, id: i64) -> Result<String> {
        let snapshot = self.place.block_on(self.remote, self.table.snapshot_manager().get_snapshot(id))?;
        Ok(format!("{:?}", snapshot.commit_kind()))
    }

    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let list = self.place.block_on(self.remote, self.table.snapshot_manager().list_all())?;
        Ok(list
            .iter()
            .map(|s| SnapshotInfo {
                id: s.id(),
                time_millis: s.time_millis() as i64,
                commit_kind: format!("{:?}", s.commit_kind()),
                total_records: s.total_record_count(),
                delta_records: s.delta_record_count(),
                changelog_records: s.changelog_record_count(),
            })
            .collect())
    }

    /// The table as of snapshot `id`, with the schema that snapshot was written with (a time
    /// travel must show the columns the table had then).
    pub fn at(&self, id: i64) -> Result<LakeTable> {
        let id = self.target_snapshot(Some(id))?.expect("an explicit snapshot is checked");
        let pinned = self.place.block_on(
            self.remote,
            self.table.copy_with_time_travel_strict(HashMap::from([("scan.snapshot-id".to_string(), id.to_string())])),
        )?;
        Ok(LakeTable {
            table: pinned,
            place: self.place.clone(),
            remote: self.remote,
            pinned: Some(id),
            unreadable: self.unreadable.clone(),
            sandbox: self.sandbox.clone(),
        })
    }

    /// Which snapshot a read of `snapshot` (latest when None) means; None: the table has none.
    pub(super) fn target_snapshot(&self, snapshot: Option<i64>) -> Result<Option<i64>> {
        if let (None, Some(id)) = (snapshot, self.pinned) {
            return Ok(Some(id));
        }
        let latest = self.latest_snapshot()?;
        match (snapshot, latest) {
            (None, last) => Ok(last),
            (Some(id), Some(last)) if (1..=last).contains(&id) => Ok(Some(id)),
            (Some(id), Some(last)) => Err(self.place.err(format!("snapshot {id} does not exist (latest is {last})"))),
            (Some(id), None) => {
                Err(self.place.err(format!("snapshot {id} does not exist (the table has no snapshot)")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_table_options_are_named() {
        let fallback = HashMap::from([("scan.fallback-branch".to_string(), "b".to_string())]);
        assert!(refuse_unsupported(&fallback).unwrap_err().contains("scan.fallback-branch is not supported"));
        let orc = HashMap::from([("manifest.format".to_string(), "orc".to_string())]);
        assert!(refuse_unsupported(&orc).unwrap_err().contains("ORC manifests are not supported"));
        assert!(refuse_unsupported(&HashMap::new()).is_ok());
    }
}
