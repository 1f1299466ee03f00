//! What the notifier reports, natively: which changes make a notification.
#![allow(clippy::unwrap_used, reason = "tests fail by panicking")]

use serde_json::{Value, json};

use super::Notifier;

fn pod(waiting: Option<&str>) -> Value {
    let state = match waiting {
        Some(reason) => json!({"waiting": {"reason": reason}}),
        None => json!({"running": {}}),
    };
    json!({"status": {"containerStatuses": [{"name": "app", "restartCount": 4, "state": state}]}})
}

fn event(kind: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "reason": reason, "message": message,
           "involvedObject": {"kind": "Deployment", "namespace": "shop", "name": "web"}})
}

#[test]
fn a_crash_loop_is_reported_once_until_the_pod_recovers() {
    let mut notifier = Notifier::new(Some("https://hooks.example/".into()));
    let looping = pod(Some("CrashLoopBackOff"));
    let text = notifier.pod("shop/web-0", Some(&looping)).unwrap().text;
    assert_eq!(
        text,
        ":rotating_light: pod shop/web-0 is crash-looping: container app restarted 4 times"
    );
    assert!(notifier.pod("shop/web-0", Some(&looping)).is_none());
    assert!(
        notifier
            .pod("shop/web-0", Some(&pod(Some("ContainerCreating"))))
            .is_none()
    );
    assert!(notifier.pod("shop/web-0", Some(&looping)).is_some());
    assert!(notifier.pod("shop/web-0", None).is_none());
    assert!(notifier.pod("shop/web-0", Some(&looping)).is_some());
    assert!(notifier.pod("shop/web-1", Some(&pod(None))).is_none());
}

#[test]
fn each_warning_event_is_reported_once_and_normal_events_and_pod_back_offs_never() {
    let mut notifier = Notifier::new(Some("https://hooks.example/".into()));
    let failed = event("Warning", "FailedGetResourceMetric", "no metrics");
    assert_eq!(
        notifier.event(&failed).unwrap().text,
        ":warning: Deployment shop/web: FailedGetResourceMetric: no metrics"
    );
    assert!(notifier.event(&failed).is_none());
    assert!(
        notifier
            .event(&event("Warning", "FailedGetResourceMetric", "metrics back, then gone"))
            .is_some()
    );
    assert!(
        notifier
            .event(&event("Normal", "ScalingReplicaSet", "scaled"))
            .is_none()
    );
    let mut back_off = event("Warning", "BackOff", "restarting");
    back_off["involvedObject"]["kind"] = json!("Pod");
    assert!(notifier.event(&back_off).is_none());
}
