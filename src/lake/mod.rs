//! The lake reader: Apache Paimon tables opened and planned with the `paimon` crate (Apache
//! paimon-rust): snapshots, schemas, manifests, splits with their files, levels and deletion
//! vectors. The planned data files are read by our own reader where it applies (`native`: Parquet
//! decode, and the merge of sorted runs for deduplicate, partial-update and first-row), and by
//! paimon-rust's reader elsewhere (aggregation, `sequence.field`, older schemas, other formats,
//! object storage), split by split. Writes (`write`) go through paimon-rust's writer: one commit
//! per call.
//!
//! This module is the lake boundary: paimon-rust errors become our [`Error`] here, once, named
//! after the SQL function that opened the table, with credentials scrubbed.
//!
//! paimon-rust speaks Arrow 58 and async; DuckDB's Rust binding speaks Arrow 60. Batches cross
//! over through the Arrow C Data Interface (no copy). Metadata calls drive a small
//! current-thread tokio runtime inside the DuckDB callback. Data is read as [`Units`] — a split,
//! or one file of a split that needs no merge — each taken by one thread and read there batch by
//! batch: `paimon_scan` and a build's load read them on DuckDB's own threads (as many as its
//! `threads`); code that folds the rows in Rust (a replica's mart fold, a publish reading its
//! mart table) on reader threads of ours feeding a bounded channel (`Scan::stream`). Either
//! way memory stays bounded by the units in flight, whatever the table's size.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use duckdb::arrow::datatypes::SchemaRef as Schema60;
use duckdb::arrow::record_batch::RecordBatch as Batch60;
use futures::StreamExt;
use paimon::catalog::Identifier;
use paimon::io::FileIO;
use paimon::spec::Predicate;
use paimon::table::DataSplit;
use paimon::table::SchemaManager;
use paimon::{IncrementalScanMode, Table};

pub mod native;
mod plain;
mod write;

pub use write::{NewTable, RowKind};

use crate::core::error::{Error, Result};
use crate::core::location::{is_remote, local_path, without_url_credentials, without_userinfo, MAX_PATH};
use crate::core::sandbox::Sandbox;

/// Paimon's JSON metadata (schemas, snapshots, hints) is small; paimon-rust reads such a file
/// whole, so a runaway one (a device, a huge file) is refused before it can exhaust memory.
const MAX_METADATA_BYTES: u64 = 64 << 20;
/// A metadata call against object storage that has not answered by then will not: an endpoint
/// that swallows packets must give an error, not hang the user's statement.
const REMOTE_TIMEOUT: Duration = Duration::from_secs(60);

/// Storage options for a table: Paimon's own keys (`s3.endpoint`, `s3.access-key`, ...), as
/// given by the `options := MAP {...}` parameter, completed from the standard AWS environment
/// variables. Never printed: `Debug` shows the keys only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LakeOptions(BTreeMap<String, String>);

impl std::fmt::Debug for LakeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// The storage option keys streamhouse's build of paimon-rust reads (after `s3.`).
pub const S3_KEYS: [&str; 16] = [
    "endpoint",
    "access-key",
    "secret-key",
    "session.token",
    "region",
    "path-style-access",
    "anonymous",
    "assumed.role.arn",
    "assumed.role.externalId",
    "assumed.role.session.name",
    "sse.type",
    "sse.key",
    "sse-c.algorithm",
    "sse-c.key",
    "sse-c.key.md5",
    "storage.class",
];
/// Paimon's Java-style spellings of some of them.
const S3_ALIASES: [&str; 3] = ["access.key", "secret.key", "path.style.access"];

/// Option keys whose values are secrets (never shown, scrubbed from every message).
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["secret", "access-key", "access.key", "accesskey", "token", "password", "sse-c.key", "sse.key"]
        .iter()
        .any(|s| k.contains(s))
}

