//! DuckDB's file sandbox, applied to the files we read ourselves (Paimon tables).
//!
//! DuckDB's own readers refuse a path when `enable_external_access` is false and the path is
//! neither under one of `allowed_directories` nor one of `allowed_paths`; a remote path only
//! under a remote prefix listed there. Files that DuckDB reads for us (Parquet/CSV/JSON sources run on our
//! connection) are checked by DuckDB itself, since those settings are global. paimon-rust
//! opens files behind DuckDB's back, so every lake function checks here first, with the
//! settings as they stand when the caller's statement is bound.
//!
//! Like DuckDB, the decision is made on the resolved path: `..` and symlinks are followed
//! before comparing, so neither can step out of an allowed directory. A Paimon table is a
//! directory tree, so a symlink anywhere inside it must stay inside the allowed area too.

use std::path::{Component, Path, PathBuf};

use crate::core::error::{Error, Result};

/// The caller's sandbox settings at bind time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub external_access: bool,
    pub allowed_directories: Vec<String>,
    pub allowed_paths: Vec<String>,
}

use crate::core::location::{is_remote, local_path, without_userinfo, MAX_PATH};

/// Symlinks followed in one resolution before giving up (the kernel's own limit is 40).
const MAX_LINKS: usize = 40;

/// Where `path` really points, resolved the way the kernel walks it: component by component,
/// each existing symlink followed and each `..` taken from the real directory reached so far
/// (so `allowed/link/..` is the parent of the link's target, not `allowed`). Components past
/// the first one that does not exist are joined as written: there is nothing there to follow,
/// and the kernel could not open the path either.
fn resolve(path: &Path) -> PathBuf {
    resolve_within(path, MAX_LINKS)
}

fn resolve_within(path: &Path, links_left: usize) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut real = PathBuf::from("/");
    let mut exists = true;
    for c in absolute.components() {
        match c {
            Component::RootDir | Component::Prefix(_) | Component::CurDir => {}
            Component::ParentDir => {
                real.pop();
            }
            Component::Normal(name) => {
                let next = real.join(name);
                let meta = if exists { std::fs::symlink_metadata(&next).ok() } else { None };
                match meta {
                    Some(m) if m.file_type().is_symlink() => match std::fs::canonicalize(&next) {
                        Ok(target) => real = target,
                        // A dangling link (or a loop): where it points, as far as that exists.
                        Err(_) => {
                            exists = false;
                            real = match std::fs::read_link(&next) {
                                Ok(target) if links_left > 0 => resolve_within(&real.join(target), links_left - 1),
                                _ => next,
                            };
                        }
                    },
                    Some(_) => real = next,
                    None => {
                        exists = false;
                        real = next;
                    }
                }
            }
        }
    }
    real
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::open()
    }
}

impl Sandbox {
    /// A remote path is allowed, like DuckDB's, when an allowed directory is a remote prefix of
    /// it (e.g. `s3://bucket/lake/`) or, for a single file, when it is one of `allowed_paths`;
    /// never with a `.` or `..` segment to climb out with.
    fn permits_remote(&self, path: &str, file: bool) -> bool {
        let climbs = path.split('/').any(|seg| seg == ".." || seg == ".");
        let under = |d: &String| {
            is_remote(d)
                && (path == d.trim_end_matches('/') || path.starts_with(&format!("{}/", d.trim_end_matches('/'))))
        };
        !climbs
            && (self.allowed_directories.iter().any(under) || (file && self.allowed_paths.iter().any(|p| p == path)))
    }

    /// No restriction (external access on): what DuckDB does by default.
    pub fn open() -> Sandbox {
        Sandbox { external_access: true, allowed_directories: Vec::new(), allowed_paths: Vec::new() }
    }

    fn inside_allowed_directory(&self, real: &Path) -> bool {
        self.allowed_directories.iter().filter(|d| !is_remote(d)).any(|d| real.starts_with(resolve(Path::new(d))))
    }

