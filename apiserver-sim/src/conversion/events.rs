//! `events.k8s.io/v1` Events as the `v1` Events they are stored as, and back.
//!
//! Both are one Go type inside kube-apiserver; the versions rename seven
//! fields and share the rest. Each side is written as Go's encoder writes
//! its type: a struct field or a timestamp without `omitempty` is always
//! there (`{}`, `null`), an empty `omitempty` string, count or pointer is
//! left out.

use serde_json::{Map, Value, json};

/// The fields the versions name differently: (`v1`, `events.k8s.io/v1`).
const RENAMED: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// How Go writes a version's fields when they are empty.
struct Encoding {
    api_version: &'static str,
    /// Written even when empty: objects as `{}`, timestamps as `null`,
    /// strings as `""`.
    always: &'static [(&'static str, Zero)],
    /// Left out when empty.
    omitted: &'static [&'static str],
}

#[derive(Clone, Copy)]
enum Zero {
    Object,
    Time,
    Text,
}

const CORE: Encoding = Encoding {
    api_version: "v1",
    always: &[
        ("involvedObject", Zero::Object),
        ("source", Zero::Object),
        ("firstTimestamp", Zero::Time),
        ("lastTimestamp", Zero::Time),
        ("eventTime", Zero::Time),
        ("reportingComponent", Zero::Text),
        ("reportingInstance", Zero::Text),
    ],
    omitted: &["reason", "message", "count", "type", "series", "action", "related"],
};

const EVENTS: Encoding = Encoding {
    api_version: "events.k8s.io/v1",
    always: &[
        ("eventTime", Zero::Time),
        ("regarding", Zero::Object),
        ("deprecatedSource", Zero::Object),
        ("deprecatedFirstTimestamp", Zero::Time),
        ("deprecatedLastTimestamp", Zero::Time),
    ],
    omitted: &[
        "series",
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
        "related",
        "note",
        "type",
        "deprecatedCount",
    ],
};

/// An `events.k8s.io/v1` Event as a `v1` Event.
pub(super) fn to_core(event: &Value) -> Value {
    let rename = |field: &str| {
        RENAMED
            .iter()
            .find(|(_, events)| *events == field)
            .map(|(core, _)| *core)
    };
    convert(event, rename, &CORE)
}

/// A `v1` Event as an `events.k8s.io/v1` Event.
pub(super) fn from_core(event: &Value) -> Value {
    let rename = |field: &str| {
        RENAMED
            .iter()
            .find(|(core, _)| *core == field)
            .map(|(_, events)| *events)
    };
    convert(event, rename, &EVENTS)
}

fn convert(event: &Value, rename: impl Fn(&str) -> Option<&'static str>, encoding: &Encoding) -> Value {
    let Some(fields) = event.as_object() else {
        return event.clone();
    };
    let mut out: Map<String, Value> = fields
        .iter()
        .map(|(field, value)| (rename(field).unwrap_or(field).to_owned(), value.clone()))
        .collect();
    out.insert("apiVersion".into(), json!(encoding.api_version));
    out.retain(|field, value| !(encoding.omitted.contains(&field.as_str()) && is_empty(value)));
    for (field, zero) in encoding.always {
        if out.get(*field).is_none_or(Value::is_null) {
            let zero = match zero {
                Zero::Object => json!({}),
                Zero::Time => Value::Null,
                Zero::Text => json!(""),
            };
            out.insert((*field).to_owned(), zero);
        }
    }
    Value::Object(out)
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Number(number) => number.as_f64() == Some(0.0),
        _ => false,
    }
}

/// The stored field an `events.k8s.io/v1` field selector label selects by,
/// as kube-apiserver's field label conversion maps it.
pub(super) fn field_label(label: &str) -> Option<&'static str> {
    Some(match label {
        "metadata.name" => "metadata.name",
        "metadata.namespace" => "metadata.namespace",
        "reason" => "reason",
        "type" => "type",
        "source" => "source",
        "reportingController" => "reportingComponent",
        "regarding.kind" => "involvedObject.kind",
        "regarding.namespace" => "involvedObject.namespace",
        "regarding.name" => "involvedObject.name",
        "regarding.uid" => "involvedObject.uid",
        "regarding.apiVersion" => "involvedObject.apiVersion",
        "regarding.resourceVersion" => "involvedObject.resourceVersion",
        "regarding.fieldPath" => "involvedObject.fieldPath",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_events_api_event_reads_as_a_core_event_with_gos_empty_fields_and_back() {
        let recorded = json!({
            "kind": "Event", "apiVersion": "events.k8s.io/v1",
            "metadata": {"name": "web.1", "namespace": "shop"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reportingController": "hpa-controller", "reportingInstance": "hpa-controller-0",
            "action": "Scale", "reason": "SuccessfulRescale", "type": "Normal",
            "regarding": {"kind": "HorizontalPodAutoscaler", "namespace": "shop", "name": "web"},
            "note": "New size: 3",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
        });
        let core = to_core(&recorded);
        assert_eq!(
            core,
            json!({
                "kind": "Event", "apiVersion": "v1",
                "metadata": {"name": "web.1", "namespace": "shop"},
                "involvedObject": {"kind": "HorizontalPodAutoscaler", "namespace": "shop", "name": "web"},
                "reason": "SuccessfulRescale", "message": "New size: 3", "type": "Normal", "action": "Scale",
                "source": {}, "firstTimestamp": null, "lastTimestamp": null,
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
                "reportingComponent": "hpa-controller", "reportingInstance": "hpa-controller-0",
            })
        );
        let mut back = from_core(&core);
        back.as_object_mut()
            .unwrap()
            .retain(|_, value| !value.is_null() && *value != json!({}));
        assert_eq!(back, recorded);
    }

    #[test]
    fn a_core_event_reads_with_its_source_timestamps_and_count_deprecated() {
        let core = json!({
            "kind": "Event", "apiVersion": "v1", "metadata": {"name": "x"},
            "involvedObject": {"kind": "Pod", "name": "web-1"},
            "reason": "BackOff", "message": "Back-off restarting failed container",
            "source": {"component": "kubelet", "host": "node-0"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
            "count": 4, "type": "Warning", "eventTime": null,
            "reportingComponent": "", "reportingInstance": "",
        });
        let event = from_core(&core);
        assert_eq!(event["regarding"]["name"], "web-1");
        assert_eq!(event["note"], "Back-off restarting failed container");
        assert_eq!(event["deprecatedSource"]["host"], "node-0");
        assert_eq!(event["deprecatedLastTimestamp"], "2026-01-01T00:05:00Z");
        assert_eq!(event["deprecatedCount"], 4);
        assert_eq!(event["eventTime"], Value::Null);
        for left_out in [
            "reportingController",
            "reportingInstance",
            "involvedObject",
            "message",
            "count",
        ] {
            assert!(event.get(left_out).is_none(), "{left_out} in {event}");
        }
        assert_eq!(to_core(&event), core);
    }
}
