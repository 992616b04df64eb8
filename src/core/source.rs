//! What a `serving_build` / `serving_refresh` / `serving_follow` source string means, decided
//! here and nowhere else, without touching the database: a Paimon table (`paimon:<path>`, an
//! object-storage prefix with no file extension, or a local directory holding `schema/`), a
//! (qualified) table or view name, or a file path / glob DuckDB reads itself. Anything else is
//! refused, so a source string can never carry SQL of its own.

use crate::core::error::{Error, Result};
use crate::core::location::{is_remote, local_path};
use crate::core::quote;
use crate::core::sandbox::Sandbox;

/// Where a source's rows come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A Paimon table, read by our lake reader: its path (local or `s3://...`).
    Lake(String),
    /// A relation DuckDB reads on our connection.
    Relation(Source),
}

impl Origin {
    /// Decides what `raw` means. The filesystem is looked at (is this directory a Paimon table?)
    /// only where the sandbox allows; a path it forbids that is not a file source (those DuckDB
    /// checks itself) is refused here, naming the setting.
    pub fn of(raw: &str, sandbox: &Sandbox) -> Result<Origin> {
        if let Some(rest) = raw.trim_start().strip_prefix("paimon:") {
            return Ok(Origin::Lake(rest.trim().to_string()));
        }
        let s = raw.trim();
        if is_remote(s) && format_of(s).is_none() && !s.contains(['*', '?', '[']) {
            return Ok(Origin::Lake(s.to_string()));
        }
        if !sandbox.permits(s) {
            let file_like = Source::parse(s).is_ok();
            let path_like = s.contains('/') || s.contains('\\');
            if path_like && !file_like {
                return Err(sandbox.denied("serving", s));
            }
        } else {
            // `file:///dir` names the same directory as `/dir` (one rule for every function).
            let p = std::path::Path::new(local_path(s));
            if p.is_dir() && p.join("schema").is_dir() {
                return Ok(Origin::Lake(s.to_string()));
            }
        }
        Source::parse(raw).map(Origin::Relation).map_err(|e| match e {
            // A path with no file extension: say what is there (where the sandbox lets us look).
            Error::BadSource { source, .. } if looks_like_path(s) && format_of(s).is_none() && sandbox.permits(s) => {
                let p = std::path::Path::new(local_path(s));
                let what = match std::fs::read_dir(p) {
                    // A directory we may not list may well hold a Paimon table: never say it has none.
                    Err(e) if p.is_dir() => format!("it is a directory that cannot be read ({e})"),
                    Ok(_) => "it is a directory but not a Paimon table (it has no schema/ subdirectory)".into(),
                    Err(_) if p.exists() => "it is a file without a known extension".into(),
                    Err(_) => "no such file or directory".into(),
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
    pub fn lake_path(raw: &str, sandbox: &Sandbox) -> Option<String> {
        match Origin::of(raw, sandbox) {
            Ok(Origin::Lake(path)) => Some(path),
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

    #[test]
    fn lake_origins() {
        let open = Sandbox::open();
        let lake = |p: &str| Origin::Lake(p.to_string());
        assert_eq!(Origin::of("paimon: /wh/t ", &open).unwrap(), lake("/wh/t"));
        assert_eq!(Origin::of("s3://b/wh/db.db/t", &open).unwrap(), lake("s3://b/wh/db.db/t"));
        assert_eq!(
            Origin::of("s3://b/o.parquet", &open).unwrap(),
            Origin::Relation(Source::File { path: "s3://b/o.parquet".into(), format: FileFormat::Parquet })
        );
        assert_eq!(Origin::of("orders", &open).unwrap(), Origin::Relation(Source::Table(vec!["orders".into()])));
    }

    #[test]
    fn relation_sql_quotes_everything() {
        let s = Source::parse("/tmp/it's.parquet").unwrap();
        assert_eq!(s.relation_sql(), "read_parquet('/tmp/it''s.parquet')");
        let t = Source::parse("main.\"a\"\"b\"").unwrap();
        assert_eq!(t.relation_sql(), "\"main\".\"a\"\"b\"");
    }
}
