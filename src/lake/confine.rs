//! DuckDB's file sandbox applied to the files paimon-rust opens behind DuckDB's back (the
//! decision on one path is `host::sandbox`'s; this module walks what a table holds). A table is
//! a directory tree: at open, the directory must lie inside an allowed directory and every
//! symlink anywhere in it must point to an allowed place ([`check_tree`]); a planned read's
//! every file — which the table's own metadata may place elsewhere — must pass as a file DuckDB's
//! readers could open ([`confine`]).

use std::path::Path;

use paimon::table::DataSplit;

use crate::core::error::Result;
use crate::core::location::{is_remote, local_path, without_userinfo, MAX_PATH};
use crate::host::sandbox::{resolve, Sandbox};

/// Refuses the table directory `dir` unless it lies inside an allowed directory and every
/// symlink inside it points to an allowed place. `allowed_paths` name single files, as for
/// DuckDB's readers, so they never open a whole table directory.
pub fn check_tree(sandbox: &Sandbox, function: &'static str, dir: &str) -> Result<()> {
    if sandbox.external_access {
        return Ok(());
    }
    if is_remote(dir) {
        // Object storage has no symlinks: the prefix decides.
        return if sandbox.permits_remote(dir, false) { Ok(()) } else { Err(sandbox.denied(function, dir)) };
    }
    let local = local_path(dir);
    if local.len() > MAX_PATH || local.contains('\0') || !sandbox.inside_allowed_directory(&resolve(Path::new(local))) {
        return Err(sandbox.denied(function, dir));
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
                if !sandbox.permits_resolved(&real) {
                    return Err(sandbox.denied(function, &p.to_string_lossy()));
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

/// Refuses a read whose plan would open a file DuckDB's sandbox forbids. The table directory was
/// checked at open, but a table's own metadata chooses where its files are: the option
/// `data-file.path-directory`, a data file's external path in a manifest, a deletion vector's
/// index file. Each file of the plan must pass as a file DuckDB's readers could open.
pub(super) fn confine(sandbox: &Sandbox, splits: &[DataSplit]) -> std::result::Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_tree_stays_inside_the_allowed_area() {
        let (root, allowed, other, link) = Sandbox::test_tree("sh-confine");
        let s = Sandbox::allowing(&[allowed.to_str().unwrap()], &[]);
        let dir = allowed.to_str().unwrap();
        assert!(check_tree(&s, "t", dir).is_err(), "the link inside escapes");
        std::fs::remove_file(&link).unwrap();
        assert!(check_tree(&s, "t", dir).is_ok());
        assert!(check_tree(&Sandbox::locked(), "t", dir).is_err());
        assert!(check_tree(&Sandbox::open(), "t", other.to_str().unwrap()).is_ok());
        let remote = Sandbox::allowing(&["s3://bucket/lake/"], &[]);
        assert!(check_tree(&remote, "t", "s3://bucket/lake/t").is_ok());
        let exact = Sandbox::allowing(&[], &[other.to_str().unwrap()]);
        assert!(check_tree(&exact, "t", other.to_str().unwrap()).is_err(), "allowed_paths are files, not trees");
        // A symlinked directory inside the table is walked: a link in it cannot escape either.
        let table = allowed.join("tbl");
        let shared = allowed.join("shared");
        std::fs::create_dir_all(&table).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::os::unix::fs::symlink(&shared, table.join("bucket-0")).unwrap();
        assert!(check_tree(&s, "t", table.to_str().unwrap()).is_ok());
        std::os::unix::fs::symlink(other.join("x.parquet"), shared.join("x.parquet")).unwrap();
        assert!(check_tree(&s, "t", table.to_str().unwrap()).is_err(), "escape through a linked directory");
        // A loop of links ends.
        std::fs::remove_file(shared.join("x.parquet")).unwrap();
        std::os::unix::fs::symlink(&table, shared.join("loop")).unwrap();
        assert!(check_tree(&s, "t", table.to_str().unwrap()).is_ok());
        // allowed_paths name files: a remote one is no prefix for a table directory.
        let file = Sandbox::allowing(&[], &["s3://bucket/lake"]);
        assert!(
            check_tree(&file, "t", "s3://bucket/lake").is_err()
                && check_tree(&file, "t", "s3://bucket/lake/t").is_err()
        );
        std::fs::remove_dir_all(&root).unwrap();
    }
}
