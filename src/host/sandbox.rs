//! DuckDB's file sandbox, applied to the files we read ourselves (Paimon tables): the settings
//! as a value, the decision on one path, and what a permitted path is (`core::source::Look`).
//!
//! DuckDB's own readers refuse a path when `enable_external_access` is false and the path is
//! neither under one of `allowed_directories` nor one of `allowed_paths`; a remote path only
//! under a remote prefix listed there. Files that DuckDB reads for us (Parquet/CSV/JSON sources
//! run on our connection) are checked by DuckDB itself, since those settings are global.
//! paimon-rust opens files behind DuckDB's back, so every lake function checks first, with the
//! settings as they stand when the caller's statement is bound (read by `functions::glue::settings`,
//! or by `host::settings` for work outside a call); a table's whole tree and a plan's files are
//! walked by `lake::confine`.
//!
//! Like DuckDB, the decision is made on the resolved path: `..` and symlinks are followed
//! before comparing, so neither can step out of an allowed directory. It lives in `host`, not
//! `core`, because it looks at the file system: to resolve a path, and to say what is there.
//!
//! Fails closed by construction: there is no default sandbox. A caller says which one it means,
//! [`Sandbox::locked`] (nothing permitted: what a setting that cannot be read counts as) or
//! [`Sandbox::open`] (DuckDB's own default, external access on).

use std::path::{Component, Path, PathBuf};

use crate::core::error::Error;
use crate::core::source::{Look, PathKind};

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
pub fn resolve(path: &Path) -> PathBuf {
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

impl Sandbox {
    /// A remote path is allowed, like DuckDB's, when an allowed directory is a remote prefix of
    /// it (e.g. `s3://bucket/lake/`) or, for a single file, when it is one of `allowed_paths`;
    /// never with a `.` or `..` segment to climb out with.
    pub fn permits_remote(&self, path: &str, file: bool) -> bool {
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

    /// Nothing permitted (external access off, nothing allowed): what a sandbox whose settings
    /// cannot be read counts as.
    pub fn locked() -> Sandbox {
        Sandbox { external_access: false, allowed_directories: Vec::new(), allowed_paths: Vec::new() }
    }

    /// Whether the resolved local path `real` lies inside one of `allowed_directories`.
    pub fn inside_allowed_directory(&self, real: &Path) -> bool {
        self.allowed_directories.iter().filter(|d| !is_remote(d)).any(|d| real.starts_with(resolve(Path::new(d))))
    }

    /// Whether the resolved local path `real` is one of `allowed_paths` or inside an allowed
    /// directory.
    pub fn permits_resolved(&self, real: &Path) -> bool {
        self.allowed_paths.iter().filter(|p| !is_remote(p)).any(|p| resolve(Path::new(p)) == real)
            || self.inside_allowed_directory(real)
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
}

/// `core::source` asks the sandbox what a source string may name: the verdict and refusal above,
/// and what a permitted local path is on the disk.
impl Look for Sandbox {
    fn permits(&self, path: &str) -> bool {
        Sandbox::permits(self, path)
    }
    fn denied(&self, function: &'static str, path: &str) -> Error {
        Sandbox::denied(self, function, path)
    }
    fn kind(&self, local: &str) -> PathKind {
        let p = Path::new(local);
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() && p.join("schema").is_dir() => PathKind::PaimonTable,
            Ok(m) if m.is_dir() => match std::fs::read_dir(p) {
                Ok(_) => PathKind::Directory,
                Err(e) => PathKind::Unreadable(e.to_string()),
            },
            Ok(_) => PathKind::File,
            Err(_) => PathKind::Missing,
        }
    }
}

#[cfg(test)]
impl Sandbox {
    /// External access off, with these allowed directories and paths (for tests).
    pub fn allowing(directories: &[&str], paths: &[&str]) -> Sandbox {
        Sandbox {
            external_access: false,
            allowed_directories: directories.iter().map(|s| s.to_string()).collect(),
            allowed_paths: paths.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// A fresh `<tmp>/<name>-<pid>` holding `allowed/`, `other/` and the symlink
    /// `allowed/link -> other` (for tests): (root, allowed, other, link).
    pub fn test_tree(name: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
        let root = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let (allowed, other) = (root.join("allowed"), root.join("other"));
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        let link = allowed.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&other, &link).unwrap();
        (root, allowed, other, link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_sandbox_allows_everything() {
        assert!(Sandbox::open().permits("/etc/passwd"));
        assert!(Sandbox::open().permits("s3://bucket/t"));
    }

    #[test]
    fn locked_sandbox_follows_dotdot_and_symlinks() {
        let (root, allowed, other, link) = Sandbox::test_tree("sh-sandbox");
        let s = Sandbox::allowing(&[allowed.to_str().unwrap()], &[]);
        assert!(s.permits(allowed.join("t").to_str().unwrap()));
        assert!(s.permits(allowed.join("missing/deeper").to_str().unwrap()));
        assert!(!s.permits(other.to_str().unwrap()));
        assert!(!s.permits(&format!("{}/../other", allowed.display())));
        assert!(!s.permits(link.join("t").to_str().unwrap()));
        assert!(!s.permits(&format!("{}x", allowed.display())), "a sibling sharing the prefix");
        assert!(!s.permits("s3://bucket/t"));
        let remote = Sandbox::allowing(&["s3://bucket/lake/"], &[]);
        assert!(remote.permits("s3://bucket/lake/db.db/t"));
        assert!(!remote.permits("s3://bucket/lake/../other") && !remote.permits("s3://bucket/lakehouse/t"));
        assert!(!Sandbox::allowing(&[], &[]).permits(allowed.to_str().unwrap()));
        assert!(!Sandbox::locked().permits(allowed.to_str().unwrap()));
        let exact = Sandbox::allowing(&[], &[other.to_str().unwrap()]);
        assert!(exact.permits(&format!("{}/../other", allowed.display())));
        // `..` after a link climbs from the link's target, as the kernel does: the same answer
        // whether or not the place it lands on exists.
        let probe = root.join("probe");
        let climb = format!("{}/../probe", link.display());
        assert!(!s.permits(&climb));
        std::fs::create_dir_all(&probe).unwrap();
        assert!(!s.permits(&climb));
        // allowed_paths name files: a remote one is no prefix for a table directory.
        let file = Sandbox::allowing(&[], &["s3://bucket/lake"]);
        assert!(file.permits("s3://bucket/lake") && !file.permits("s3://bucket/lake/t/x.parquet"));
        // file:// and file: are the local path; a remote allowed directory never permits a local one.
        assert!(s.permits(&format!("file://{}", allowed.join("t").display())));
        assert!(s.permits(&format!("file:{}", allowed.join("t").display())));
        assert!(!Sandbox::allowing(&["s3://b/lake/"], &[]).permits("s3:/b/lake/t"));
        let msg = s.denied("paimon_scan", "s3://key:hunter2@host/b").to_string();
        assert!(!msg.contains("hunter2"), "{msg}");
        let msg = s.denied("paimon_scan", other.to_str().unwrap()).to_string();
        assert!(msg.contains("enable_external_access") && msg.contains("other"), "{msg}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
