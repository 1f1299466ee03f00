//! A Handler's status, made from its plugin's: the conditions `Ready` and
//! `Degraded` with their reasons, the module's digest, counts and the last
//! error, sanitised as the status endpoint sanitises it.

use serde_json::{Value, json};

use super::oci::PullError;
use super::spec::Refusal;
use crate::runtime::{PluginState, PluginStatus};

/// The longest last error a status shows (the status page's length).
const ERROR_LEN: usize = 512;

/// Where a Handler is, as its conditions say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `Ready`: handling deltas.
    pub ready: bool,
    /// `Degraded`: something is wrong, whether or not it runs.
    pub degraded: bool,
    /// Why, in one word (`Running`, `Rejected`, `CompileFailed`, ...).
    pub reason: &'static str,
    /// What happened, for a person.
    pub message: String,
    /// The module's SHA-256, when it was read.
    pub digest: Option<String>,
    /// Deltas handled.
    pub deltas: u64,
    /// Failed `handle` calls and writes.
    pub errors: u64,
    /// The last error, sanitised.
    pub last_error: Option<String>,
}

impl Observed {
    /// A Handler that does not run, and why.
    #[must_use]
    pub fn refused(refusal: &Refusal) -> Self {
        Self {
            ready: false,
            degraded: true,
            reason: refusal.reason(),
            message: crate::text::sanitize(&refusal.to_string(), ERROR_LEN),
            digest: None,
            deltas: 0,
            errors: 0,
            last_error: None,
        }
    }

    /// A Handler whose module `reference` is being pulled.
    #[must_use]
    pub fn pulling(reference: &str) -> Self {
        Self {
            ready: false,
            degraded: false,
            reason: "Pulling",
            message: crate::text::sanitize(&format!("pulling {reference}"), ERROR_LEN),
            digest: None,
            deltas: 0,
            errors: 0,
            last_error: None,
        }
    }

    /// A Handler whose module's pull failed for now, tried again later.
    #[must_use]
    pub fn pull_failed(error: &PullError) -> Self {
        let message = crate::text::sanitize(&format!("{error}; trying again"), ERROR_LEN);
        Self {
            ready: false,
            degraded: true,
            reason: "PullFailed",
            last_error: Some(message.clone()),
            message,
            digest: None,
            deltas: 0,
            errors: 0,
        }
    }

    /// A Handler whose plugin is `plugin` (none yet: starting), its module
    /// `digest`.
    #[must_use]
    pub fn of_plugin(plugin: Option<&PluginStatus>, digest: &str) -> Self {
        let Some(plugin) = plugin else {
            return Self::starting(digest);
        };
        let last_error = plugin
            .last_error
            .as_deref()
            .or(plugin.load_error.as_deref())
            .or(plugin.last_write_error.as_deref())
            .map(|error| crate::text::sanitize(error, ERROR_LEN));
        let write_failed = plugin.last_write_error.is_some();
        let (ready, degraded, reason) = match plugin.state {
            PluginState::Running if plugin.rejected_digest.is_some() => (true, true, "CompileFailed"),
            PluginState::Running if write_failed => (true, true, "WriteFailed"),
            PluginState::Running => (true, false, "Running"),
            PluginState::Starting => (false, false, "Starting"),
            PluginState::Restarting => (false, true, "Trapped"),
            PluginState::Quarantined => (false, true, "Quarantined"),
            PluginState::Failed => (false, true, "CompileFailed"),
            PluginState::Standby => (false, false, "Standby"),
            _ => (false, false, "Stopped"),
        };
        let message = match (reason, &last_error) {
            ("Running", _) => "handling deltas".to_owned(),
            ("Starting", _) => "loading: compiling, init, cache sync".to_owned(),
            ("Standby", _) => "waiting for this replica to lead".to_owned(),
            (_, Some(error)) => error.clone(),
            (reason, None) => reason.to_owned(),
        };
        Self {
            ready,
            degraded,
            reason,
            message,
            digest: Some(digest.to_owned()),
            deltas: plugin.deltas,
            errors: plugin.errors + plugin.write_errors,
            last_error,
        }
    }

    fn starting(digest: &str) -> Self {
        Self {
            ready: false,
            degraded: false,
            reason: "Starting",
            message: "loading: compiling, init, cache sync".to_owned(),
            digest: Some(digest.to_owned()),
            deltas: 0,
            errors: 0,
            last_error: None,
        }
    }