impl LakeOptions {
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> LakeOptions {
        LakeOptions(pairs.into_iter().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The first key that paimon-rust's storage would silently ignore, if any: a misspelt key
    /// (`s3.acess-key`) must be an error, not an anonymous request. Keys are Paimon's own, with
    /// its Java-style aliases (`fs.s3a.`/`s3a.` prefixes, `access.key` for `access-key`, ...).
    pub fn unknown_key(&self) -> Option<&str> {
        self.0.keys().map(String::as_str).find(|key| {
            let rest = ["fs.s3a.", "s3a.", "s3."].iter().find_map(|p| key.strip_prefix(p));
            !rest.is_some_and(|r| S3_KEYS.contains(&r) || S3_ALIASES.contains(&r))
        })
    }

    /// The properties paimon-rust's storage is built with for `path`: the options given, and
    /// for S3 the AWS environment variables where an option does not say otherwise.
    fn storage_props(&self, path: &str) -> HashMap<String, String> {
        let mut props: HashMap<String, String> = self.0.clone().into_iter().collect();
        let scheme = path.split("://").next().unwrap_or("").to_ascii_lowercase();
        if scheme == "s3" || scheme == "s3a" {
            for (key, var) in [
                ("s3.access-key", "AWS_ACCESS_KEY_ID"),
                ("s3.secret-key", "AWS_SECRET_ACCESS_KEY"),
                ("s3.session.token", "AWS_SESSION_TOKEN"),
                ("s3.region", "AWS_REGION"),
                ("s3.region", "AWS_DEFAULT_REGION"),
                ("s3.endpoint", "AWS_ENDPOINT_URL_S3"),
                ("s3.endpoint", "AWS_ENDPOINT_URL"),
            ] {
                if !props.contains_key(key) {
                    if let Some(v) = std::env::var(var).ok().filter(|v| !v.is_empty()) {
                        props.insert(key.into(), v);
                    }
                }
            }
            // A local S3-compatible server (an IP or localhost endpoint) has no per-bucket host
            // names: address it path-style unless the user said otherwise.
            if let Some(endpoint) = props.get("s3.endpoint") {
                let host = endpoint.split("://").nth(1).unwrap_or(endpoint).split(['/', ':']).next().unwrap_or("");
                if !props.contains_key("s3.path-style-access")
                    && (host == "localhost" || host.parse::<std::net::IpAddr>().is_ok())
                {
                    props.insert("s3.path-style-access".into(), "true".into());
                }
            }
        }
        props
    }

    /// Every secret value in play for `path` (given or from the environment), longest first.
    fn secrets(&self, path: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .storage_props(path)
            .into_iter()
            .filter(|(k, v)| is_secret_key(k) && v.len() >= 4)
            .map(|(_, v)| v)
            .collect();
        out.sort_by_key(|s| std::cmp::Reverse(s.len()));
        out
    }
}

/// How a statement may reach a table: DuckDB's sandbox as bound, and the storage options.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub sandbox: Sandbox,
    pub options: LakeOptions,
}

/// Where a lake error happened: the SQL function, the table as the user named it, and the
/// secrets no message may carry.
#[derive(Clone)]
struct Site {
    function: &'static str,
    path: String,
    secrets: Arc<Vec<String>>,
    /// What the reader was doing, added to any error (e.g. reading across a schema change).
    note: Option<String>,
}

impl Site {
    fn new(function: &'static str, path: &str, access: &Access) -> Site {
        let secrets = Arc::new(access.options.secrets(path));
        Site { function, path: path.replace('\0', "\\0"), secrets, note: None }
    }

    fn err(&self, problem: impl std::fmt::Display) -> Error {
        let mut problem = match &self.note {
            Some(note) => format!("{note}: {problem}"),
            None => problem.to_string(),
        };
        for secret in self.secrets.iter() {
            problem = problem.replace(secret.as_str(), "***");
        }
        let problem = without_url_credentials(&problem);
        Error::Lake { function: self.function, path: without_url_credentials(&without_userinfo(&self.path)), problem }
    }

    /// Runs one metadata future to completion on a fresh current-thread runtime.
    fn block_on<T>(&self, remote: bool, fut: impl std::future::Future<Output = paimon::Result<T>>) -> Result<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| self.err(e))?;
        self.block_on_in(&rt, remote, fut)
    }

    /// Runs one future to completion on `rt`; against object storage, within [`REMOTE_TIMEOUT`].
    fn block_on_in<T>(
        &self,
        rt: &tokio::runtime::Runtime,
        remote: bool,
        fut: impl std::future::Future<Output = paimon::Result<T>>,
    ) -> Result<T> {
        if remote {
            match rt.block_on(async { tokio::time::timeout(REMOTE_TIMEOUT, fut).await }) {
                Ok(r) => r.map_err(|e| self.paimon_err(e)),
                Err(_) => Err(self.err(format!("object storage did not answer within {}s", REMOTE_TIMEOUT.as_secs()))),
            }
        } else {
            rt.block_on(fut).map_err(|e| self.paimon_err(e))
        }
    }

    /// paimon-rust's error, with the features we refuse named in plain words.
    fn paimon_err(&self, e: paimon::Error) -> Error {
        let full = e.to_string();
        // Object-storage errors carry a backtrace of our reader's stack: noise to a SQL user.
        let text = full.split("\nBacktrace:").next().unwrap_or(&full).trim_end();
        // What the storage layer says of a known failure (its request ids, retries and URLs are
        // context a SQL user cannot act on) is replaced by what to check.
        // Only object storage gets these words: a local permission error keeps its own text.
        let text = if !is_remote(&self.path) {
            text.to_string()
        } else if text.contains("NoSuchBucket") {
            "the bucket does not exist".to_string()
        } else if text.contains("tcp connect error") || text.contains("dns error") || text.contains("ConnectionRefused")
        {
            "cannot reach the object-storage endpoint (is s3.endpoint / AWS_ENDPOINT_URL right?)".to_string()
        } else if text.contains("detect_region") || text.contains("region is missing") {
            "the S3 region is not set: give options := MAP {'s3.region': '<region>'} or set AWS_REGION".to_string()
        } else if ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "PermissionDenied", " 403"]
            .iter()
            .any(|w| text.contains(w))
        {
            "access denied: check s3.access-key and s3.secret-key (or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY) and the permissions they grant"
                .to_string()
        } else {
            text.to_string()
        };
        if text.contains("avro ocf") && text.contains("magic") {
            return self.err(format!(
                "ORC manifests are not supported (a manifest file is not Avro; paimon-cpp writes ORC manifests \
                 by default): {text}"
            ));
        }
        self.err(text)
    }
}

