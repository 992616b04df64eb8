//! Which file descriptors on database files belong to which of this process's DuckDB instances
//! with streamhouse loaded. Two descriptors of one database file mean two instances (DuckDB
//! opens its file once and refuses to attach a file twice): the watchdog must then neither
//! checkpoint nor destroy the older instance (closing its descriptor would drop the process's
//! POSIX lock on the file, the new instance's too). Read from `/proc/self/fd` (stat only).

use std::sync::{Mutex, MutexGuard};

use duckdb::Connection;

/// A database file attached to the instance.
pub struct FileDatabase {
    pub name: String,
    pub path: String,
    pub readonly: bool,
}

pub fn file_databases(conn: &Connection) -> Vec<FileDatabase> {
    conn.prepare_cached(
        "SELECT database_name, path, readonly FROM duckdb_databases() WHERE type = 'duckdb' AND NOT internal \
         AND coalesce(path, '') <> ''",
    )
    .and_then(|mut s| {
        s.query_map([], |r| Ok(FileDatabase { name: r.get(0)?, path: r.get(1)?, readonly: r.get(2)? }))?.collect()
    })
    .unwrap_or_default()
}

/// The bytes the WALs of `files` hold (a missing WAL holds none): what a settle would fold
/// into the database files. Stat only.
pub fn wal_bytes(files: &[String]) -> u64 {
    files.iter().filter_map(|path| std::fs::metadata(format!("{path}.wal")).ok()).map(|m| m.len()).sum()
}

/// Whether a database file of this instance is open in another DuckDB instance of this process:
/// one opened on the same file after the user closed this one but before the watchdog let go of
/// it (the CLI's `.open`, Node's `DuckDBInstance.create`). A checkpoint of this instance would
/// then write the file under the new one, and destroying it (even writing nothing) would close
/// its descriptor, which drops the process's POSIX lock on the file, the new instance's too. A
/// DuckDB instance opens its database file exactly once, and DuckDB refuses to attach one file
/// twice, so two descriptors of one file mean two instances. Checked only before a checkpoint or
/// a release.
pub fn opened_by_another_instance(conn: &Connection) -> bool {
    descriptors(conn).iter().any(|fds| fds.len() > 1)
}

/// Which descriptors on database files belong to which of this process's instances with
/// streamhouse loaded, so that a new instance can tell its own descriptor from an older one's.
struct Descriptors {
    /// Each live session's own descriptors (claimed at LOAD, given up at release).
    claimed: Vec<i32>,
    /// Retired instances' descriptors (`Session::retire`): open until the process exits, never
    /// written through again, so they are no other instance to protect.
    retired: Vec<i32>,
}

static FDS: Mutex<Descriptors> = Mutex::new(Descriptors { claimed: Vec::new(), retired: Vec::new() });

fn fds() -> MutexGuard<'static, Descriptors> {
    FDS.lock().unwrap_or_else(|p| p.into_inner())
}

/// At LOAD: this instance's own descriptor on each of its database files, the one no other
/// session has claimed (none for a file where that is ambiguous), claimed for it.
pub fn claim_own_descriptors(conn: &Connection) -> Vec<i32> {
    let files = file_ids(conn);
    // One lock from the scan to the claim: a retire between them would move an older
    // instance's descriptor out of `claimed` after the scan saw it, and this instance's own
    // descriptor would then look ambiguous (and go unclaimed) under an immediate reopen.
    let mut registry = fds();
    let own: Vec<i32> = scan(&files, &registry.retired)
        .into_iter()
        .filter_map(|fds| {
            let unclaimed: Vec<i32> = fds.into_iter().filter(|fd| !registry.claimed.contains(fd)).collect();
            (unclaimed.len() == 1).then(|| unclaimed[0])
        })
        .collect();
    registry.claimed.extend(&own);
    own
}

/// This process's descriptors on each database file of the instance, retired ones left out.
fn descriptors(conn: &Connection) -> Vec<Vec<i32>> {
    let files = file_ids(conn);
    let retired = fds().retired.clone();
    scan(&files, &retired)
}

/// Device and inode of each database file of the instance (asked of DuckDB before any lock).
fn file_ids(conn: &Connection) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    file_databases(conn).iter().filter_map(|db| std::fs::metadata(&db.path).ok()).map(|m| (m.dev(), m.ino())).collect()
}

/// The descriptors in `/proc/self/fd` open on each of `files`, `retired` ones left out.
fn scan(files: &[(u64, u64)], retired: &[i32]) -> Vec<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let mut found = vec![Vec::new(); files.len()];
    if files.is_empty() {
        return found;
    }
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return found };
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if retired.contains(&fd) {
            continue;
        }
        // metadata() follows the descriptor's link to what it has open (stat only: never opens it).
        let Ok(m) = std::fs::metadata(entry.path()) else { continue };
        if let Some(i) = files.iter().position(|&f| f == (m.dev(), m.ino())) {
            found[i].push(fd);
        }
    }
    found
}

/// A released session gives its descriptors up (the instance is destroyed, they close).
pub fn release(own: &[i32]) {
    fds().claimed.retain(|fd| !own.contains(fd));
}

/// A retired session's descriptors stay open until the process exits, never written through
/// again: no other instance to protect.
pub fn retire(own: &[i32]) {
    let mut registry = fds();
    registry.claimed.retain(|fd| !own.contains(fd));
    registry.retired.extend(own);
}
