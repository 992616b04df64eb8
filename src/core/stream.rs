//! What a `fluss://` source string names: the cluster's bootstrap servers and one table.
//!
//! `fluss://<host:port>[,<host:port>...]/<database>.<table>` — the form Fluss's own clients
//! take (`bootstrap.servers`), with the table path after it. Pure: parsing and the checks that
//! make a bad address a clear error naming the value before any network call.

/// The prefix that makes a source a Fluss table.
pub const PREFIX: &str = "fluss://";

/// A parsed `fluss://` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlussAddress {
    /// `host:port[,host:port...]`, as Fluss's `bootstrap.servers` takes it.
    pub bootstrap: String,
    pub database: String,
    pub table: String,
}

impl FlussAddress {
    /// The address written back (what the layer records as its source).
    pub fn uri(&self) -> String {
        format!("{PREFIX}{}/{}.{}", self.bootstrap, self.database, self.table)
    }

    /// `database.table`, for messages.
    pub fn path(&self) -> String {
        format!("{}.{}", self.database, self.table)
    }
}

/// Whether `raw` is meant as a Fluss table (it starts with `fluss://`, in any case).
pub fn is_fluss(raw: &str) -> bool {
    raw.trim().get(..PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(PREFIX))
}

/// `raw` as it may be shown: a user or password before an `@` in the address masked (such an
/// address is refused, and its refusal must not print the secret).
pub fn redacted(raw: &str) -> String {
    let Some(rest) = raw.trim().get(PREFIX.len()..).filter(|_| is_fluss(raw)) else { return raw.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{PREFIX}***{}", &rest[at..]),
        None => raw.to_string(),
    }
}

/// Parses a `fluss://` address; `Err(problem)` says what is wrong with it.
pub fn parse(raw: &str) -> Result<FlussAddress, String> {
    let raw = raw.trim();
    if !is_fluss(raw) {
        return Err(format!("it does not start with {PREFIX}"));
    }
    let rest = &raw[PREFIX.len()..];
    let Some((servers, path)) = rest.split_once('/') else {
        return Err("it names no table: give fluss://<host:port>/<database>.<table>".into());
    };
    if servers.contains('@') {
        return Err("credentials never go in the address (give them in options := MAP {...})".into());
    }
    if servers.is_empty() {
        return Err("it names no server: give fluss://<host:port>/<database>.<table>".into());
    }
    for server in servers.split(',') {
        let Some((host, port)) = server.rsplit_once(':') else {
            return Err(format!("server '{server}' has no port (host:port)"));
        };
        if host.is_empty() || host.contains(['/', ' ', '?', '#']) {
            return Err(format!("server '{server}' is not host:port"));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("server '{server}' has no valid port (1..65535)"));
        }
    }
    let path = path.trim_end_matches('/');
    let Some((database, table)) = path.split_once('.') else {
        return Err(format!("'{path}' is not <database>.<table>"));
    };
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if !ok(database) || !ok(table) {
        return Err(format!("'{path}' is not <database>.<table> (letters, digits, '_' and '-', as Fluss names them)"));
    }
    Ok(FlussAddress { bootstrap: servers.to_string(), database: database.into(), table: table.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_or_more_servers() {
        let a = parse("fluss://127.0.0.1:9123/fluss.orders").unwrap();
        assert_eq!(
            (a.bootstrap.as_str(), a.database.as_str(), a.table.as_str()),
            ("127.0.0.1:9123", "fluss", "orders")
        );
        assert_eq!(a.uri(), "fluss://127.0.0.1:9123/fluss.orders");
        let a = parse(" FLUSS://h1:1,h2:2/db.t ").unwrap();
        assert_eq!(a.bootstrap, "h1:1,h2:2");
        assert!(is_fluss("Fluss://x") && !is_fluss("paimon:x"));
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        for (raw, word) in [
            ("fluss://127.0.0.1:9123", "no table"),
            ("fluss:///db.t", "no server"),
            ("fluss://host/db.t", "no port"),
            ("fluss://host:99999/db.t", "valid port"),
            ("fluss://user:secret@host:1/db.t", "credentials"),
            ("fluss://host:1/orders", "<database>.<table>"),
            ("fluss://host:1/db.t;x", "<database>.<table>"),
        ] {
            let e = parse(raw).unwrap_err();
            assert!(e.contains(word), "{raw}: {e}");
            assert!(!e.contains("secret"), "{raw}: {e}");
        }
        assert_eq!(redacted("fluss://user:secret@host:1/db.t"), "fluss://***@host:1/db.t");
        assert_eq!(redacted("fluss://host:1/db.t"), "fluss://host:1/db.t");
    }
}