/// An opened Paimon table.
pub struct LakeTable {
    table: Table,
    place: Site,
    remote: bool,
    /// Set when the table was opened as of one snapshot (with that snapshot's schema).
    pinned: Option<i64>,
    /// Why the table's rows cannot be read (a feature refused by name); its snapshots can be.
    unreadable: Option<String>,
    /// DuckDB's sandbox as the statement was bound: every file a read plans must pass it too.
    sandbox: Sandbox,
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

/// Arrow 58 (paimon) → Arrow 60 (DuckDB) through the C Data Interface, without copying buffers.
fn to_arrow60(batch: &arrow_array::RecordBatch) -> std::result::Result<Batch60, String> {
    use arrow_array::Array as _;
    let rows = batch.num_rows();
    let as_struct: arrow_array::StructArray = batch.clone().into();
    let (array, schema) = arrow_array::ffi::to_ffi(&as_struct.to_data()).map_err(|e| e.to_string())?;
    // SAFETY: FFI_ArrowArray / FFI_ArrowSchema are the #[repr(C)] structs the Arrow C Data
    // Interface specifies; both arrow-rs versions define exactly that layout, so moving them
    // bitwise hands ownership (and the release callback) from one to the other.
    let (array, schema) = unsafe {
        (
            std::mem::transmute::<arrow_array::ffi::FFI_ArrowArray, duckdb::arrow::ffi::FFI_ArrowArray>(array),
            std::mem::transmute::<arrow_array::ffi::FFI_ArrowSchema, duckdb::arrow::ffi::FFI_ArrowSchema>(schema),
        )
    };
    // SAFETY: `array` and `schema` were just exported by arrow-rs and are valid and unshared.
    let data = unsafe { duckdb::arrow::ffi::from_ffi(array, &schema) }.map_err(|e| e.to_string())?;
    let batch60: Batch60 = duckdb::arrow::array::StructArray::from(data).into();
    debug_assert_eq!(batch60.num_rows(), rows);
    Ok(batch60)
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
        sandbox.check_tree(function, path)?;
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

    /// `key IN keys` as a Paimon predicate, when the key column is an integer type (other
    /// types are not narrowed: the caller filters exactly anyway).
    fn key_filter(&self, key: &str, keys: &[i64]) -> Option<Predicate> {
        use paimon::spec::{DataType, Datum, PredicateBuilder};
        let fields = self.table.schema().fields();
        let field = fields.iter().find(|f| f.name() == key)?;
        let datum: fn(i64) -> Option<Datum> = match field.data_type() {
            DataType::BigInt(_) => |k| Some(Datum::Long(k)),
            DataType::Int(_) => |k| i32::try_from(k).ok().map(Datum::Int),
            DataType::SmallInt(_) => |k| i16::try_from(k).ok().map(Datum::SmallInt),
            DataType::TinyInt(_) => |k| i8::try_from(k).ok().map(Datum::TinyInt),
            _ => return None,
        };
        PredicateBuilder::new(fields).is_in(key, keys.iter().filter_map(|&k| datum(k)).collect()).ok()
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
    fn target_snapshot(&self, snapshot: Option<i64>) -> Result<Option<i64>> {
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

    /// Plans a read of the merged (batch) state at `snapshot` (latest when None): which splits
    /// to read, narrowed to the rows whose `key` column is in `keys` when given, and only the
    /// `columns` named (all when None). Paimon uses a key predicate to skip data files by their
    /// key statistics (safe under merge-on-read: every version of a key carries the key); it
    /// may still return other rows, so the caller filters exactly.
    pub fn scan(
        &self,
        snapshot: Option<i64>,
        keys: Option<(&str, &[i64])>,
        columns: Option<Vec<String>>,
    ) -> Result<Scan> {
        self.check_readable()?;
        let Some(target) = self.target_snapshot(snapshot)? else {
            return Ok(Scan {
                snapshot: None,
                table: None,
                splits: Vec::new(),
                columns,
                filter: None,
                place: self.place.clone(),
                remote: self.remote,
                native: true,
                external_access: self.sandbox.external_access,
            });
        };
        let filter = keys.and_then(|(key, keys)| self.key_filter(key, keys));
        let table = &self.table;
        let (pinned, splits) = self.place.block_on(self.remote, async {
            let mut pinned = table
                .copy_with_time_travel_strict(HashMap::from([("scan.snapshot-id".to_string(), target.to_string())]))
                .await?;
            // Batches of DuckDB's vector size (paimon-rust's default is 1024): each chunk DuckDB
            // pulls is full, with half the per-batch overheads.
            if !pinned.schema().options().contains_key("read.batch-size") {
                pinned = pinned.copy_with_options(HashMap::from([(
                    "read.batch-size".to_string(),
                    crate::core::VECTOR_SIZE.to_string(),
                )]));
            }
            let mut rb = pinned.new_read_builder();
            if let Some(filter) = &filter {
                rb.with_filter(filter.clone());
            }
            let plan = full_state(rb.new_scan(), pinned.schema().options()).plan().await?;
            let splits = plan.splits().to_vec();
            Ok((pinned, splits))
        })?;
        confine(&self.sandbox, &splits).map_err(|problem| self.place.err(problem))?;
        Ok(Scan {
            snapshot: Some(target),
            table: Some(pinned),
            splits,
            columns,
            filter,
            place: self.place.clone(),
            remote: self.remote,
            native: true,
            external_access: self.sandbox.external_access,
        })
    }

    /// Every change of snapshots `from..=to`, in commit order, each batch with its snapshot
    /// id: the snapshot's changelog, or its delta when the table produces none, with a leading
    /// `rowkind` column (`+I`, `-U`, `+U`, `-D`). Read on one thread (order matters), streamed.
    pub fn changes(&self, from: i64, to: i64) -> BatchStream<(i64, Batch60)> {
        let (tx, mut stream) = BatchStream::channel(2);
        if let Err(e) = self.check_readable() {
            stream.failed = Some(e);
            return stream;
        }
        let table = self.table.clone();
        let place = self.place.clone();
        let remote = self.remote;
        let sandbox = self.sandbox.clone();
        spawn_reader(&self.place, &mut stream, tx, move |tx| {
            let current = table.schema().id();
            for id in from..=to {
                // paimon-rust reads every snapshot's changes with the current schema; changes
                // written under an earlier one may not map onto it, and the error says so.
                let written = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()
                    .and_then(|rt| rt.block_on(table.snapshot_manager().get_snapshot(id)).ok())
                    .map(|snapshot| snapshot.schema_id());
                let place = Site {
                    note: written.filter(|&w| w != current).map(|w| {
                        format!(
                            "reading the changes of snapshot {id}, written with schema {w} while the table now has \
                             schema {current} (reading changes across a schema change such as a dropped or renamed \
                             column is not supported)"
                        )
                    }),
                    ..place.clone()
                };
                let sent = run_stream(&place, remote, &tx, |batch| Ok((id, batch)), async {
                    let rb = table.new_read_builder();
                    let plan = rb.new_incremental_scan(IncrementalScanMode::Auto, id - 1, id).plan().await?;
                    if let Err(message) = confine(&sandbox, &plan.data_splits()) {
                        return Err(paimon::Error::DataInvalid { message, source: None });
                    }
                    rb.new_read()?.to_audit_log_arrow(&plan)
                });
                if !sent {
                    return;
                }
            }
        });
        stream
    }
}

/// Refuses a read whose plan would open a file DuckDB's sandbox forbids. The table directory was
/// checked at open, but a table's own metadata chooses where its files are: the option
/// `data-file.path-directory`, a data file's external path in a manifest, a deletion vector's
/// index file. Each file of the plan must pass as a file DuckDB's readers could open.
fn confine(sandbox: &Sandbox, splits: &[DataSplit]) -> std::result::Result<(), String> {
    if sandbox.external_access {
        return Ok(());
    }
    for split in splits {
        let deletion_files =
            split.data_deletion_files().unwrap_or_default().iter().flatten().map(|d| d.path().to_string());
        let files = split.data_files().iter().flat_map(|f| f.collect_files(split.bucket_path()));
        for file in files.chain(deletion_files) {
            if !sandbox.permits(&file) {
                return Err(format!(
                    "Permission Error: the table's metadata points a read at \"{}\", which file system operations \
                     disabled by configuration forbid (enable_external_access = false, and it is not inside \
                     allowed_directories {:?})",
                    without_userinfo(&file),
                    sandbox.allowed_directories
                ));
            }
        }
    }
    Ok(())
}

/// The scan that yields a table's full merged state. Paimon's batch scan skips level-0 files
/// where it can read compacted levels alone: for first-row (it keeps the earliest row, so
/// uncompacted rows would be hidden) and for deletion-vector tables (whose batch view is
/// "compacted rows only") that would not be the state a bounded streaming read reaches, so
/// every file is read and merged instead.
fn full_state<'a>(
    scan: paimon::table::TableScan<'a>,
    options: &HashMap<String, String>,
) -> paimon::table::TableScan<'a> {
    let first_row = options.get("merge-engine").is_some_and(|e| e == "first-row");
    let dv = options.get("deletion-vectors.enabled").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if first_row || dv {
        scan.with_scan_all_files()
    } else {
        scan
    }
}

/// A planned read: the splits of one snapshot, ready to be read in parallel (a clone reads the
/// same splits again: a build's probes re-read what its load read).
#[derive(Clone)]
pub struct Scan {
    /// The snapshot read (None: the table has no snapshot, so no rows).
    pub snapshot: Option<i64>,
    table: Option<Table>,
    splits: Vec<DataSplit>,
    columns: Option<Vec<String>>,
    filter: Option<Predicate>,
    place: Site,
    remote: bool,
    /// Whether splits the native path can read are read by it (else all by paimon-rust).
    native: bool,
    /// DuckDB's `enable_external_access` when the table was opened (see `plain_sql`).
    external_access: bool,
}

/// How one split of a planned read is read (`paimon_read_plan`).
#[derive(Debug, Clone)]
pub struct SplitRoute {
    /// The bucket's directory, relative to the table's.
    pub bucket_path: String,
    pub bucket: i32,
    pub files: usize,
    pub runs: usize,
    pub reader: &'static str,
    pub reason: Option<String>,
}

/// Rows per batch the native path decodes and merges.
const NATIVE_BATCH_ROWS: usize = 16 * crate::core::VECTOR_SIZE;

/// What the native path needs of a planned read, resolved once.
struct NativeRead {
    facts: native::Facts,
    shape: native::Shape,
    batch_size: usize,
}

impl NativeRead {
    fn with<'a>(
        &'a self,
        deleted: &'a dyn Fn(usize) -> std::result::Result<Option<Vec<u64>>, String>,
    ) -> native::Read<'a> {
        native::Read {
            shape: &self.shape,
            engine: self.facts.engine.clone().unwrap_or(native::Engine::Deduplicate),
            batch_size: self.batch_size,
            deleted,
        }
    }
}

