//! Where a path points, as text: local or object storage, the `file:` prefix, the longest path
//! worth resolving, whether two paths name the same table, and URLs shown without their
//! credentials. Pure path logic (no file is looked at), shared by the source strings, the
//! sandbox, the lake boundary and the serving layer.

/// Linux's PATH_MAX: no longer path can be opened, so none is worth resolving.
pub const MAX_PATH: usize = 4096;

/// Whether `path` names object storage rather than the local filesystem.
pub fn is_remote(path: &str) -> bool {
    path.find("://").is_some_and(|i| i > 1 && !path[..i].eq_ignore_ascii_case("file"))
}

/// A local path as the file system sees it (`file://` dropped, as DuckDB's readers do).
pub fn local_path(path: &str) -> &str {
    path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")).unwrap_or(path)
}

/// Whether two lake paths name the same table directory: the same text but for a trailing `/`,
/// or the same absolute path (a relative one taken from the working directory).
pub fn same_table(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/') || std::path::absolute(a).ok() == std::path::absolute(b).ok()
}

/// `scheme://user:password@host/...` shown without its user info.
pub fn without_userinfo(path: &str) -> String {
    let Some(i) = path.find("://") else { return path.to_string() };
    let rest = &path[i + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}://***@{}", &path[..i], &rest[at + 1..]),
        None => path.to_string(),
    }
}

/// Every URL in a message with its credentials replaced: the user info of
/// `scheme://user:password@host`, and the query string (an endpoint such as
/// `https://host/?token=...` carries one there). A storage error may quote either back.
pub fn without_url_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        // User info may hold any character but '/' and whitespace: it ends with the authority.
        let authority_end = rest.find(|c: char| c == '/' || c.is_whitespace()).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            out.push_str("***@");
            rest = &rest[at + 1..];
        }
        let end =
            rest.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>' | ',')).unwrap_or(rest.len());
        let url = &rest[..end];
        match url.find('?') {
            Some(q) => {
                out.push_str(&url[..q]);
                out.push_str("?***");
            }
            None => out.push_str(url),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_never_shown() {
        assert_eq!(without_userinfo("s3://key:secret@bucket/t"), "s3://***@bucket/t");
        assert_eq!(
            without_url_credentials("endpoint \"https://h:9/?token=abc&x=1\" failed; see http://a/b"),
            "endpoint \"https://h:9/?***\" failed; see http://a/b"
        );
        assert_eq!(
            without_url_credentials("url: http://u:p4ss@127.0.0.1:9000/b?x=1 and s3://b/t"),
            "url: http://***@127.0.0.1:9000/b?*** and s3://b/t"
        );
        assert_eq!(without_url_credentials("no urls, a@b"), "no urls, a@b");
        assert_eq!(without_url_credentials("at http://u:p,w@h/x, then"), "at http://***@h/x, then");
    }
}