    fn permits_resolved(&self, real: &Path) -> bool {
        self.allowed_paths.iter().filter(|p| !is_remote(p)).any(|p| resolve(Path::new(p)) == real)
            || self.inside_allowed_directory(real)
    }

    /// The settings as they stand now, read on one of our connections (they are global, so
    /// this is what the user's connections see too): for work that runs outside a user call.
    pub fn query(conn: &duckdb::Connection) -> Result<Sandbox> {
        let failed = |e: duckdb::Error| Error::duckdb("streamhouse: reading the sandbox settings", &e);
        let list = |name: &str| -> Result<Vec<String>> {
            // Not `prepare_cached`: DuckDB folds current_setting() into the plan when it is
            // prepared, so a cached statement would keep answering the settings of its first use.
            let mut stmt =
                conn.prepare(&format!("SELECT unnest(current_setting('{name}'))::VARCHAR")).map_err(failed)?;
            let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(failed)?;
            rows.collect::<std::result::Result<Vec<_>, _>>().map_err(failed)
        };
        let external_access: bool = conn
            .query_row("SELECT current_setting('enable_external_access')::BOOLEAN", [], |r| r.get(0))
            .map_err(failed)?;
        Ok(Sandbox {
            external_access,
            allowed_directories: list("allowed_directories")?,
            allowed_paths: list("allowed_paths")?,
        })
    }

    /// Whether DuckDB's settings let a reader open `path` (before following links inside it).
    pub fn permits(&self, path: &str) -> bool {
        if self.external_access {
            return true;
        }
        if path.len() > MAX_PATH {
            return false;
        }
        if is_remote(path) {
            return self.permits_remote(path, true);
        }
        let local = local_path(path);
        !local.contains('\0') && self.permits_resolved(&resolve(Path::new(local)))
    }

    /// The error DuckDB's readers give, naming the setting and what is allowed.
    pub fn denied(&self, function: &'static str, path: &str) -> Error {
        let shown: String = without_userinfo(path).chars().take(512).collect();
        Error::Denied {
            function,
            path: shown.clone(),
            problem: format!(
                "Permission Error: Cannot access \"{shown}\" - file system operations are disabled by \
                 configuration (enable_external_access = false, and the path is not inside allowed_directories \
                 {:?} nor one of allowed_paths {:?})",
                self.allowed_directories, self.allowed_paths
            ),
        }
    }