impl Scan {
    /// Reads every split with paimon-rust's reader (`reader := 'paimon-rust'`): the reference
    /// the native path is tested and benchmarked against.
    pub fn paimon_only(mut self) -> Scan {
        self.native = false;
        self
    }

    fn native_read(&self) -> Result<Option<NativeRead>> {
        let Some(table) = &self.table else { return Ok(None) };
        let schema = table.schema();
        let target = paimon::arrow::build_target_arrow_schema(schema.fields()).map_err(|e| self.place.paimon_err(e))?;
        let field = |name: &str| target.field_with_name(name).ok().cloned();
        let keys: Vec<arrow_schema::Field> = schema.primary_keys().iter().filter_map(|k| field(k)).collect();
        let outputs: Vec<arrow_schema::Field> = match &self.columns {
            Some(names) => names.iter().filter_map(|n| field(n)).collect(),
            None => target.fields().iter().map(|f| f.as_ref().clone()).collect(),
        };
        let options = schema.options();
        let facts = native::Facts {
            schema_id: schema.id(),
            key_types: keys.iter().map(|f| f.data_type().clone()).collect(),
            deletion_vectors: options.get("deletion-vectors.enabled").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            remote: self.remote,
            engine: native::Facts::engine(options, !keys.is_empty()),
        };
        // Decoding and merging cost per batch as well as per row: batches of many vectors
        // (DuckDB takes them a vector at a time), still a few MB per sorted run in flight.
        let batch_size = NATIVE_BATCH_ROWS;
        // Text and bytes are decoded as views (see `native::decode::footer`): the merge and
        // DuckDB's vectors take them as they are.
        let views = |fields: Vec<arrow_schema::Field>| fields.into_iter().map(native::decode::as_view).collect();
        let shape = native::Shape { outputs: views(outputs), keys: views(keys) };
        Ok(Some(NativeRead { facts, shape, batch_size }))
    }

