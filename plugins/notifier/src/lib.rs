//! Tells a chat channel when something goes wrong in the cluster: a pod whose
//! container is crash-looping, and each `Warning` Event, posted once each to
//! a Slack-compatible incoming webhook (`{"text": ...}`; Mattermost, Rocket.Chat
//! and Teams' Slack connector take the same).
//!
//! The webhook's URL comes from the environment variable `SLACK_URL`, which
//! the manifest takes from a Secret; the manifest's `[grant.http]` lets the
//! plugin reach that host and nothing else. Without it (`kinformer check`
//! and `rbac` run `init` without reading Secrets) the plugin starts and says
//! that it posts nothing.
//!
//! A pod is reported when it starts crash-looping and again only after it
//! recovered; an Event once per object, reason and message. What the initial
//! list holds (the cache handed over at every start, swap or change of the
//! plugin's settings) was there before: a pod crash-looping in it is taken
//! note of, its Events are not reported, so a restarted or swapped notifier
//! does not post everything again. `BackOff` Events of pods are not reported
//! either, as the pod's own report says it.
//! A notification the webhook refused or that could not be sent is logged
//! and tried again on the object's next change.

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use kinformer_sdk::http::Request;
use kinformer_sdk::{Delta, DeltaType, Gvk, Handler, Registration, Result, info, warn};
use serde_json::{Value, json};

/// The environment variable holding the webhook's URL.
const URL_VARIABLE: &str = "SLACK_URL";

struct Notifier {
    url: Option<String>,
    /// Pods reported as crash-looping, until they recover.
    looping: BTreeSet<String>,
    /// Events reported: object, reason and message.
    reported: BTreeSet<(String, String, String)>,
}

impl Handler for Notifier {
    fn init(_config: &str) -> Result<(Self, Registration)> {
        let url = std::env::var(URL_VARIABLE).ok();
        if url.is_none() {
            warn!(
                "{URL_VARIABLE} is not set (the manifest's [env] names the Secret holding the webhook's URL): nothing will be posted"
            );
        }
        let registration = Registration::new("notifier", env!("CARGO_PKG_VERSION"))
            .watch(Gvk::new("", "v1", "Pod"))
            .watch(Gvk::new("", "v1", "Event"));
        Ok((Self::new(url), registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        let object = match delta.delta_type() {
            DeltaType::Deleted => None,
            _ => Some(delta.value()?),
        };
        // The initial list (at every start, swap or settings change) is the
        // cache handed over again: pods crash-looping in it were announced
        // before, so they are taken note of, not posted.
        let notification = match delta.gvk().kind.as_str() {
            "Pod" if delta.is_initial_list() => {
                self.pod(delta.key(), object.as_ref());
                None
            }
            "Pod" => self.pod(delta.key(), object.as_ref()),
            "Event" if !delta.is_initial_list() => object.as_ref().and_then(|event| self.event(event)),
            _ => None,
        };
        if let Some(notification) = notification {
            self.send(&notification);
        }
        Ok(())
    }
}

/// What to post, and what to forget should posting fail.
struct Notification {
    text: String,
    forget: Reported,
}

enum Reported {
    Pod(String),
    Event((String, String, String)),
}

impl Notifier {
    fn new(url: Option<String>) -> Self {
        Self {
            url,
            looping: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }

    /// A notification when pod `key` (`None` once deleted) starts
    /// crash-looping.
    fn pod(&mut self, key: &str, pod: Option<&Value>) -> Option<Notification> {
        let Some((container, restarts)) = pod.and_then(crash_looping) else {
            self.looping.remove(key);
            return None;
        };
        if !self.looping.insert(key.to_owned()) {
            return None;
        }
        Some(Notification {
            text: format!(
                ":rotating_light: pod {key} is crash-looping: container {container} restarted {restarts} times"
            ),
            forget: Reported::Pod(key.to_owned()),
        })
    }

    /// A notification for a `Warning` Event not reported before.
    fn event(&mut self, event: &Value) -> Option<Notification> {
        if event["type"] != "Warning" {
            return None;
        }
        let involved = &event["involvedObject"];
        let reason = event["reason"].as_str().unwrap_or_default();
        if involved["kind"] == "Pod" && reason == "BackOff" {
            return None;
        }
        let object = format!(
            "{} {}/{}",
            involved["kind"].as_str().unwrap_or("object"),
            involved["namespace"].as_str().unwrap_or_default(),
            involved["name"].as_str().unwrap_or_default()
        );
        let message = event["message"].as_str().unwrap_or_default();
        let seen = (object.clone(), reason.to_owned(), message.to_owned());
        if !self.reported.insert(seen.clone()) {
            return None;
        }
        Some(Notification {
            text: format!(":warning: {object}: {reason}: {message}"),
            forget: Reported::Event(seen),
        })
    }

    /// Posts `notification`; on failure, forgets it was reported so the
    /// object's next change tries again.
    fn send(&mut self, notification: &Notification) {
        let Some(url) = &self.url else { return };
        let sent = Request::post(url)
            .json(&json!({ "text": notification.text }))
            .map_err(|error| error.to_string())
            .and_then(|request| request.send().map_err(|error| error.to_string()));
        let failure = match sent {
            Ok(response) if response.is_success() => {
                info!("notified: {}", notification.text);
                return;
            }
            Ok(response) => format!("the webhook answered {}", response.status()),
            Err(error) => error,
        };
        warn!("not notified ({failure}): {}", notification.text);
        match &notification.forget {
            Reported::Pod(key) => self.looping.remove(key),
            Reported::Event(seen) => self.reported.remove(seen),
        };
    }
}

/// The first container of `pod` waiting in `CrashLoopBackOff`: its name and
/// restart count.
fn crash_looping(pod: &Value) -> Option<(String, u64)> {
    pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|container| container["state"]["waiting"]["reason"] == "CrashLoopBackOff")
        .map(|container| {
            (
                container["name"].as_str().unwrap_or_default().to_owned(),
                container["restartCount"].as_u64().unwrap_or_default(),
            )
        })
}

kinformer_sdk::plugin!(Notifier);