    /// The status subresource for `generation`, carrying over each
    /// condition's `lastTransitionTime` from `previous` while its status
    /// stays; `now` stamps the others (RFC 3339).
    #[must_use]
    pub fn status(&self, plugin: &str, generation: i64, previous: &Value, now: &str) -> Value {
        let condition = |kind: &str, on: bool| {
            let status = if on { "True" } else { "False" };
            let before = previous["conditions"]
                .as_array()
                .and_then(|conditions| conditions.iter().find(|condition| condition["type"] == kind));
            let since = before
                .filter(|before| before["status"] == status)
                .and_then(|before| before["lastTransitionTime"].as_str())
                .unwrap_or(now);
            json!({"type": kind, "status": status, "reason": self.reason, "message": self.message,
                   "lastTransitionTime": since, "observedGeneration": generation})
        };
        let short = self
            .digest
            .as_deref()
            .map(|digest| digest.strip_prefix("sha256:").unwrap_or(digest))
            .map(|digest| digest[..12.min(digest.len())].to_owned());
        json!({
            "observedGeneration": generation,
            "plugin": plugin,
            "digest": self.digest,
            "shortDigest": short,
            "deltas": self.deltas,
            "errors": self.errors,
            "lastError": self.last_error,
            "conditions": [condition("Ready", self.ready), condition("Degraded", self.degraded)],
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn plugin(state: PluginState) -> PluginStatus {
        let mut status = PluginStatus::new(Path::new("shop.h.wasm"));
        status.state = state;
        status
    }

    #[test]
    fn a_running_plugin_is_ready_and_a_refused_write_degrades_it_with_the_servers_words() {
        let running = Observed::of_plugin(Some(&plugin(PluginState::Running)), "ab");
        assert_eq!(
            (running.ready, running.degraded, running.reason),
            (true, false, "Running")
        );
        let mut refused = plugin(PluginState::Running);
        refused.write_errors = 1;
        refused.last_write_error = Some("patch v1/ConfigMap shop/c: configmaps \"c\" is forbidden\n".into());
        let observed = Observed::of_plugin(Some(&refused), "ab");
        assert_eq!(
            (observed.ready, observed.degraded, observed.reason),
            (true, true, "WriteFailed")
        );
        assert_eq!(
            observed.last_error.as_deref(),
            Some("patch v1/ConfigMap shop/c: configmaps \"c\" is forbidden\u{fffd}")
        );
        assert_eq!(observed.errors, 1);
    }

    #[test]
    fn failures_are_not_ready_and_say_why() {
        for (state, reason) in [
            (PluginState::Failed, "CompileFailed"),
            (PluginState::Quarantined, "Quarantined"),
            (PluginState::Restarting, "Trapped"),
        ] {
            let observed = Observed::of_plugin(Some(&plugin(state)), "ab");
            assert_eq!(
                (observed.ready, observed.degraded, observed.reason),
                (false, true, reason)
            );
        }
        let refused = Observed::refused(&Refusal::Module("ConfigMap shop/m not found".into()));
        assert_eq!((refused.ready, refused.reason), (false, "Rejected"));
        let mismatch = Observed::refused(&Refusal::Pull(PullError::DigestMismatch {
            what: "r".into(),
            expected: "sha256:a".into(),
            actual: "sha256:b".into(),
        }));
        assert_eq!((mismatch.ready, mismatch.reason), (false, "DigestMismatch"));
        let pulling = Observed::pulling("r@sha256:a");
        assert_eq!(
            (pulling.ready, pulling.degraded, pulling.reason),
            (false, false, "Pulling")
        );
        let failed = Observed::pull_failed(&PullError::TimedOut {
            reference: "r".into(),
            timeout: std::time::Duration::from_secs(2),
        });
        assert_eq!(
            (failed.ready, failed.degraded, failed.reason),
            (false, true, "PullFailed")
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let running = Observed::of_plugin(Some(&plugin(PluginState::Running)), "0123456789abcdef");
        let first = running.status("shop.h", 1, &Value::Null, "t1");
        assert_eq!(first["shortDigest"], "0123456789ab");
        assert_eq!(first["conditions"][0]["lastTransitionTime"], "t1");
        let again = running.status("shop.h", 1, &first, "t2");
        assert_eq!(first, again);
        let failed = Observed::of_plugin(Some(&plugin(PluginState::Quarantined)), "0123456789abcdef");
        let after = failed.status("shop.h", 1, &again, "t3");
        assert_eq!(after["conditions"][0]["lastTransitionTime"], "t3");
        assert_eq!(after["conditions"][0]["status"], "False");
    }
}