    /// Each split's route: what reads it, and why paimon-rust does where it does.
    pub fn routes(&self) -> Result<Vec<SplitRoute>> {
        let read = self.native_read()?;
        Ok(self
            .splits
            .iter()
            .map(|split| {
                let (route, runs) = match (&read, self.native) {
                    (Some(r), true) => native::route(split, &r.facts),
                    _ => (native::Route::PaimonRust("reader := 'paimon-rust'".into()), Vec::new()),
                };
                let root = table_root(self.table.as_ref());
                let ordered = route == native::Route::Merge
                    && runs.len() > 1
                    && native::in_sequence_order(split.data_files(), &runs).is_some();
                SplitRoute {
                    bucket_path: split.bucket_path().strip_prefix(&root).unwrap_or(split.bucket_path()).to_string(),
                    bucket: split.bucket(),
                    files: split.data_files().len(),
                    runs: runs.len(),
                    reader: route.name(),
                    reason: match ordered {
                        true => Some(native::ORDERED_MERGE.to_string()),
                        false => route.reason().map(str::to_string),
                    },
                }
            })
            .collect())
    }

    /// The SQL that has DuckDB's own Parquet reader read this planned read, where that gives
    /// exactly what the read gives (every split plain: [`native::plain_files`]); None where any
    /// split needs more, for a read narrowed by keys, for a table without files, and under a
    /// locked-down sandbox: DuckDB's reader would judge the files' resolved paths by its own
    /// rule (DuckDB 1.4 does not follow symlinks in allowed_directories), where the table was
    /// checked by ours, which is tested against DuckDB's.
    pub fn plain_sql(&self) -> Result<Option<String>> {
        if !self.native || self.remote || self.filter.is_some() || !self.external_access {
            return Ok(None);
        }
        let Some(read) = self.native_read()? else { return Ok(None) };
        let mut files = Vec::new();
        for split in &self.splits {
            match native::plain_files(split, &read.facts, &read.shape) {
                Some(f) => files.extend(f),
                None => return Ok(None),
            }
        }
        Ok(plain::read_parquet_sql(&read.shape.outputs, &files))
    }

