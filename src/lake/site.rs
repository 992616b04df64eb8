//! Where a lake error happened, and the one place paimon-rust's errors become ours: [`Site`]
//! names the SQL function and the table as the user named it, scrubs the secrets in play and any
//! URL credentials from every message, says what object storage's known failures mean in plain
//! words, and drives paimon-rust's futures (a current-thread runtime; against object storage,
//! within [`REMOTE_TIMEOUT`]).

use std::sync::Arc;
use std::time::Duration;

use super::options::Access;
use crate::core::error::{Error, Result};
use crate::core::location::{is_remote, without_url_credentials, without_userinfo};

/// A metadata call against object storage that has not answered by then will not: an endpoint
/// that swallows packets must give an error, not hang the user's statement.
pub(super) const REMOTE_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a lake error happened: the SQL function, the table as the user named it, and the
/// secrets no message may carry.
#[derive(Clone)]
pub(super) struct Site {
    pub(super) function: &'static str,
    pub(super) path: String,
    secrets: Arc<Vec<String>>,
    /// What to say when object storage finds no credential to sign with (`missing_credentials`).
    no_credentials: Arc<String>,
    /// What the reader was doing, added to any error (e.g. reading across a schema change).
    note: Option<String>,
}

impl Site {
    pub(super) fn new(function: &'static str, path: &str, access: &Access) -> Site {
        let secrets = Arc::new(access.options.secrets(path));
        let no_credentials =
            Arc::new(if is_remote(path) { access.options.missing_credentials(path) } else { String::new() });
        Site { function, path: path.replace('\0', "\\0"), secrets, no_credentials, note: None }
    }

    pub(super) fn err(&self, problem: impl std::fmt::Display) -> Error {
        let mut problem = match &self.note {
            Some(note) => format!("{note}: {problem}"),
            None => problem.to_string(),
        };
        for secret in self.secrets.iter() {
            problem = problem.replace(secret.as_str(), "***");
        }
        let problem = without_url_credentials(&problem);
        Error::Lake { function: self.function, path: without_url_credentials(&without_userinfo(&self.path)), problem }
    }

    /// The same site, with `note` (what the reader was doing) added to any error.
    pub(super) fn with_note(&self, note: Option<String>) -> Site {
        Site { note, ..self.clone() }
    }

    /// Runs one metadata future to completion on a fresh current-thread runtime.
    pub(super) fn block_on<T>(
        &self,
        remote: bool,
        fut: impl std::future::Future<Output = paimon::Result<T>>,
    ) -> Result<T> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| self.err(e))?;
        self.block_on_in(&rt, remote, fut)
    }

    /// Runs one future to completion on `rt`; against object storage, within [`REMOTE_TIMEOUT`].
    pub(super) fn block_on_in<T>(
        &self,
        rt: &tokio::runtime::Runtime,
        remote: bool,
        fut: impl std::future::Future<Output = paimon::Result<T>>,
    ) -> Result<T> {
        if remote {
            match rt.block_on(async { tokio::time::timeout(REMOTE_TIMEOUT, fut).await }) {
                Ok(r) => r.map_err(|e| self.paimon_err(e)),
                Err(_) => Err(self.err(format!("object storage did not answer within {}s", REMOTE_TIMEOUT.as_secs()))),
            }
        } else {
            rt.block_on(fut).map_err(|e| self.paimon_err(e))
        }
    }

    /// paimon-rust's error, with the features we refuse named in plain words.
    pub(super) fn paimon_err(&self, e: paimon::Error) -> Error {
        let full = e.to_string();
        // Object-storage errors carry a backtrace of our reader's stack: noise to a SQL user.
        let text = full.split("\nBacktrace:").next().unwrap_or(&full).trim_end();
        // What the storage layer says of a known failure (its request ids, retries and URLs are
        // context a SQL user cannot act on) is replaced by what to check.
        // Only object storage gets these words: a local permission error keeps its own text.
        let text = if !is_remote(&self.path) {
            text.to_string()
        } else if text.contains("NoSuchBucket") {
            "the bucket does not exist".to_string()
        } else if text.contains("tcp connect error") || text.contains("dns error") || text.contains("ConnectionRefused")
        {
            "cannot reach the object-storage endpoint (is s3.endpoint / AWS_ENDPOINT_URL right?)".to_string()
        } else if text.contains("failed to load signing credential") {
            self.no_credentials.to_string()
        } else if text.contains("detect_region") || text.contains("region is missing") {
            "the S3 region is not set: give options := MAP {'s3.region': '<region>'} or set AWS_REGION".to_string()
        } else if ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "PermissionDenied", " 403"]
            .iter()
            .any(|w| text.contains(w))
        {
            "access denied: check s3.access-key and s3.secret-key (or AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY) and the permissions they grant"
                .to_string()
        } else {
            text.to_string()
        };
        if text.contains("avro ocf") && text.contains("magic") {
            return self.err(format!(
                "ORC manifests are not supported (a manifest file is not Avro; paimon-cpp writes ORC manifests \
                 by default): {text}"
            ));
        }
        self.err(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lake::LakeOptions;

    #[test]
    fn messages_carry_no_secret() {
        let o = LakeOptions::new([
            ("s3.secret-key".to_string(), "hunter2-secret".to_string()),
            ("s3.access-key".to_string(), "AKIDEXAMPLE".to_string()),
        ]);
        let place = Site {
            function: "f",
            path: "s3://b/t".into(),
            secrets: Arc::new(o.secrets("s3://b/t")),
            no_credentials: Arc::default(),
            note: None,
        };
        let msg = place.err("denied for AKIDEXAMPLE with hunter2-secret").to_string();
        assert!(!msg.contains("hunter2") && !msg.contains("AKIDEXAMPLE"), "{msg}");
    }
}
