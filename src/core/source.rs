//! What a `serving_build` / `serving_refresh` / `serving_follow` source string means, decided
//! here and nowhere else, without touching the database or the disk: a Fluss table
//! (`fluss://...`), a Paimon table (`paimon:<path>`, an object-storage prefix with no file
//! extension, or a local directory holding `schema/`), a (qualified) table or view name, or a
//! file path / glob DuckDB reads itself. Anything else is refused, so a source string can never
//! carry SQL of its own. A function decides its source once, at its boundary, and passes the
//! [`Origin`] down: nothing below parses the string again.

use crate::core::error::{Error, Result};
use crate::core::location::{is_remote, local_path};
use crate::core::quote;
use crate::core::stream::{self, FlussAddress};

/// Where a source's rows come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A Paimon table, read by our lake reader: its path (local or `s3://...`).
    Lake(String),
    /// A relation DuckDB reads on our connection.
    Relation(Source),
    /// A Fluss table, read through the Fluss client.
    Stream(FlussAddress),
}

/// What is at a local path, as far as telling a source apart needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    /// A directory holding `schema/`: a Paimon table.
    PaimonTable,
    /// Any other directory.
    Directory,
    /// A directory that cannot be listed (why): it may hold a table we cannot see.
    Unreadable(String),
    /// Anything else that exists.
    File,
    Missing,
}

/// What deciding a source string needs of the world outside this module: the sandbox's verdict
/// on a path and its refusal, and what a permitted local path is. `host::sandbox::Sandbox`
/// answers from DuckDB's settings and the disk; the tests below answer from a table, so the
/// decision itself stays pure.
pub trait Look {
    fn permits(&self, path: &str) -> bool;
    fn denied(&self, function: &'static str, path: &str) -> Error;
    /// What `local` (a local path, `file://` already taken off) is; asked only of a path
    /// `permits` allowed.
    fn kind(&self, local: &str) -> PathKind;
}

impl Origin {
    /// Decides what `raw` means. What a local path is (is this directory a Paimon table?) is
    /// asked only where the sandbox allows; a path it forbids that is not a file source (those
    /// DuckDB checks itself) is refused here, naming the setting.
    pub fn of(raw: &str, look: &dyn Look) -> Result<Origin> {
        if stream::is_fluss(raw) {
            // The address is shown redacted: a refused one may carry a password.
            return stream::parse(raw)
                .map(Origin::Stream)
                .map_err(|reason| Error::BadSource { source: stream::redacted(raw), reason });
        }
        if let Some(rest) = raw.trim_start().strip_prefix("paimon:") {
            return Ok(Origin::Lake(rest.trim().to_string()));
        }
        let s = raw.trim();
        if is_remote(s) && format_of(s).is_none() && !s.contains(['*', '?', '[']) {
            return Ok(Origin::Lake(s.to_string()));
        }
        let permitted = look.permits(s);
        if !permitted {
            let file_like = Source::parse(s).is_ok();
            let path_like = s.contains('/') || s.contains('\\');
            if path_like && !file_like {
                return Err(look.denied("serving", s));
            }
        } else if look.kind(local_path(s)) == PathKind::PaimonTable {
            // `file:///dir` names the same directory as `/dir` (one rule for every function).
            return Ok(Origin::Lake(s.to_string()));
        }
        Source::parse(raw).map(Origin::Relation).map_err(|e| match e {
            // A path with no file extension: say what is there (where the sandbox lets us look).
            Error::BadSource { source, .. } if permitted && looks_like_path(s) && format_of(s).is_none() => {
                let what = match look.kind(local_path(s)) {
                    PathKind::Directory | PathKind::PaimonTable => {
                        "it is a directory but not a Paimon table (it has no schema/ subdirectory)".into()
                    }
                    // A directory we may not list may well hold a Paimon table: never say it has none.
                    PathKind::Unreadable(e) => format!("it is a directory that cannot be read ({e})"),
                    PathKind::File => "it is a file without a known extension".into(),
                    PathKind::Missing => "no such file or directory".into(),
                };
                Error::BadSource {
                    source,
                    reason: format!(
                        "{what}; a source is a table or view name, a Paimon table directory (paimon:<dir>), or a \
                         .parquet, .csv, .tsv or .json file (optionally .gz)"
                    ),
                }
            }
            other => other,
        })
    }

    /// The Paimon table a source string names, if it names one (and the sandbox lets us see).
    pub fn lake_path(raw: &str, look: &dyn Look) -> Option<String> {
        Origin::of(raw, look).ok()?.lake().map(str::to_string)
    }

