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
            PluginState::Running if plugin.handles_nothing => (true, true, "HandlesNothing"),
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
            ("HandlesNothing", _) => "running, but its plugin subscribes to nothing it may watch, so it handles no \
                                      delta: does spec.config name a resource, and does spec.grant.resources hold it?"
                .to_owned(),
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
        let mut status = json!({
            "observedGeneration": generation,
            "plugin": plugin,
            "digest": self.digest,
            "shortDigest": short,
            "deltas": self.deltas,
            "errors": self.errors,
            "lastError": self.last_error,
            "conditions": [condition("Ready", self.ready), condition("Degraded", self.degraded)],
        });
        // What is unknown is absent, as the API server would store it.
        if let Some(fields) = status.as_object_mut() {
            fields.retain(|_, value| !value.is_null());
        }
        status
    }
}

/// The merge patch that makes a `stored` status `status`, or `None` when it
/// already is: a field `stored` has and `status` lacks is removed with a
/// `null`, since a merge patch leaves absent fields as they are.
#[must_use]
pub fn merge_patch(stored: Option<&Value>, status: &Value) -> Option<Value> {
    if stored == Some(status) {
        return None;
    }
    let mut patch = status.clone();
    if let (Some(stored), Some(fields)) = (stored.and_then(Value::as_object), patch.as_object_mut()) {
        for name in stored.keys() {
            fields.entry(name.clone()).or_insert(Value::Null);
        }
    }
    Some(patch)
}

/// Whether `status` differs from `stored` in more than its counts (`deltas`
/// and `errors`), which a Handler's work changes all the time and which are
/// written less often.
#[must_use]
pub fn changed_beyond_counts(stored: Option<&Value>, status: &Value) -> bool {
    let without_counts = |status: &Value| {
        let mut status = status.clone();
        if let Some(fields) = status.as_object_mut() {
            fields.remove("deltas");
            fields.remove("errors");
        }
        status
    };
    stored.map(without_counts) != Some(without_counts(status))
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
    fn a_plugin_that_subscribes_to_nothing_is_degraded_and_says_what_to_check() {
        let mut idle = plugin(PluginState::Running);
        idle.handles_nothing = true;
        let observed = Observed::of_plugin(Some(&idle), "ab");
        assert_eq!(
            (observed.ready, observed.degraded, observed.reason),
            (true, true, "HandlesNothing")
        );
        assert!(observed.message.contains("spec.config"), "{}", observed.message);
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

    /// A JSON merge patch applied to `target` (RFC 7386), as the API server
    /// applies one.
    fn merged(target: &Value, patch: &Value) -> Value {
        let mut target = target.clone();
        json_patch::merge(&mut target, patch);
        target
    }

    #[test]
    fn the_status_as_the_server_stores_it_needs_no_patch_and_a_field_gone_is_removed() {
        let refused = Observed::refused(&Refusal::Module("ConfigMap shop/m not found".into()));
        let status = refused.status("shop.h", 1, &Value::Null, "t1");
        assert!(status.get("lastError").is_none() && status.get("digest").is_none());
        let patch = merge_patch(None, &status).unwrap();
        let stored = merged(&Value::Null, &patch);
        assert_eq!(merge_patch(Some(&stored), &status), None, "written once, then equal");

        let running = Observed::of_plugin(Some(&plugin(PluginState::Running)), "0123456789abcdef");
        let mut failed = plugin(PluginState::Running);
        failed.last_error = Some("trap".into());
        let with_error = Observed::of_plugin(Some(&failed), "0123456789abcdef").status("shop.h", 1, &stored, "t2");
        let stored = merged(&stored, &merge_patch(Some(&stored), &with_error).unwrap());
        assert_eq!(stored["lastError"], "trap");
        let cleared = running.status("shop.h", 1, &stored, "t3");
        let stored = merged(&stored, &merge_patch(Some(&stored), &cleared).unwrap());
        assert_eq!(stored, cleared, "the error is gone from what the server keeps");
        assert_eq!(merge_patch(Some(&stored), &cleared), None);
    }

    #[test]
    fn counts_alone_are_not_a_change_of_state() {
        let mut busy = plugin(PluginState::Running);
        let before = Observed::of_plugin(Some(&busy), "ab").status("shop.h", 1, &Value::Null, "t1");
        busy.deltas = 10;
        let after = Observed::of_plugin(Some(&busy), "ab").status("shop.h", 1, &before, "t2");
        assert!(!changed_beyond_counts(Some(&before), &after));
        let failed =
            Observed::of_plugin(Some(&plugin(PluginState::Quarantined)), "ab").status("shop.h", 1, &before, "t2");
        assert!(changed_beyond_counts(Some(&before), &failed));
        assert!(changed_beyond_counts(None, &before));
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