    /// The read cut into units any thread may take (see [`Units`]).
    pub fn into_units(self) -> Result<Units> {
        let read = self.native_read()?;
        let Some(table) = self.table else {
            return Ok(Units::new(Vec::new(), None));
        };
        let units = match &read {
            Some(r) => native::units(self.splits, &r.facts, self.native),
            None => self.splits.into_iter().map(native::Unit::Paimon).collect(),
        };
        let ctx = UnitContext {
            table,
            columns: self.columns,
            filter: self.filter,
            read,
            place: self.place,
            remote: self.remote,
        };
        Ok(Units::new(units, Some(ctx)))
    }

    /// Reads the planned work on up to `threads` reader threads of our own, one unit at a time
    /// each, for a consumer on one thread (a fold in Rust).
    pub fn stream(self, threads: usize) -> BatchStream<Batch60> {
        let (tx, mut stream) = BatchStream::channel(threads.max(1) + 1);
        let place = self.place.clone();
        let units = match self.into_units() {
            Ok(u) => Arc::new(u),
            Err(e) => {
                stream.failed = Some(e);
                return stream;
            }
        };
        for _ in 0..threads.clamp(1, units.len().max(1)) {
            let units = units.clone();
            spawn_reader(&place, &mut stream, tx.clone(), move |tx| {
                while let Some(unit) = units.next() {
                    let batches = match unit {
                        Ok(b) => b,
                        Err(e) => {
                            tx.send(Err(e));
                            return;
                        }
                    };
                    for item in batches {
                        let failed = item.is_err();
                        if !tx.send(item) || failed {
                            return;
                        }
                    }
                }
            });
        }
        stream
    }
}

/// One unit's batches (never empty ones), read on the thread that pulls them.
pub type UnitBatches = Box<dyn Iterator<Item = Result<Batch60>> + Send>;

/// What opening a unit needs besides the unit.
struct UnitContext {
    table: Table,
    columns: Option<Vec<String>>,
    filter: Option<Predicate>,
    read: Option<NativeRead>,
    place: Site,
    remote: bool,
}

/// A planned read cut into units — a split, or a file of a split that needs no merge — handed
/// out once each to whichever thread asks, and read on that thread: `paimon_scan` reads them
/// on DuckDB's own threads (so `threads` bounds the decoding and merging, and batches need no
/// hand-over), as does a build's load (`serving::handoff`); `Scan::stream` on reader threads of
/// its own.
pub struct Units {
    units: Vec<native::Unit>,
    queue: Mutex<Queue>,
    /// Signalled when a unit being opened is open (and what it handed on is queued).
    opened: Condvar,
    ctx: Option<UnitContext>,
}

/// What is left to hand out.
#[derive(Default)]
struct Queue {
    /// The index of the next planned unit.
    next: usize,
    /// Units an opened unit handed on (the other row groups of its file), taken first.
    more: Vec<native::Unit>,
    /// Units being opened now: each may still hand units on, so "no more" waits for them.
    opening: usize,
}

/// A unit being opened: counted until dropped, panics included, so no thread waits forever.
struct Opening<'a>(&'a Units);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.lock().opening -= 1;
        self.0.opened.notify_all();
    }
}