    /// The Paimon table's path, if this is one.
    pub fn lake(&self) -> Option<&str> {
        match self {
            Origin::Lake(path) => Some(path),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileFormat {
    Parquet,
    Csv,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `table`, `schema.table` or `db.schema.table`; parts are stored unquoted.
    Table(Vec<String>),
    /// A file path or glob with its format, known from the extension.
    File { path: String, format: FileFormat },
}

const SCHEMES: [&str; 6] = ["s3://", "gs://", "gcs://", "az://", "abfss://", "file://"];

fn format_of(path: &str) -> Option<FileFormat> {
    let lower = path.to_ascii_lowercase();
    let lower = lower.strip_suffix(".gz").or_else(|| lower.strip_suffix(".zst")).unwrap_or(&lower);
    if lower.ends_with(".parquet") || lower.ends_with(".parq") {
        Some(FileFormat::Parquet)
    } else if lower.ends_with(".csv") || lower.ends_with(".tsv") {
        Some(FileFormat::Csv)
    } else if lower.ends_with(".json") || lower.ends_with(".jsonl") || lower.ends_with(".ndjson") {
        Some(FileFormat::Json)
    } else {
        None
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/')
        || s.contains('\\')
        || SCHEMES.iter().any(|p| s.to_ascii_lowercase().starts_with(p))
        || format_of(s).is_some()
}

/// Splits `a.b."c.d"` into identifier parts. Bare parts are letters, digits, `_` and `$`
/// (not starting with a digit); quoted parts use `""` for a literal quote.
fn parse_qualified_name(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let mut part = String::new();
        match chars.peek() {
            Some('"') => {
                chars.next();
                loop {
                    match chars.next() {
                        Some('"') if chars.peek() == Some(&'"') => {
                            chars.next();
                            part.push('"');
                        }
                        Some('"') => break,
                        Some(c) => part.push(c),
                        None => return Err("unterminated quoted identifier".into()),
                    }
                }
                if part.is_empty() {
                    return Err("empty quoted identifier".into());
                }
            }
            Some(c) if c.is_alphabetic() || *c == '_' => {
                while let Some(&c) = chars.peek() {
                    if c.is_alphanumeric() || c == '_' || c == '$' {
                        part.push(c);
                        chars.next();
                    } else {
                        break;
                    }
                }
            }
            Some(c) => return Err(format!("unexpected character '{c}' in a table name")),
            None => return Err("empty name part".into()),
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => continue,
            Some(c) => return Err(format!("unexpected character '{c}' in a table name")),
        }
    }
    if parts.len() > 3 {
        return Err("a table name has at most three parts (database.schema.table)".into());
    }
    Ok(parts)
}

impl Source {
    pub fn parse(raw: &str) -> Result<Source> {
        let s = raw.trim();
        if s.is_empty() {
            return Err(Error::BadSource { source: raw.into(), reason: "the source string is empty".into() });
        }
        if looks_like_path(s) {
            return match format_of(s) {
                Some(format) => Ok(Source::File { path: s.to_string(), format }),
                None => Err(Error::BadSource {
                    source: raw.into(),
                    reason: "a file source must end in .parquet, .csv, .tsv or .json (optionally .gz)".into(),
                }),
            };
        }
        parse_qualified_name(s).map(Source::Table).map_err(|why| Error::BadSource {
            source: raw.into(),
            reason: format!("it is neither a table/view name nor a file path ({why})"),
        })
    }

    /// The SQL relation to put after FROM. File paths become string literals, names become
    /// quoted identifiers: user text never becomes SQL syntax.
    pub fn relation_sql(&self) -> String {
        match self {
            Source::Table(parts) => parts.iter().map(|p| quote::ident(p)).collect::<Vec<_>>().join("."),
            Source::File { path, format } => {
                let lit = quote::literal(path);
                match format {
                    FileFormat::Parquet => format!("read_parquet({lit})"),
                    FileFormat::Csv => format!("read_csv({lit}, header = true)"),
                    FileFormat::Json => format!("read_json_auto({lit})"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        assert_eq!(Source::parse("orders").unwrap(), Source::Table(vec!["orders".into()]));
        assert_eq!(
            Source::parse("db.main.orders").unwrap(),
            Source::Table(vec!["db".into(), "main".into(), "orders".into()])
        );
        assert_eq!(Source::parse("\"we\"\"ird.name\"").unwrap(), Source::Table(vec!["we\"ird.name".into()]));
        assert_eq!(
            Source::parse("data/o*.parquet").unwrap(),
            Source::File { path: "data/o*.parquet".into(), format: FileFormat::Parquet }
        );
        assert_eq!(
            Source::parse("orders.csv").unwrap(),
            Source::File { path: "orders.csv".into(), format: FileFormat::Csv }
        );
    }

    #[test]
    fn smuggled_sql_is_refused() {
        for bad in ["orders; DROP TABLE x", "orders --", "(SELECT 1)", "a.b.c.d", "", "x' OR '1'='1", "1abc"] {
            assert!(Source::parse(bad).is_err(), "{bad} should be refused");
        }
        assert!(Source::parse("/tmp/x.txt").is_err());
    }

    /// A world of a few paths: what `kind` answers, and which paths the sandbox forbids.
    struct World {
        paths: Vec<(&'static str, PathKind)>,
        forbidden: Vec<&'static str>,
    }

    impl Look for World {
        fn permits(&self, path: &str) -> bool {
            !self.forbidden.iter().any(|f| path.starts_with(f))
        }
        fn denied(&self, function: &'static str, path: &str) -> Error {
            Error::Denied { function, path: path.into(), problem: "forbidden".into() }
        }
        fn kind(&self, local: &str) -> PathKind {
            assert!(self.permits(local), "asked what a forbidden path is: {local}");
            self.paths.iter().find(|(p, _)| *p == local).map_or(PathKind::Missing, |(_, k)| k.clone())
        }
    }

    fn open() -> World {
        World { paths: vec![], forbidden: vec![] }
    }

    #[test]
    fn lake_origins() {
        let lake = |p: &str| Origin::Lake(p.to_string());
        assert_eq!(Origin::of("paimon: /wh/t ", &open()).unwrap(), lake("/wh/t"));
        assert_eq!(Origin::of("s3://b/wh/db.db/t", &open()).unwrap(), lake("s3://b/wh/db.db/t"));
        assert_eq!(
            Origin::of("s3://b/o.parquet", &open()).unwrap(),
            Origin::Relation(Source::File { path: "s3://b/o.parquet".into(), format: FileFormat::Parquet })
        );
        assert_eq!(Origin::of("orders", &open()).unwrap(), Origin::Relation(Source::Table(vec!["orders".into()])));
        match Origin::of(" FLUSS://h:9123/shop.orders", &open()).unwrap() {
            Origin::Stream(a) => assert_eq!((a.bootstrap.as_str(), a.path().as_str()), ("h:9123", "shop.orders")),
            other => panic!("{other:?}"),
        }
        match Origin::of("fluss://u:secret@h:9123/shop.orders", &open()) {
            Err(Error::BadSource { source, .. }) => assert!(!source.contains("secret"), "{source}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_local_directory_is_asked_what_it_is() {
        let world = World {
            paths: vec![
                ("/wh/t", PathKind::PaimonTable),
                ("/wh/plain", PathKind::Directory),
                ("/wh/notes", PathKind::File),
                ("/wh/locked", PathKind::Unreadable("Permission denied".into())),
            ],
            forbidden: vec!["/secret"],
        };
        assert_eq!(Origin::of("/wh/t", &world).unwrap(), Origin::Lake("/wh/t".into()));
        assert_eq!(Origin::of("file:///wh/t", &world).unwrap(), Origin::Lake("file:///wh/t".into()));
        let reason = |raw: &str| match Origin::of(raw, &world) {
            Err(Error::BadSource { reason, .. }) => reason,
            other => panic!("{raw}: {other:?}"),
        };
        assert!(reason("/wh/plain").starts_with("it is a directory but not a Paimon table"));
        assert!(reason("/wh/notes").starts_with("it is a file without a known extension"));
        assert!(reason("/wh/missing").starts_with("no such file or directory"));
        assert!(reason("/wh/locked").starts_with("it is a directory that cannot be read (Permission denied)"));
        // A forbidden path is refused by the sandbox, never looked at (World::kind asserts it).
        assert!(matches!(Origin::of("/secret/t", &world), Err(Error::Denied { .. })));
        // A forbidden file source is left to DuckDB's own check.
        assert!(matches!(Origin::of("/secret/o.parquet", &world), Ok(Origin::Relation(Source::File { .. }))));
    }

    #[test]
    fn relation_sql_quotes_everything() {
        let s = Source::parse("/tmp/it's.parquet").unwrap();
        assert_eq!(s.relation_sql(), "read_parquet('/tmp/it''s.parquet')");
        let t = Source::parse("main.\"a\"\"b\"").unwrap();
        assert_eq!(t.relation_sql(), "\"main\".\"a\"\"b\"");
    }
}
