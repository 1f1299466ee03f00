//! client-go's event recorder, for one plugin: repeats of an event counted in
//! one Event's series, a spam filter per object, and the writer's
//! [`Writer::record_event`] that follows them.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::GroupVersionKind;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::WriteError;
use super::audit::Audited;
use super::request::{Body, EventType, ObjectRef, Prepared, cut};
use super::writer::Writer;
use crate::grant::Verb;
use crate::rate::TokenBucket;
use kinformer_informers::Recover as _;

/// A repeat this soon after the last occurrence counts in the same Event.
pub const SERIES_WINDOW: Duration = Duration::from_secs(10 * 60);
/// Events about one object let through at once (client-go's spam filter).
pub const SPAM_BURST: u32 = 25;
/// After the burst, one event about an object per this long.
pub const SPAM_REFILL: Duration = Duration::from_secs(5 * 60);
/// How many series and objects the recorder remembers, as client-go's LRU.
const REMEMBERED: usize = 4096;
/// The longest reason or action (the Events API's limit).
const MAX_REASON_LEN: usize = 128;
/// The longest note (the Events API's limit).
const MAX_NOTE_LEN: usize = 1024;

/// What makes two events the same: the object, type, reason, action and note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct EventKey {
    /// The object the event is about (never a subresource).
    pub(super) regarding: ObjectRef,
    /// `Normal` or `Warning`.
    pub(super) event_type: EventType,
    /// Why, in UpperCamelCase (`ScaledUp`).
    pub(super) reason: String,
    /// What was done or failed (`Scale`).
    pub(super) action: String,
    /// For humans.
    pub(super) note: String,
}

impl EventKey {
    /// An event about `regarding` (its subresource, if any, is left out).
    ///
    /// # Errors
    ///
    /// [`WriteError::Invalid`] when the object's reference, the reason or the
    /// action is malformed, or one of them or the note is over the Events
    /// API's limits.
    pub(super) fn new(
        mut regarding: ObjectRef,
        event_type: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<Self, WriteError> {
        regarding.subresource = None;
        regarding.check()?;
        for (what, value) in [("reason", &reason), ("action", &action)] {
            if value.is_empty() || value.len() > MAX_REASON_LEN {
                return Err(WriteError::Invalid(format!(
                    "an event's {what} is 1 to {MAX_REASON_LEN} bytes; this one is {}",
                    value.len()
                )));
            }
        }
        if note.len() > MAX_NOTE_LEN {
            return Err(WriteError::Invalid(format!(
                "an event's note is at most {MAX_NOTE_LEN} bytes; this one is {}",
                note.len()
            )));
        }
        Ok(Self {
            regarding,
            event_type,
            reason,
            action,
            note,
        })
    }

    /// The namespace the Event lives in: the object's, or `default` for a
    /// cluster-scoped object.
    #[must_use]
    pub(super) fn namespace(&self) -> &str {
        self.regarding.namespace.as_deref().unwrap_or("default")
    }
}

/// What to do with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum EventStep {
    /// Create a new Event.
    Create,
    /// Patch the Event `name`'s series to count `count` occurrences.
    Bump {
        /// The Event's name (in [`EventKey::namespace`]).
        name: String,
        /// The occurrences so far, this one included.
        count: u32,
    },
    /// Drop it: the plugin recorded too many events about the object.
    Throttled,
}

/// A plugin's events so far: the series still open, and a token bucket per
/// object. Every step takes the time, so tests drive it with a plain
/// `Instant`.
#[derive(Debug, Default)]
pub(super) struct EventRecorder {
    series: HashMap<EventKey, Series>,
    spam: HashMap<ObjectRef, TokenBucket>,
}

#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: u32,
    last: Instant,
}

impl EventRecorder {
    /// What to do with `key` at `now`: throttled when the object's bucket is
    /// empty (each call takes a token), else a bump of the open series (its
    /// last occurrence within [`SERIES_WINDOW`]) or a new Event.
    pub(super) fn step(&mut self, key: &EventKey, now: Instant) -> EventStep {
        if !self.spam.contains_key(&key.regarding) && self.spam.len() >= REMEMBERED {
            self.spam.retain(|_, bucket| !bucket.is_full(now));
            if self.spam.len() >= REMEMBERED
                && let Some(any) = self.spam.keys().next().cloned()
            {
                self.spam.remove(&any);
            }
        }
        let bucket = self
            .spam
            .entry(key.regarding.clone())
            .or_insert_with(|| TokenBucket::new(1.0 / SPAM_REFILL.as_secs_f64(), SPAM_BURST));
        if !bucket.try_take(now) {
            return EventStep::Throttled;
        }
        match self.series.get(key) {
            Some(series) if now.saturating_duration_since(series.last) <= SERIES_WINDOW => EventStep::Bump {
                name: series.name.clone(),
                count: series.count.saturating_add(1),
            },
            _ => EventStep::Create,
        }
    }

