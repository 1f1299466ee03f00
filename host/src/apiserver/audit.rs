//! The audit of writes: one line (target `kinformer::audit`) per write a
//! plugin asked for, and a [`WriteRecord`] for the writer's observer.

use std::sync::Arc;

use serde::Serialize;

use super::WriteError;
use super::request::cut;
use super::writer::Writer;

/// How much of an error message a record and an audit line keep.
const KEPT_MESSAGE_LEN: usize = 512;

/// Sees the record of every write a writer is asked for, on the thread that
/// asked. Keep it cheap.
pub type WriteObserver = Arc<dyn Fn(&WriteRecord) + Send + Sync>;

/// One write a plugin asked for and how it ended, as the audit line says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WriteRecord {
    /// `create`, `update`, `patch`, `apply` or `delete` (an event is a create
    /// or, when it repeats, a patch of an Event).
    pub verb: &'static str,
    /// `apiVersion/Kind[/subresource]`.
    pub resource: String,
    /// The object's key, `namespace/name` or `name`.
    pub key: String,
    /// `ok`, or the kind of error (`denied`, `throttled`, ...).
    pub outcome: &'static str,
    /// The error's message, cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Sent with `dryRun=All`.
    pub dry_run: bool,
    /// The object or patch sent (or that would have been), cut at 1 KiB
    /// (whole for an [offline](super::Cluster::offline) cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl WriteRecord {
    /// An outbound HTTP request as a rollout compares it with the other
    /// version's: resource `http`, its method as the verb, its URL as the
    /// key (as [`crate::text::redact_url`] shows it: the record reaches the
    /// plugin's status), and as the body the SHA-256 of its body and of its
    /// query, so that two requests that differ only in their query still
    /// differ; refused when the plugin's grant or limits refused it, `ok`
    /// however else it ended.
    #[must_use]
    pub fn of_request(intent: &crate::outbound::Intent, outcome: crate::outbound::Outcome, shadow: bool) -> Self {
        let outcome = if outcome.is_refusal() { outcome.as_str() } else { "ok" };
        let verb = match intent.method.as_str() {
            "GET" => "GET",
            "POST" => "POST",
            "PUT" => "PUT",
            "PATCH" => "PATCH",
            "DELETE" => "DELETE",
            "HEAD" => "HEAD",
            "OPTIONS" => "OPTIONS",
            _ => "HTTP",
        };
        let mut body = serde_json::json!({"sha256": intent.body_sha256});
        if let Some((_, query)) = intent.url.split_once('?') {
            body["querySha256"] = crate::plugin::digest(query.as_bytes()).into();
        }
        Self {
            verb,
            resource: "http".into(),
            key: crate::text::redact_url(&intent.url),
            outcome,
            message: None,
            dry_run: shadow,
            body: Some(body.to_string()),
        }
    }

    /// True when the write was done (or, in dry run, validated).
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.outcome == "ok"
    }
}

/// What a write sends, for the audit: verb, resource, key and body.
pub(super) struct Audited {
    pub(super) verb: &'static str,
    pub(super) resource: String,
    pub(super) key: String,
    pub(super) body: Option<String>,
}

impl Writer {
    /// Logs the audit line and tells the observer.
    pub(super) fn audit<T>(&self, audited: Audited, result: Result<T, WriteError>) -> Result<T, WriteError> {
        let inner = &self.inner;
        let record = WriteRecord {
            verb: audited.verb,
            resource: audited.resource,
            key: audited.key,
            outcome: result.as_ref().map_or_else(WriteError::kind, |_| "ok"),
            message: result
                .as_ref()
                .err()
                .map(|error| cut(error.message(), KEPT_MESSAGE_LEN).to_owned()),
            dry_run: inner.dry_run,
            body: audited.body,
        };
        // An absent error is no field at all, not an empty one.
        tracing::info!(
            target: "kinformer::audit",
            plugin = %inner.plugin,
            verb = record.verb,
            resource = %record.resource,
            key = %record.key,
            outcome = record.outcome,
            dry_run = record.dry_run,
            error = record.message.as_deref(),
            "write"
        );
        if let Some(observer) = &inner.observer {
            observer(&record);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbound::{Intent, Outcome};

    fn request(url: &str) -> WriteRecord {
        let intent = Intent {
            method: "GET".into(),
            url: url.into(),
            body_sha256: crate::plugin::digest(b""),
        };
        WriteRecord::of_request(&intent, Outcome::Ok, false)
    }

    #[test]
    fn a_request_s_record_shows_no_query_yet_tells_queries_apart() {
        let url = "https://hooks.example.com:443/hook?token=SECRET";
        let record = request(url);
        assert_eq!(record.key, "https://hooks.example.com:443/hook?…");
        let shown = serde_json::to_string(&record).unwrap();
        assert!(!shown.contains("SECRET"), "{shown}");
        let same = crate::rollout::compare(std::slice::from_ref(&record), &[request(url)]);
        assert!(same.differences.is_empty(), "{:?}", same.differences);
        let other = crate::rollout::compare(&[record], &[request("https://hooks.example.com:443/hook?token=OTHER")]);
        assert_eq!(other.differences.len(), 1, "{:?}", other.differences);
        let said = format!("{:?}", other.differences);
        assert!(said.contains("querySha256") && !said.contains("SECRET"), "{said}");
    }
}
