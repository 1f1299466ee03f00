//! One Event storage behind `v1` and `events.k8s.io/v1`, as kube-apiserver keeps it: an Event written through either API is read, listed, watched and deleted through both.

use std::time::Duration;

use apiserver_sim::SimConfig;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::support::{api_error, from_json, kubectl, kubectl_run, start};

/// The next change a watch sends, skipping bookmarks.
async fn next_change<K: Clone + for<'de> serde::Deserialize<'de>>(
    watch: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
    what: &str,
) -> WatchEvent<K> {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.try_next())
            .await
            .unwrap_or_else(|_| panic!("the watch never sent {what}"))
            .expect("the watch goes on")
            .expect("the watch stays open");
        if !matches!(event, WatchEvent::Bookmark(_)) {
            return event;
        }
    }
}

/// An `events.k8s.io/v1` Event as a controller's recorder writes it.
fn recorded(name: &str, about: &str, uid: &str) -> Event {
    from_json(json!({
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "hpa-controller", "reportingInstance": "hpa-controller-0",
        "action": "Scale", "reason": "SuccessfulRescale", "type": "Normal",
        "regarding": {"kind": "HorizontalPodAutoscaler", "apiVersion": "autoscaling/v2",
                      "namespace": "default", "name": about, "uid": uid},
        "note": "New size: 3; reason: cpu resource utilization (percentage of request) above target",
    }))
}

#[tokio::test]
async fn a_watch_of_either_event_api_sees_writes_through_the_other() {
    let (server, client) = start(
        SimConfig::default()
            .controllers(false)
            .bookmark_interval(Duration::from_millis(200)),
    )
    .await;
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let events: Api<Event> = Api::default_namespaced(client);
    let rv = server.store().resource_version().to_string();
    let mut core_watch = core.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let about_web = WatchParams::default().fields("regarding.name=web");
    let mut web_watch = events.watch(&about_web, &rv).await.unwrap().boxed();

    // Recorded through events.k8s.io, seen as a v1 Event.
    let created = events
        .create(&PostParams::default(), &recorded("web.1", "web", "u1"))
        .await
        .unwrap();
    let WatchEvent::Added(seen) = next_change(&mut core_watch, "the recorded Event as v1").await else {
        panic!("expected the recorded Event added");
    };
    assert_eq!(seen.resource_version(), created.resource_version());
    assert_eq!(seen.involved_object.name.as_deref(), Some("web"));
    assert_eq!(seen.message, created.note);
    assert_eq!(seen.reporting_component.as_deref(), Some("hpa-controller"));
    assert_eq!(seen.action.as_deref(), Some("Scale"));
    assert_eq!(seen.event_time, created.event_time);
    assert!(
        matches!(next_change(&mut web_watch, "the recorded Event").await, WatchEvent::Added(e) if e.name_any() == "web.1")
    );

    // Written through v1, seen (and selected) as events.k8s.io Events.
    for (name, about, reason) in [("db.1", "db", "BackOff"), ("web.2", "web", "Pulled")] {
        let event: CoreEvent = from_json(json!({
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": about},
            "reason": reason, "message": format!("{reason} of {about}"), "type": "Warning",
            "source": {"component": "kubelet", "host": "node-0"}, "count": 2,
        }));
        core.create(&PostParams::default(), &event).await.unwrap();
    }
    let WatchEvent::Added(pulled) = next_change(&mut web_watch, "the v1 Event about web").await else {
        panic!("expected the v1 Event about web added, and not the one about db");
    };
    assert_eq!(pulled.name_any(), "web.2");
    assert_eq!(pulled.note.as_deref(), Some("Pulled of web"));
    assert_eq!(pulled.deprecated_count, Some(2));
    assert_eq!(
        pulled.deprecated_source.and_then(|source| source.host).as_deref(),
        Some("node-0")
    );

    // Each API reads and selects by its own fields.
    let by = |selector: &'static str| {
        let events = events.clone();
        async move {
            let listed = events.list(&ListParams::default().fields(selector)).await.unwrap();
            listed.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        }
    };
    assert_eq!(by("regarding.name=web").await, ["web.1", "web.2"]);
    assert_eq!(by("reportingController=hpa-controller").await, ["web.1"]);
    assert_eq!(by("regarding.kind=Pod,type=Warning").await, ["db.1", "web.2"]);
    let unsupported = events
        .list(&ListParams::default().fields("involvedObject.name=web"))
        .await;
    assert_eq!(
        api_error(unsupported.unwrap_err()).code,
        400,
        "v1's field names are not events.k8s.io's"
    );
    let core_listed = core
        .list(&ListParams::default().fields("reportingComponent=hpa-controller"))
        .await
        .unwrap();
    assert_eq!(core_listed.items.len(), 1);
    assert_eq!(
        core.get("web.1").await.unwrap().resource_version(),
        created.resource_version()
    );

    // Deleted through v1: gone from both, and the events.k8s.io watch says so.
    core.delete("web.1", &DeleteParams::default()).await.unwrap();
    assert!(
        matches!(next_change(&mut web_watch, "the deletion").await, WatchEvent::Deleted(e) if e.name_any() == "web.1")
    );
    assert_eq!(api_error(events.get("web.1").await.unwrap_err()).code, 404);

    // Its bookmarks are the events.k8s.io kind's.
    let bookmark = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), web_watch.try_next())
            .await
            .expect("the watch never sent a bookmark")
            .unwrap()
            .unwrap();
        if let WatchEvent::Bookmark(bookmark) = event {
            break bookmark;
        }
    };
    assert_eq!(bookmark.types.api_version, "events.k8s.io/v1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_events_and_describe_hpa_show_an_event_recorded_through_the_events_api() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let hpas: Api<HorizontalPodAutoscaler> = Api::default_namespaced(client.clone());
    let hpa: HorizontalPodAutoscaler = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 10},
    }));
    let uid = hpas.create(&PostParams::default(), &hpa).await.unwrap().uid().unwrap();
    let events: Api<Event> = Api::default_namespaced(client);
    events
        .create(&PostParams::default(), &recorded("web.1", "web", &uid))
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let listed = kubectl_run(&server, dir.path(), &["get", "events", "-A"]).await;
    let line = listed
        .lines()
        .find(|line| line.contains("SuccessfulRescale"))
        .unwrap_or_else(|| panic!("no SuccessfulRescale in:\n{listed}"));
    assert!(
        line.contains("horizontalpodautoscaler/web") && line.contains("New size: 3"),
        "{line}"
    );
    let described = kubectl_run(&server, dir.path(), &["describe", "hpa", "web"]).await;
    let events_section = described.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events_section.contains("SuccessfulRescale") && events_section.contains("New size: 3"),
        "{described}"
    );
}