    /// Remembers that `key`'s Event `name` was created at `now`.
    pub(super) fn created(&mut self, key: &EventKey, name: &str, now: Instant) {
        if !self.series.contains_key(key) && self.series.len() >= REMEMBERED {
            self.series
                .retain(|_, series| now.saturating_duration_since(series.last) <= SERIES_WINDOW);
            if self.series.len() >= REMEMBERED
                && let Some(oldest) = self
                    .series
                    .iter()
                    .min_by_key(|(_, series)| series.last)
                    .map(|(key, _)| key.clone())
            {
                self.series.remove(&oldest);
            }
        }
        self.series.insert(
            key.clone(),
            Series {
                name: name.to_owned(),
                count: 1,
                last: now,
            },
        );
    }

    /// Remembers that `key`'s series now counts `count`, at `now`.
    pub(super) fn bumped(&mut self, key: &EventKey, count: u32, now: Instant) {
        if let Some(series) = self.series.get_mut(key) {
            series.count = count;
            series.last = now;
        }
    }

    /// Forgets `key`'s series (its Event is gone): the next one is created.
    pub(super) fn forget(&mut self, key: &EventKey) {
        self.series.remove(key);
    }

    /// How many series and buckets it remembers.
    #[must_use]
    #[cfg(test)]
    pub(super) fn remembered(&self) -> (usize, usize) {
        (self.series.len(), self.spam.len())
    }
}

/// A new Event's name: the object's, then the time in hex nanoseconds, as
/// client-go names them; the object's name is cut to leave room for the time.
pub(super) fn event_name(regarding: &str, now: Timestamp) -> String {
    let prefix = cut(regarding, 220).trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{prefix}.{:x}", now.as_nanosecond())
}

/// Who reports a plugin's events: `kinformer/<plugin>`, the plugin's name made
/// a valid qualified name.
pub(super) fn reporting_controller(plugin: &str) -> String {
    let name: String = plugin
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let name = name.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("kinformer/{}", if name.is_empty() { "plugin" } else { name })
}

fn micro_time(now: Timestamp) -> Value {
    serde_json::to_value(MicroTime(now)).unwrap_or(Value::Null)
}

/// The `events.k8s.io/v1` Event `name` for `key`, reported by `controller`
/// from `instance` at `now`.
pub(super) fn new_event(key: &EventKey, name: &str, controller: &str, instance: &str, now: Timestamp) -> Value {
    let regarding = &key.regarding;
    let mut reference = json!({
        "apiVersion": regarding.gvk.api_version(),
        "kind": regarding.gvk.kind,
        "name": regarding.name,
    });
    if let Some(namespace) = &regarding.namespace {
        reference["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": key.namespace()},
        "eventTime": micro_time(now),
        "reportingController": controller,
        "reportingInstance": instance,
        "regarding": reference,
        "type": key.event_type.as_str(),
        "reason": key.reason,
        "action": key.action,
        "note": key.note,
    })
}

/// The merge patch that counts `count` occurrences, the last at `now`.
pub(super) fn series_patch(count: u32, now: Timestamp) -> Value {
    json!({"series": {"count": count, "lastObservedTime": micro_time(now)}})
}