impl Units {
    fn new(units: Vec<native::Unit>, ctx: Option<UnitContext>) -> Units {
        Units { units, queue: Mutex::default(), opened: Condvar::new(), ctx }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many units the read is planned as (threads beyond that would idle until a file of
    /// several row groups is opened).
    pub fn len(&self) -> usize {
        self.units.len()
    }

    pub fn is_empty(&self) -> bool {
        self.units.is_empty()
    }

    /// The next unit not yet handed out, opened (a native unit has read and checked every
    /// file's footer), or None when all have been — never while another thread is still
    /// opening a unit, which may hand on more.
    pub fn next(&self) -> Option<Result<UnitBatches>> {
        let ctx = self.ctx.as_ref()?;
        let mut queue = self.lock();
        // A unit handed on, or the index of a planned one.
        let taken: std::result::Result<native::Unit, usize> = loop {
            if let Some(unit) = queue.more.pop() {
                break Ok(unit);
            }
            if queue.next < self.units.len() {
                queue.next += 1;
                break Err(queue.next - 1);
            }
            if queue.opening == 0 {
                return None;
            }
            queue = self.opened.wait(queue).unwrap_or_else(|p| p.into_inner());
        };
        queue.opening += 1;
        drop(queue);
        let opening = Opening(self);
        let unit = match &taken {
            Ok(unit) => unit,
            Err(i) => &self.units[*i],
        };
        let opened = ctx.open(unit).map(|(batches, more)| {
            self.lock().more.extend(more);
            batches
        });
        drop(opening);
        Some(opened)
    }
}

impl UnitContext {
    /// Opens `unit`; also returns the units it hands on (see [`native::open_unit`]).
    fn open(&self, unit: &native::Unit) -> Result<(UnitBatches, Vec<native::Unit>)> {
        let paimon = |split: DataSplit| self.paimon(split).map(|b| (b, Vec::new()));
        let read = match (unit, &self.read) {
            (native::Unit::Paimon(split), _) => return paimon(split.clone()),
            (_, Some(read)) => read,
            (_, None) => return Err(self.place.err("internal error: a native unit without its read")),
        };
        let deleted_of = |split: &Arc<DataSplit>| {
            let split = split.clone();
            move |f: usize| deleted_rows(&split, f)
        };
        let opened = match unit {
            native::Unit::Native { split, runs, merge } => {
                let deleted = deleted_of(split);
                match native::open_unit(split, runs, *merge, &read.with(&deleted)) {
                    Err(native::decode::Refusal::Unsupported(_)) => {
                        let split = native::fallback_split(split, runs).map_err(|e| self.place.paimon_err(e))?;
                        return paimon(split);
                    }
                    other => other,
                }
            }
            native::Unit::RowGroup { split, file, merge, footer, row_group } => {
                let deleted = deleted_of(split);
                native::open_row_group(split, *file, *merge, footer, *row_group, &read.with(&deleted))
                    .map(|b| (b, Vec::new()))
            }
            native::Unit::Paimon(_) => unreachable!("handled above"),
        };
        let (batches, more) = opened.map_err(|e| match e {
            native::decode::Refusal::Unsupported(e) | native::decode::Refusal::Failed(e) => self.place.err(e),
        })?;
        let place = self.place.clone();
        let batches: UnitBatches = Box::new(batches.filter_map(move |batch| match batch {
            Ok(b) if b.num_rows() == 0 => None,
            Ok(b) => Some(to_arrow60(&b).map_err(|e| place.err(e))),
            Err(e) => Some(Err(place.err(e))),
        }));
        Ok((batches, more))
    }

    /// A split read by paimon-rust's reader, driven batch by batch on the pulling thread.
    fn paimon(&self, split: DataSplit) -> Result<UnitBatches> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| self.place.err(e))?;
        let open = async {
            let mut rb = self.table.new_read_builder();
            if let Some(columns) = &self.columns {
                let names: Vec<&str> = columns.iter().map(String::as_str).collect();
                rb.with_projection(&names)?;
            }
            if let Some(filter) = &self.filter {
                rb.with_filter(filter.clone());
            }
            rb.new_read()?.to_arrow(std::slice::from_ref(&split))
        };
        let stream = self.place.block_on_in(&rt, self.remote, open)?;
        Ok(Box::new(PaimonBatches { rt, stream, place: self.place.clone(), done: false }))
    }
}

/// paimon-rust's batches of one split, each awaited on a runtime of the unit's own.
struct PaimonBatches {
    rt: tokio::runtime::Runtime,
    stream: paimon::table::ArrowRecordBatchStream,
    place: Site,
    done: bool,
}

impl Iterator for PaimonBatches {
    type Item = Result<Batch60>;
    fn next(&mut self) -> Option<Result<Batch60>> {
        while !self.done {
            let item = match self.rt.block_on(self.stream.next()) {
                None => None,
                Some(Ok(b)) if b.num_rows() == 0 => continue,
                Some(Ok(b)) => Some(to_arrow60(&b).map_err(|e| self.place.err(e))),
                Some(Err(e)) => Some(Err(self.place.paimon_err(e))),
            };
            // An error ends the unit: what follows it is not the split's state.
            self.done = !matches!(item, Some(Ok(_)));
            return item;
        }
        None
    }
}

/// A table's location as its bucket paths begin (with the trailing slash).
fn table_root(table: Option<&Table>) -> String {
    table.map(|t| format!("{}/", t.location().trim_end_matches('/'))).unwrap_or_default()
}

/// The deleted row positions of file `f` of `split` (its deletion vector), if it has one.
fn deleted_rows(split: &DataSplit, f: usize) -> std::result::Result<Option<Vec<u64>>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(df) = split.deletion_file_for_data_file_index(f) else { return Ok(None) };
    let path = df.path();
    let local = path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")).unwrap_or(path);
    let cannot = |e: std::io::Error| format!("cannot read the deletion vector file {local}: {e}");
    let mut file = std::fs::File::open(local).map_err(cannot)?;
    let offset =
        u64::try_from(df.offset()).map_err(|_| format!("deletion vector offset {} is negative", df.offset()))?;
    let length =
        u64::try_from(df.length()).map_err(|_| format!("deletion vector length {} is negative", df.length()))?;
    file.seek(SeekFrom::Start(offset)).map_err(cannot)?;
    // A v1 entry is followed by 8 bytes its length does not count; a v2 entry counts them.
    let mut bytes = Vec::new();
    file.take(length.saturating_add(8)).read_to_end(&mut bytes).map_err(cannot)?;
    native::decode::deletion_positions(&bytes).map(Some)
}

/// Batches read by reader threads, in the order they arrive. Dropping it stops the readers
/// (they notice at their next batch); nothing waits for them.
pub struct BatchStream<T> {
    rx: Receiver<Result<T>>,
    cancel: Arc<AtomicBool>,
    failed: Option<Error>,
}

impl<T> BatchStream<T> {
    fn channel(capacity: usize) -> (Sender<T>, BatchStream<T>) {
        let (tx, rx) = sync_channel(capacity);
        let cancel = Arc::new(AtomicBool::new(false));
        (Sender { tx, cancel: cancel.clone() }, BatchStream { rx, cancel, failed: None })
    }
}

