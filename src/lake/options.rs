//! How a statement reaches a lake table: the storage options (`options := MAP {...}`, Paimon's
//! own keys, completed from the standard AWS environment variables), which of them are secrets
//! (never shown, scrubbed from every message by `site`), and [`Access`]: DuckDB's sandbox as the
//! statement was bound, with those options.

use std::collections::{BTreeMap, HashMap};

use crate::core::error::{shown, Error, Result};
use crate::core::location::is_remote;
use crate::host::sandbox::Sandbox;

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

    /// Refuses options that no table of the call can use: they configure object storage, so a
    /// call whose tables (`tables`, as the user named them; a Fluss table's lake is found on
    /// the cluster, so it counts as remote) are all local would ignore them silently. The keys
    /// are named, never a value.
    pub fn check_used(&self, function: &'static str, tables: &[&str]) -> Result<()> {
        let remote = |t: &&str| is_remote(t.trim_start().strip_prefix("paimon:").unwrap_or(t).trim());
        if self.is_empty() || tables.iter().any(remote) {
            return Ok(());
        }
        let keys: Vec<String> = self.0.keys().map(|k| format!("'{}'", shown(k))).collect();
        let whose = match tables {
            [] => "this call names no table for them".to_string(),
            [one] => format!("'{}' is not on object storage", shown(one)),
            more => {
                let named: Vec<String> = more.iter().map(|t| format!("'{}'", shown(t))).collect();
                format!("{} are not on object storage", named.join(", "))
            }
        };
        Err(Error::BadArgument {
            function,
            parameter: "options",
            value: "MAP {…}".into(),
            problem: format!(
                "storage options ({}) are for Paimon tables on object storage (s3://...), and {whose}: leave \
                 options out",
                keys.join(", ")
            ),
        })
    }

    /// The properties paimon-rust's storage is built with for `path`: the options given, and
    /// for S3 the AWS environment variables where an option does not say otherwise.
    pub(super) fn storage_props(&self, path: &str) -> HashMap<String, String> {
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

    /// What object storage's "failed to load signing credential" means for `path`, in plain
    /// words: which of the key pair is missing (given neither as an option nor in the
    /// environment) and how to give it. Names keys and variables only, never a value.
    pub(super) fn missing_credentials(&self, path: &str) -> String {
        let props = self.storage_props(path);
        let given = |keys: &[&str]| keys.iter().any(|k| props.get(*k).is_some_and(|v| !v.is_empty()));
        let access = given(&["s3.access-key", "s3.access.key", "fs.s3a.access.key", "s3a.access.key"]);
        let secret = given(&["s3.secret-key", "s3.secret.key", "fs.s3a.secret.key", "s3a.secret.key"]);
        let missing = match (access, secret) {
            (true, false) => "an access key was given without its secret key (s3.secret-key / AWS_SECRET_ACCESS_KEY)",
            (false, true) => "a secret key was given without its access key (s3.access-key / AWS_ACCESS_KEY_ID)",
            _ => "no S3 credentials were given",
        };
        format!(
            "{missing}: give options := MAP {{'s3.access-key': ..., 's3.secret-key': ...}} (best as a prepared \
             parameter, so the secret stays out of the SQL text) or set AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY; for a public bucket, options := MAP {{'s3.anonymous': 'true'}}"
        )
    }

    /// Every secret value in play for `path` (given or from the environment), longest first.
    pub(super) fn secrets(&self, path: &str) -> Vec<String> {
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

/// How a statement may reach a table: DuckDB's sandbox as bound, and the storage options. No
/// default: the sandbox is always the one the statement was bound under (or read for it).
#[derive(Debug, Clone)]
pub struct Access {
    pub sandbox: Sandbox,
    pub options: LakeOptions,
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
        let aws = LakeOptions::new([("s3.endpoint".to_string(), "https://s3.eu-west-1.amazonaws.com".to_string())]);
        assert!(!aws.storage_props("s3://b/t").contains_key("s3.path-style-access"));
    }

    #[test]
    fn missing_credentials_say_which_half_is_missing_and_show_no_value() {
        let path = "s3://b/t";
        let none = LakeOptions::new([("s3.region".to_string(), "eu".to_string())]);
        // (the test process has no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY: cargo test's own env)
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() && std::env::var_os("AWS_SECRET_ACCESS_KEY").is_none() {
            assert!(none.missing_credentials(path).starts_with("no S3 credentials were given: give options := MAP"));
            let half = LakeOptions::new([("s3.access-key".to_string(), "AKIDEXAMPLE".to_string())]);
            let said = half.missing_credentials(path);
            assert!(said.starts_with("an access key was given without its secret key"), "{said}");
            assert!(!said.contains("AKIDEXAMPLE"), "{said}");
        }
    }

    #[test]
    fn options_on_local_tables_only_are_refused_by_key() {
        let o = LakeOptions::new([
            ("s3.region".to_string(), "eu".to_string()),
            ("s3.secret-key".to_string(), "hunter2-secret".to_string()),
        ]);
        for used in [&["s3://b/t"][..], &["paimon:s3a://b/t"], &["lake/t", "s3://b/m"], &["fluss://h:1/db.t"]] {
            assert_eq!(o.check_used("f", used), Ok(()), "{used:?}");
        }
        assert_eq!(LakeOptions::default().check_used("f", &["lake/t"]), Ok(()), "no options, nothing to refuse");
        let msg = o.check_used("f", &["paimon:lake/t"]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "f: parameter 'options' = 'MAP {…}': storage options ('s3.region', 's3.secret-key') are for Paimon \
             tables on object storage (s3://...), and 'paimon:lake/t' is not on object storage: leave options out"
        );
        assert!(!msg.contains("hunter2"));
        let msg = o.check_used("f", &["file:///a", "b"]).unwrap_err().to_string();
        assert!(msg.contains("'file:///a', 'b' are not on object storage"), "{msg}");
        let msg = o.check_used("f", &[]).unwrap_err().to_string();
        assert!(msg.contains("this call names no table for them"), "{msg}");
    }
}