/// Recording Events through a plugin's writer: admitted and audited as its
/// writes are, with client-go's series and spam filter.
impl Writer {
    /// Records an `events.k8s.io/v1` Event about `regarding` in its namespace
    /// (`default` for a cluster-scoped object), as `kinformer/<plugin>`. A
    /// repeat within ten minutes of the last patches the Event's series
    /// instead; more than 25 events about one object, then more than one per
    /// five minutes, are throttled. Needs `create` on `events.k8s.io/v1/Event`.
    ///
    /// # Errors
    ///
    /// As [`Writer::write`].
    pub async fn record_event(
        &self,
        regarding: ObjectRef,
        event_type: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<(), WriteError> {
        let key = match EventKey::new(regarding.clone(), event_type, reason, action, note) {
            Ok(key) => key,
            Err(error) => {
                let key = cut(&regarding.key(), 80).to_owned();
                return self.event_refused("events.k8s.io/v1/Event".into(), key, error);
            }
        };
        let namespace = key.namespace().to_owned();
        let events = ObjectRef::new(
            GroupVersionKind::gvk("events.k8s.io", "v1", "Event"),
            Some(&namespace),
            "",
        );
        if let Err(error) = self.admit(Verb::Create, &events) {
            return self.event_refused(events.resource(), format!("{namespace}/"), error);
        }
        let started = Instant::now();
        let step = self.events().step(&key, started);
        let (name, count) = match step {
            EventStep::Throttled => {
                let error = WriteError::Throttled(format!(
                    "more than {SPAM_BURST} events about {}, then more than one per {} minutes",
                    key.regarding.key(),
                    SPAM_REFILL.as_secs() / 60
                ));
                return self.event_refused(events.resource(), format!("{namespace}/"), error);
            }
            EventStep::Create => (None, 1),
            EventStep::Bump { name, count } => (Some(name), count),
        };
        if let Some(name) = name {
            let now = Timestamp::now();
            let mut target = events.clone();
            target.name = name;
            let patch = series_patch(count, now);
            let prepared = Prepared {
                verb: Verb::Patch,
                target,
                force: false,
                text: Some(patch.to_string()),
                body: Body::Merge(patch),
            };
            let result = self.timed(self.send(&prepared)).await;
            match result {
                Err(WriteError::NotFound(_)) => self.events().forget(&key),
                result => {
                    if result.is_ok() {
                        self.events().bumped(&key, count, started);
                    }
                    return self.audit(self.audited(&prepared), result.map(|_| ()));
                }
            }
        }
        let now = Timestamp::now();
        let mut target = events;
        target.name = event_name(&key.regarding.name, now);
        let event = new_event(
            &key,
            &target.name,
            &self.inner.controller,
            &self.inner.cluster.instance,
            now,
        );
        let prepared = Prepared {
            verb: Verb::Create,
            target: target.clone(),
            force: false,
            text: Some(event.to_string()),
            body: Body::Object(event),
        };
        let result = self.timed(self.send(&prepared)).await;
        if result.is_ok() && !self.inner.dry_run {
            self.events().created(&key, &target.name, started);
        }
        self.audit(self.audited(&prepared), result.map(|_| ()))
    }

    /// An Event refused before anything was sent, audited as a create.
    fn event_refused(&self, resource: String, key: String, error: WriteError) -> Result<(), WriteError> {
        let audited = Audited {
            verb: "create",
            resource,
            key,
            body: None,
        };
        self.audit(audited, Err(error))
    }

    /// [`Writer::record_event`], waiting on the runtime: for a thread that is
    /// not one of its async tasks, such as a plugin's worker.
    ///
    /// # Errors
    ///
    /// As [`Writer::record_event`].
    ///
    /// # Panics
    ///
    /// When called from an async task.
    pub fn record_event_blocking(
        &self,
        regarding: ObjectRef,
        event_type: EventType,
        reason: String,
        action: String,
        note: String,
    ) -> Result<(), WriteError> {
        let writer = self.clone();
        self.wait_for(async move { writer.record_event(regarding, event_type, reason, action, note).await })
    }

    fn events(&self) -> std::sync::MutexGuard<'_, EventRecorder> {
        self.inner.events.lock().recover()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::GroupVersionKind;

    const MINUTE: Duration = Duration::from_secs(60);

    fn pod(name: &str) -> ObjectRef {
        ObjectRef::new(GroupVersionKind::gvk("", "v1", "Pod"), Some("a"), name)
    }

    fn key(object: &str, note: &str) -> EventKey {
        EventKey::new(
            pod(object),
            EventType::Normal,
            "Scaled".into(),
            "Scale".into(),
            note.into(),
        )
        .unwrap()
    }

    #[test]
    fn a_repeat_within_ten_minutes_of_the_last_bumps_the_series() {
        let mut recorder = EventRecorder::default();
        let start = Instant::now();
        let scaled = key("web", "to 3");
        assert_eq!(recorder.step(&scaled, start), EventStep::Create);
        recorder.created(&scaled, "web.1", start);
        let bump = |count| EventStep::Bump {
            name: "web.1".into(),
            count,
        };
        assert_eq!(recorder.step(&scaled, start + 9 * MINUTE), bump(2));
        recorder.bumped(&scaled, 2, start + 9 * MINUTE);
        // Ten minutes after the last occurrence, not after the first.
        assert_eq!(recorder.step(&scaled, start + 19 * MINUTE), bump(3));
        recorder.bumped(&scaled, 3, start + 19 * MINUTE);
        assert_eq!(recorder.step(&scaled, start + 30 * MINUTE), EventStep::Create);
    }

    #[test]
    fn events_differing_in_anything_are_separate_events() {
        let mut recorder = EventRecorder::default();
        let now = Instant::now();
        let scaled = key("web", "to 3");
        recorder.created(&scaled, "web.1", now);
        let mut warning = scaled.clone();
        warning.event_type = EventType::Warning;
        let mut reason = scaled.clone();
        reason.reason = "Other".into();
        for other in [key("web", "to 4"), key("db", "to 3"), warning, reason] {
            assert_eq!(recorder.step(&other, now), EventStep::Create, "{other:?}");
        }
        // Once its Event is gone, a repeat creates another.
        recorder.forget(&scaled);
        assert_eq!(recorder.step(&scaled, now), EventStep::Create);
    }

    #[test]
    fn the_spam_filter_lets_25_through_then_one_per_five_minutes_per_object() {
        let mut recorder = EventRecorder::default();
        let start = Instant::now();
        let steps: Vec<EventStep> = (0..30)
            .map(|i| recorder.step(&key("web", &i.to_string()), start))
            .collect();
        assert_eq!(steps.iter().filter(|step| **step == EventStep::Create).count(), 25);
        assert!(steps[25..].iter().all(|step| *step == EventStep::Throttled));
        // Another object has a bucket of its own.
        assert_eq!(recorder.step(&key("db", "x"), start), EventStep::Create);
        assert_eq!(
            recorder.step(&key("web", "y"), start + 4 * MINUTE),
            EventStep::Throttled
        );
        assert_eq!(recorder.step(&key("web", "y"), start + 5 * MINUTE), EventStep::Create);
        assert_eq!(
            recorder.step(&key("web", "z"), start + 5 * MINUTE),
            EventStep::Throttled
        );
        // Repeats of a series take tokens too.
        let mut recorder = EventRecorder::default();
        let same = key("web", "same");
        recorder.created(&same, "web.1", start);
        let bumps = (0..30)
            .filter(|_| matches!(recorder.step(&same, start), EventStep::Bump { .. }))
            .count();
        assert_eq!(bumps, 25);
    }

    #[test]
    fn the_recorder_remembers_a_bounded_number_of_series_and_objects() {
        let mut recorder = EventRecorder::default();
        let now = Instant::now();
        for i in 0..REMEMBERED + 100 {
            let key = key(&format!("pod-{i}"), "");
            assert_eq!(recorder.step(&key, now), EventStep::Create);
            recorder.created(&key, &format!("pod-{i}.1"), now);
        }
        let (series, buckets) = recorder.remembered();
        assert!(series <= REMEMBERED && buckets <= REMEMBERED, "{series} {buckets}");
    }

    #[test]
    fn malformed_or_oversized_events_are_invalid() {
        let make = |reason: &str, action: &str, note: &str| {
            EventKey::new(pod("web"), EventType::Normal, reason.into(), action.into(), note.into())
        };
        assert!(make("", "Scale", "").is_err());
        assert!(make("Scaled", &"a".repeat(129), "").is_err());
        assert!(make("Scaled", "Scale", &"n".repeat(1025)).is_err());
        assert!(EventKey::new(pod("a/b"), EventType::Normal, "R".into(), "A".into(), String::new()).is_err());
        let node = ObjectRef::new(GroupVersionKind::gvk("", "v1", "Node"), None, "n1").subresource("status");
        let key = EventKey::new(node, EventType::Warning, "R".into(), "A".into(), String::new()).unwrap();
        assert_eq!(key.namespace(), "default");
        assert_eq!(key.regarding.subresource, None);
    }

    #[test]
    fn an_event_is_written_as_the_events_api_wants_it() {
        let now: Timestamp = "2026-03-01T12:00:00.123456789Z".parse().unwrap();
        let scaled = key("web", "to 3");
        let event = new_event(&scaled, "web.1", "kinformer/hpa", "host-1", now);
        assert_eq!(
            event,
            json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "web.1", "namespace": "a"},
                "eventTime": "2026-03-01T12:00:00.123456Z",
                "reportingController": "kinformer/hpa",
                "reportingInstance": "host-1",
                "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "a"},
                "type": "Normal",
                "reason": "Scaled",
                "action": "Scale",
                "note": "to 3",
            })
        );
        assert_eq!(
            series_patch(2, now),
            json!({"series": {"count": 2, "lastObservedTime": "2026-03-01T12:00:00.123456Z"}})
        );
        assert_eq!(event_name("web", now), format!("web.{:x}", now.as_nanosecond()));
        assert!(event_name(&"w".repeat(253), now).len() <= 253);
        assert_eq!(reporting_controller("shop policy!"), "kinformer/shop-policy");
        assert_eq!(reporting_controller("---"), "kinformer/plugin");
    }
}