impl<T> Iterator for BatchStream<T> {
    type Item = Result<T>;
    fn next(&mut self) -> Option<Result<T>> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        self.rx.recv().ok()
    }
}

impl<T> Drop for BatchStream<T> {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

struct Sender<T> {
    tx: SyncSender<Result<T>>,
    cancel: Arc<AtomicBool>,
}

impl<T> Sender<T> {
    /// Hands one item on; false when the consumer is gone or cancelled.
    fn send(&self, item: Result<T>) -> bool {
        !self.cancel.load(Ordering::Relaxed) && self.tx.send(item).is_ok()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender { tx: self.tx.clone(), cancel: self.cancel.clone() }
    }
}

/// Starts a reader thread that sends into `tx`. A thread that cannot start is reported as the
/// stream's first item, so a short read never passes for a complete one.
fn spawn_reader<T: Send + 'static>(
    place: &Site,
    stream: &mut BatchStream<T>,
    tx: Sender<T>,
    work: impl FnOnce(Sender<T>) + Send + 'static,
) {
    // A reader that panics must end the stream with an error: a thread that just stopped would
    // close the channel like a finished read, and a short read would pass for a whole one.
    let guard = tx.clone();
    let site = place.clone();
    let started = std::thread::Builder::new().name("streamhouse-lake".into()).spawn(move || {
        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(tx))) {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            guard.send(Err(site.err(format!("internal error in a reader thread (please report): {what}"))));
        }
    });
    if let Err(e) = started {
        stream.failed.get_or_insert_with(|| place.err(format!("cannot start a reader thread: {e}")));
    }
}

/// Drives one paimon-rust batch stream on a fresh current-thread runtime, sending each batch
/// (converted to Arrow 60 and mapped by `wrap`) to the consumer. False when the reader should
/// stop: the consumer is gone or cancelled, or an error was sent.
fn run_stream<T>(
    place: &Site,
    remote: bool,
    tx: &Sender<T>,
    wrap: impl Fn(Batch60) -> Result<T>,
    open: impl std::future::Future<Output = paimon::Result<paimon::table::ArrowRecordBatchStream>>,
) -> bool {
    let send = |item: Result<T>| tx.send(item);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            send(Err(place.err(e)));
            return false;
        }
    };
    rt.block_on(async {
        let opened = if remote {
            match tokio::time::timeout(REMOTE_TIMEOUT, open).await {
                Ok(r) => r,
                Err(_) => {
                    send(Err(place.err(format!("object storage did not answer within {}s", REMOTE_TIMEOUT.as_secs()))));
                    return false;
                }
            }
        } else {
            open.await
        };
        let mut batches = match opened {
            Ok(s) => s,
            Err(e) => {
                send(Err(place.paimon_err(e)));
                return false;
            }
        };
        while let Some(batch) = batches.next().await {
            let item = match batch {
                Ok(b) if b.num_rows() == 0 => continue,
                Ok(b) => to_arrow60(&b).map_err(|e| place.err(e)).and_then(&wrap),
                Err(e) => Err(place.paimon_err(e)),
            };
            let failed = item.is_err();
            if !send(item) || failed {
                return false;
            }
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_hide_secrets_and_default_to_path_style_locally() {
        let o = LakeOptions::new([
            ("s3.endpoint".to_string(), "http://127.0.0.1:9000".to_string()),
            ("s3.secret-key".to_string(), "hunter2-secret".to_string()),
            ("s3.access-key".to_string(), "AKIDEXAMPLE".to_string()),
        ]);
        assert!(!format!("{o:?}").contains("hunter2"), "Debug shows keys only");
        let props = o.storage_props("s3://b/t");
        assert_eq!(props.get("s3.path-style-access").map(String::as_str), Some("true"));
        assert!(o.secrets("s3://b/t").contains(&"hunter2-secret".to_string()));
        let place =
            Site { function: "f", path: "s3://b/t".into(), secrets: Arc::new(o.secrets("s3://b/t")), note: None };
        let msg = place.err("denied for AKIDEXAMPLE with hunter2-secret").to_string();
        assert!(!msg.contains("hunter2") && !msg.contains("AKIDEXAMPLE"), "{msg}");
        let aws = LakeOptions::new([("s3.endpoint".to_string(), "https://s3.eu-west-1.amazonaws.com".to_string())]);
        assert!(!aws.storage_props("s3://b/t").contains_key("s3.path-style-access"));
    }

    #[test]
    fn unsupported_table_options_are_named() {
        let fallback = HashMap::from([("scan.fallback-branch".to_string(), "b".to_string())]);
        assert!(refuse_unsupported(&fallback).unwrap_err().contains("scan.fallback-branch is not supported"));
        let orc = HashMap::from([("manifest.format".to_string(), "orc".to_string())]);
        assert!(refuse_unsupported(&orc).unwrap_err().contains("ORC manifests are not supported"));
        assert!(refuse_unsupported(&HashMap::new()).is_ok());
    }
}