    /// Refuses the table directory `dir` unless it lies inside an allowed directory and every
    /// symlink inside it points to an allowed place. `allowed_paths` name single files, as for
    /// DuckDB's readers, so they never open a whole table directory.
    pub fn check_tree(&self, function: &'static str, dir: &str) -> Result<()> {
        if self.external_access {
            return Ok(());
        }
        if is_remote(dir) {
            // Object storage has no symlinks: the prefix decides.
            return if self.permits_remote(dir, false) { Ok(()) } else { Err(self.denied(function, dir)) };
        }
        let local = local_path(dir);
        if local.len() > MAX_PATH || local.contains('\0') || !self.inside_allowed_directory(&resolve(Path::new(local)))
        {
            return Err(self.denied(function, dir));
        }
        // Symlinked directories are walked too (their targets were checked): paimon-rust reads
        // through them. Each real directory once, so a link loop ends.
        let mut seen = std::collections::HashSet::new();
        let mut pending = vec![resolve(Path::new(local))];
        while let Some(d) = pending.pop() {
            if !seen.insert(d.clone()) {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                let p = entry.path();
                if kind.is_symlink() {
                    let real = resolve(&p);
                    if !self.permits_resolved(&real) {
                        return Err(self.denied(function, &p.to_string_lossy()));
                    }
                    if real.is_dir() {
                        pending.push(real);
                    }
                } else if kind.is_dir() {
                    pending.push(p);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked(dirs: &[&str], paths: &[&str]) -> Sandbox {
        Sandbox {
            external_access: false,
            allowed_directories: dirs.iter().map(|s| s.to_string()).collect(),
            allowed_paths: paths.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn open_sandbox_allows_everything() {
        assert!(Sandbox::open().permits("/etc/passwd"));
        assert!(Sandbox::open().permits("s3://bucket/t"));
    }

    #[test]
    fn locked_sandbox_follows_dotdot_and_symlinks() {
        let root = std::env::temp_dir().join(format!("sh-sandbox-{}", std::process::id()));
        let allowed = root.join("allowed");
        let other = root.join("other");
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let link = allowed.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let s = locked(&[allowed.to_str().unwrap()], &[]);
        assert!(s.permits(allowed.join("t").to_str().unwrap()));
        assert!(s.permits(allowed.join("missing/deeper").to_str().unwrap()));
        assert!(!s.permits(other.to_str().unwrap()));
        assert!(!s.permits(&format!("{}/../other", allowed.display())));
        assert!(!s.permits(link.join("t").to_str().unwrap()));
        assert!(!s.permits(&format!("{}x", allowed.display())), "a sibling sharing the prefix");
        assert!(s.check_tree("t", allowed.to_str().unwrap()).is_err(), "the link inside escapes");
        std::fs::remove_file(&link).unwrap();
        assert!(s.check_tree("t", allowed.to_str().unwrap()).is_ok());
        assert!(!s.permits("s3://bucket/t"));
        let remote = locked(&["s3://bucket/lake/"], &[]);
        assert!(remote.permits("s3://bucket/lake/db.db/t") && remote.check_tree("t", "s3://bucket/lake/t").is_ok());
        assert!(!remote.permits("s3://bucket/lake/../other") && !remote.permits("s3://bucket/lakehouse/t"));
        assert!(!locked(&[], &[]).permits(allowed.to_str().unwrap()));
        let exact = locked(&[], &[other.to_str().unwrap()]);
        assert!(exact.permits(&format!("{}/../other", allowed.display())));
        assert!(exact.check_tree("t", other.to_str().unwrap()).is_err(), "allowed_paths are files, not trees");
        // `..` after a link climbs from the link's target, as the kernel does: the same answer
        // whether or not the place it lands on exists.
        let probe = root.join("probe");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        let climb = format!("{}/../probe", link.display());
        assert!(!s.permits(&climb));
        std::fs::create_dir_all(&probe).unwrap();
        assert!(!s.permits(&climb));
        // A symlinked directory inside the table is walked: a link in it cannot escape either.
        let table = allowed.join("tbl");
        let shared = allowed.join("shared");
        std::fs::create_dir_all(&table).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(&shared, table.join("bucket-0")).unwrap();
        assert!(s.check_tree("t", table.to_str().unwrap()).is_ok());
        std::os::unix::fs::symlink(other.join("x.parquet"), shared.join("x.parquet")).unwrap();
        assert!(s.check_tree("t", table.to_str().unwrap()).is_err(), "escape through a linked directory");
        // A loop of links ends.
        std::fs::remove_file(shared.join("x.parquet")).unwrap();
        std::os::unix::fs::symlink(&table, shared.join("loop")).unwrap();
        assert!(s.check_tree("t", table.to_str().unwrap()).is_ok());
        // allowed_paths name files: a remote one is no prefix for a table directory.
        let file = locked(&[], &["s3://bucket/lake"]);
        assert!(file.permits("s3://bucket/lake") && !file.permits("s3://bucket/lake/t/x.parquet"));
        assert!(
            file.check_tree("t", "s3://bucket/lake").is_err() && file.check_tree("t", "s3://bucket/lake/t").is_err()
        );
        // file:// and file: are the local path; a remote allowed directory never permits a local one.
        assert!(s.permits(&format!("file://{}", allowed.join("t").display())));
        assert!(s.permits(&format!("file:{}", allowed.join("t").display())));
        assert!(!locked(&["s3://b/lake/"], &[]).permits("s3:/b/lake/t"));
        let msg = s.denied("paimon_scan", "s3://key:hunter2@host/b").to_string();
        assert!(!msg.contains("hunter2"), "{msg}");
        let msg = s.denied("paimon_scan", other.to_str().unwrap()).to_string();
        assert!(msg.contains("enable_external_access") && msg.contains("other"), "{msg}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
