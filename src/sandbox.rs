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

use crate::error::{Error, Result};

/// The caller's sandbox settings at bind time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub external_access: bool,
    pub allowed_directories: Vec<String>,
    pub allowed_paths: Vec<String>,
}

use crate::lake::is_remote;

/// `..` and `.` removed lexically from an absolute path (for paths that do not exist).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The path with symlinks and `..` resolved as far as it exists; the rest joined lexically.
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let lexical = normalize(&absolute);
    if let Ok(real) = std::fs::canonicalize(&absolute) {
        return real;
    }
    // The deepest existing ancestor decides where the path really points.
    let mut existing = lexical.clone();
    let mut rest = Vec::new();
    while let Some(name) = existing.file_name().map(|n| n.to_os_string()) {
        existing.pop();
        rest.push(name);
        if let Ok(real) = std::fs::canonicalize(&existing) {
            return rest.iter().rev().fold(real, |p, n| p.join(n));
        }
    }
    lexical
}

impl Default for Sandbox {
    fn default() -> Sandbox {
        Sandbox::open()
    }
}

impl Sandbox {
    /// A remote path is allowed, like DuckDB's, when an allowed directory or path is a remote
    /// prefix of it (e.g. `s3://bucket/lake/`) and it has no `..` segment to climb out with.
    fn permits_remote(&self, path: &str) -> bool {
        let climbs = path.split('/').any(|seg| seg == ".." || seg == ".");
        !climbs
            && self.allowed_directories.iter().chain(&self.allowed_paths).any(|d| {
                is_remote(d)
                    && (path == d.trim_end_matches('/') || path.starts_with(&format!("{}/", d.trim_end_matches('/'))))
            })
    }

    /// No restriction (external access on): what DuckDB does by default.
    pub fn open() -> Sandbox {
        Sandbox { external_access: true, allowed_directories: Vec::new(), allowed_paths: Vec::new() }
    }

    fn inside_allowed_directory(&self, real: &Path) -> bool {
        self.allowed_directories.iter().any(|d| real.starts_with(resolve(Path::new(d))))
    }

    fn permits_resolved(&self, real: &Path) -> bool {
        self.allowed_paths.iter().any(|p| resolve(Path::new(p)) == real) || self.inside_allowed_directory(real)
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
        if path.len() > crate::lake::MAX_PATH {
            return false;
        }
        if is_remote(path) {
            return self.permits_remote(path);
        }
        let local = path.strip_prefix("file://").unwrap_or(path);
        !local.contains('\0') && self.permits_resolved(&resolve(Path::new(local)))
    }

    /// The error DuckDB's readers give, naming the setting and what is allowed.
    pub fn denied(&self, function: &'static str, path: &str) -> Error {
        let shown: String = path.chars().take(512).collect();
        Error::Lake {
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
            return if self.permits_remote(dir) { Ok(()) } else { Err(self.denied(function, dir)) };
        }
        let local = dir.strip_prefix("file://").unwrap_or(dir);
        if local.len() > crate::lake::MAX_PATH
            || local.contains('\0')
            || !self.inside_allowed_directory(&resolve(Path::new(local)))
        {
            return Err(self.denied(function, dir));
        }
        let mut pending = vec![PathBuf::from(local)];
        while let Some(d) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else { continue };
                let p = entry.path();
                if kind.is_symlink() {
                    if !self.permits_resolved(&resolve(&p)) {
                        return Err(self.denied(function, &p.to_string_lossy()));
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
        let msg = s.denied("paimon_scan", other.to_str().unwrap()).to_string();
        assert!(msg.contains("enable_external_access") && msg.contains("other"), "{msg}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
